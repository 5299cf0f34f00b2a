"""Tests for ``solaris.examples.movielens.data`` on the fake atomic files of ``tiny_movielens``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from solaris.examples.movielens.data import (
    MovieLens,
    MovieLensFormatError,
    load_items,
    load_kg,
    load_kg_links,
    load_ratings,
    load_users,
)


def _raw(folder: Path, suffix: str) -> pd.DataFrame:
    """An atomic file read naively as strings, with the type suffixes dropped."""
    frame = pd.read_csv(folder / f"ml-100k.{suffix}", sep="\t", dtype=str, keep_default_na=False)
    return frame.rename(columns=lambda c: c.split(":")[0])


def _replace_header(path: Path, old: str, new: str) -> None:
    lines = path.read_text(encoding="utf-8").split("\n")
    assert old in lines[0]
    lines[0] = lines[0].replace(old, new)
    path.write_text("\n".join(lines), encoding="utf-8")


# --- dtypes and order --------------------------------------------------------------------


def test_ratings_dtypes_and_time_order(tiny_movielens):
    ratings = load_ratings(tiny_movielens)
    assert list(ratings.columns) == ["user_id", "item_id", "rating", "ts"]
    assert ratings.dtypes.to_dict() == {
        "user_id": np.dtype("int64"),
        "item_id": np.dtype("int64"),
        "rating": np.dtype("int8"),
        "ts": np.dtype("int64"),
    }
    assert ratings.index.equals(pd.RangeIndex(len(ratings)))
    # Sorted by ts, ties broken by user then item.
    keys = list(ratings[["ts", "user_id", "item_id"]].itertuples(index=False, name=None))
    assert keys == sorted(keys)
    assert ratings["ts"].duplicated().any()  # the fixture has same-second ratings


def test_ratings_are_the_file_rows(tiny_movielens):
    raw = _raw(tiny_movielens, "inter").astype(int)
    ratings = load_ratings(tiny_movielens)
    assert len(ratings) == len(raw) == 600
    expected = set(raw[["user_id", "item_id", "rating", "timestamp"]].itertuples(index=False))
    assert set(ratings.itertuples(index=False, name=None)) == expected
    assert ratings["rating"].between(1, 5).all()


def test_users_dtypes(tiny_movielens):
    users = load_users(tiny_movielens)
    assert list(users.columns) == ["user_id", "age", "gender", "occupation", "zip_code"]
    assert users["user_id"].dtype == np.int64
    assert users["age"].dtype == np.int64
    for column in ("gender", "occupation", "zip_code"):
        assert pd.api.types.is_string_dtype(users[column]), column
    raw = _raw(tiny_movielens, "user")
    # zip codes are strings: leading zeros and letters survive.
    assert users["zip_code"].tolist() == raw["zip_code"].tolist()
    assert "T8H1N" in set(users["zip_code"])


def test_items_columns_and_values(tiny_movielens):
    items = load_items(tiny_movielens)
    assert list(items.columns) == ["item_id", "title", "year", "genres"]
    assert items["item_id"].dtype == np.int64
    raw = _raw(tiny_movielens, "item")
    assert items["title"].tolist() == raw["movie_title"].tolist()  # spaces kept
    assert items["genres"].tolist() == [c.split() for c in raw["class"]]
    assert all(isinstance(g, list) and all(isinstance(x, str) for x in g) for g in items["genres"])
    known = raw["release_year"] != ""
    assert items["year"].isna().tolist() == (~known).tolist()
    assert items.loc[known.to_numpy(), "year"].astype(float).tolist() == [
        float(y) for y in raw.loc[known, "release_year"]
    ]


def test_items_year_is_float_with_nan(tiny_movielens):
    """Documented as float with NaN (not pandas' nullable Int64 with <NA>)."""
    year = load_items(tiny_movielens)["year"]
    assert year.dtype == np.float64
    assert np.isnan(year.iloc[-1])  # the fixture's last item has no year


def test_kg_and_links_dtypes(tiny_movielens):
    links = load_kg_links(tiny_movielens)
    assert list(links.columns) == ["item_id", "entity_id"]
    assert links["item_id"].dtype == np.int64
    assert pd.api.types.is_string_dtype(links["entity_id"])
    kg = load_kg(tiny_movielens)
    assert list(kg.columns) == ["head_id", "relation_id", "tail_id"]
    for column in kg.columns:
        assert pd.api.types.is_string_dtype(kg[column]), column
    assert len(kg) == len(_raw(tiny_movielens, "kg"))


def test_movielens_load_bundles_every_loader(tiny_movielens):
    ml = MovieLens.load(tiny_movielens)
    pd.testing.assert_frame_equal(ml.ratings, load_ratings(tiny_movielens))
    pd.testing.assert_frame_equal(ml.users, load_users(tiny_movielens))
    pd.testing.assert_frame_equal(ml.items, load_items(tiny_movielens))
    pd.testing.assert_frame_equal(ml.kg_links, load_kg_links(tiny_movielens))
    pd.testing.assert_frame_equal(ml.kg, load_kg(tiny_movielens))


def test_extra_and_reordered_columns_are_tolerated(tiny_movielens):
    path = tiny_movielens / "ml-100k.link"
    rows = path.read_text(encoding="utf-8").splitlines()[1:]
    body = ["\t".join([e, "x", i]) for i, e in (r.split("\t") for r in rows)]
    path.write_text("entity_id:token\tnote:token\titem_id:token\n" + "\n".join(body) + "\n")
    links = load_kg_links(tiny_movielens)
    assert links["item_id"].tolist() == list(range(1, len(rows) + 1))
    assert links["entity_id"].tolist() == [f"m.item{i}" for i in range(1, len(rows) + 1)]


# --- errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("suffix", "old", "new", "missing", "loader"),
    [
        ("inter", "timestamp:float", "time:float", "timestamp", load_ratings),
        ("user", "zip_code:token", "zip:token", "zip_code", load_users),
        ("item", "class:token_seq", "genre:token_seq", "class", load_items),
        ("link", "entity_id:token", "entity:token", "entity_id", load_kg_links),
        ("kg", "head_id:token", "head:token", "head_id", load_kg),
    ],
)
def test_wrong_header_names_file_and_missing_column(
    tiny_movielens, suffix, old, new, missing, loader
):
    path = tiny_movielens / f"ml-100k.{suffix}"
    _replace_header(path, old, new)
    with pytest.raises(MovieLensFormatError) as info:
        loader(tiny_movielens)
    message = str(info.value)
    assert str(path) in message
    assert repr(missing) in message


def test_format_error_is_a_value_error():
    assert issubclass(MovieLensFormatError, ValueError)


@pytest.mark.parametrize("suffix", ["inter", "user", "item", "kg", "link"])
def test_missing_file_says_to_fetch(tiny_movielens, suffix):
    path = tiny_movielens / f"ml-100k.{suffix}"
    path.unlink()
    with pytest.raises(MovieLensFormatError, match="solaris data fetch") as info:
        MovieLens.load(tiny_movielens)
    assert str(path) in str(info.value)


def test_missing_int_value_names_column_and_row(tiny_movielens):
    path = tiny_movielens / "ml-100k.inter"
    lines = path.read_text(encoding="utf-8").split("\n")
    user, item, _rating, ts = lines[3].split("\t")  # data row 2
    lines[3] = "\t".join([user, item, "", ts])
    path.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(MovieLensFormatError, match=r"column 'rating': missing value at row 2"):
        load_ratings(tiny_movielens)


def test_non_numeric_value_is_a_format_error(tiny_movielens):
    path = tiny_movielens / "ml-100k.inter"
    lines = path.read_text(encoding="utf-8").split("\n")
    lines[1] = "\t".join(["abc", *lines[1].split("\t")[1:]])
    path.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(
        MovieLensFormatError, match=r"column 'user_id': 'abc' is not a number at row 0"
    ) as info:
        load_ratings(tiny_movielens)
    assert str(info.value).startswith(f"{path}: ")


def _set_value(path: Path, row: int, column: int, value: str) -> None:
    """Replace field ``column`` of data row ``row`` (0-based, after the header)."""
    lines = path.read_text(encoding="utf-8").split("\n")
    fields = lines[row + 1].split("\t")
    fields[column] = value
    lines[row + 1] = "\t".join(fields)
    path.write_text("\n".join(lines), encoding="utf-8")


@pytest.mark.parametrize(
    ("column", "value", "message"),
    [
        (1, "-3", r"column 'item_id': -3 is not an id \(ids are >= 0\) at row 4"),
        (2, "0", r"column 'rating': 0 is not in 1\.\.5 at row 4"),
        (2, "3.5", r"column 'rating': 3\.5 is not a whole number below 2\*\*53 at row 4"),
        (0, "1e20", r"column 'user_id': 1e\+20 is not a whole number below 2\*\*53 at row 4"),
        (3, "inf", r"column 'timestamp': inf is not a whole number below 2\*\*53 at row 4"),
    ],
    ids=["negative-item", "rating-0", "rating-fraction", "id-beyond-2-pow-53", "ts-inf"],
)
def test_a_rating_value_out_of_range_names_its_column_and_row(
    tiny_movielens, column, value, message
):
    _set_value(tiny_movielens / "ml-100k.inter", 4, column, value)
    with pytest.raises(MovieLensFormatError, match=message):
        load_ratings(tiny_movielens)


def test_a_users_age_that_is_not_a_whole_number_names_its_column_and_row(tiny_movielens):
    _set_value(tiny_movielens / "ml-100k.user", 2, 1, "31.5")
    with pytest.raises(MovieLensFormatError, match=r"column 'age': 31\.5 is not a whole .* row 2"):
        load_users(tiny_movielens)


# --- item_entities -----------------------------------------------------------------------


def _bundle(links: list[tuple[int, str]], kg: list[tuple[str, str, str]]) -> MovieLens:
    empty = pd.DataFrame()
    return MovieLens(
        ratings=empty,
        users=empty,
        items=empty,
        kg_links=pd.DataFrame(links, columns=["item_id", "entity_id"]),
        kg=pd.DataFrame(kg, columns=["head_id", "relation_id", "tail_id"]),
    )


def test_item_entities_by_hand():
    ml = _bundle(
        links=[(1, "m.a"), (2, "m.b"), (3, "m.none")],
        kg=[
            ("m.a", "genre", "m.x"),
            ("m.a", "director", "m.x"),  # same tail through another relation: once
            ("m.a", "genre", "m.y"),
            ("m.b", "starring", "m.a"),  # a tail may itself be a linked entity
            ("m.c", "genre", "m.z"),  # head not linked to any item: ignored
            ("m.x", "genre", "m.a"),  # tails never act as heads for an item
        ],
    )
    got = ml.item_entities()
    assert list(got.columns) == ["item_id", "entity"]
    assert got.index.equals(pd.RangeIndex(len(got)))
    pairs = sorted(got.itertuples(index=False, name=None))
    assert pairs == [(1, "m.x"), (1, "m.y"), (2, "m.a")]


def test_item_entities_on_fixture(tiny_ml):
    link = dict(zip(tiny_ml.kg_links["entity_id"], tiny_ml.kg_links["item_id"], strict=True))
    expected = {
        (link[h], t)
        for h, t in zip(tiny_ml.kg["head_id"], tiny_ml.kg["tail_id"], strict=True)
        if h in link
    }
    got = tiny_ml.item_entities()
    pairs = list(got.itertuples(index=False, name=None))
    assert len(pairs) == len(set(pairs))  # no duplicates
    assert set(pairs) == expected
    assert (1, "m.shared") in expected  # the fixture's duplicated (head, tail)
    assert set(got["item_id"]) <= set(tiny_ml.kg_links["item_id"])
