"""Typed loaders for the MovieLens-100K atomic files shipped in the ``recbole`` wheel.

Each loader checks the header it expects and names the file when it finds something else;
a value that is missing, not a number or out of range is named by file, column and data row
(0-based, header excluded). The checks are vectorised; a file is re-read as text only once
the numeric parse has failed, to find the value that broke it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from solaris.errors import SolarisError
from solaris.examples.movielens.tasks import LIKE_THRESHOLD, LOVE_RATING  # re-exported

__all__ = [
    "LIKE_THRESHOLD",
    "LOVE_RATING",
    "MovieLens",
    "MovieLensFormatError",
    "load_items",
    "load_kg",
    "load_kg_links",
    "load_ratings",
    "load_users",
]

# "int" columns are parsed as float64: whole numbers beyond this would not be exact.
_EXACT_FLOAT = 2**53
# MovieLens-100K's star ratings.
_RATINGS = (1, 5)


class MovieLensFormatError(SolarisError, ValueError):
    """A MovieLens file does not look like the recbole atomic format, or holds a value that
    is missing, not a number or out of range (the message names file, column and row)."""


def _refuse(path: Path, frame: pd.DataFrame, column: str, bad: np.ndarray, what: str) -> None:
    """:class:`MovieLensFormatError` naming the first row of ``column`` flagged in ``bad``
    (a boolean mask, computed vectorised by the caller); nothing when none is flagged."""
    if bad.any():
        row = int(np.argmax(bad))
        value = frame[column].iat[row]
        shown = repr(value) if isinstance(value, str) else f"{value:g}"
        raise MovieLensFormatError(f"{path}: column '{column}': {shown} {what} at row {row}")


def _first_unparsable(path: Path, names: list[str], numeric: list[str]) -> None:
    """After the numeric parse of ``path`` failed: re-read it as text and raise naming the
    first value of the ``numeric`` columns that is not a number."""
    text = pd.read_csv(
        path,
        sep="\t",
        header=0,
        names=names,
        usecols=numeric,
        dtype="string",
        quoting=3,
        encoding="utf-8",
        encoding_errors="replace",
    )
    for column in numeric:
        unparsable = text[column].notna() & pd.to_numeric(text[column], errors="coerce").isna()
        _refuse(path, text, column, unparsable.to_numpy(), "is not a number")


def _read_atomic(path: Path, expected: dict[str, str]) -> pd.DataFrame:
    """Read a recbole atomic file (tab-separated, header ``name:type``) into typed columns."""
    if not path.is_file():
        raise MovieLensFormatError(f"{path}: file not found (run `solaris data fetch`)")
    with open(path, encoding="utf-8", errors="replace") as f:
        header = f.readline().rstrip("\n").split("\t")
    names = [h.split(":")[0] for h in header]
    missing = [c for c in expected if c not in names]
    if missing:
        raise MovieLensFormatError(f"{path}: missing columns {missing}; header is {header}")
    numeric = [c for c, t in expected.items() if t != "str"]
    try:
        frame = pd.read_csv(
            path,
            sep="\t",
            header=0,
            names=names,
            usecols=list(expected),
            dtype={c: ("string" if t == "str" else "float64") for c, t in expected.items()},
            quoting=3,
            encoding="utf-8",
            encoding_errors="replace",
        )
    except ValueError as exc:
        try:
            _first_unparsable(path, names, numeric)
        except MovieLensFormatError as named:
            raise named from exc
        raise MovieLensFormatError(f"{path}: {exc}") from exc
    for column, kind in expected.items():
        if kind != "int":
            continue
        values = frame[column].to_numpy()
        missing = np.isnan(values)
        if missing.any():
            row = int(np.argmax(missing))
            raise MovieLensFormatError(f"{path}: column '{column}': missing value at row {row}")
        whole = (values == np.floor(values)) & (np.abs(values) < _EXACT_FLOAT)
        _refuse(path, frame, column, ~whole, "is not a whole number below 2**53")
    return frame


def load_ratings(folder: Path) -> pd.DataFrame:
    """``user_id, item_id, rating, ts`` (int64, int64, int8, int64 epoch s), sorted by time."""
    path = folder / "ml-100k.inter"
    frame = _read_atomic(
        path, {"user_id": "int", "item_id": "int", "rating": "int", "timestamp": "int"}
    )
    for column in ("user_id", "item_id"):
        _refuse(path, frame, column, frame[column].to_numpy() < 0, "is not an id (ids are >= 0)")
    low, high = _RATINGS
    rating = frame["rating"].to_numpy()
    _refuse(path, frame, "rating", (rating < low) | (rating > high), f"is not in {low}..{high}")
    ratings = pd.DataFrame(
        {
            "user_id": frame["user_id"].astype("int64"),
            "item_id": frame["item_id"].astype("int64"),
            "rating": frame["rating"].astype("int8"),
            "ts": frame["timestamp"].astype("int64"),
        }
    )
    return ratings.sort_values(["ts", "user_id", "item_id"], kind="stable", ignore_index=True)


def load_users(folder: Path) -> pd.DataFrame:
    """``user_id, age, gender, occupation, zip_code``."""
    frame = _read_atomic(
        folder / "ml-100k.user",
        {"user_id": "int", "age": "int", "gender": "str", "occupation": "str", "zip_code": "str"},
    )
    return frame.astype({"user_id": "int64", "age": "int64"})


def load_items(folder: Path) -> pd.DataFrame:
    """``item_id, title, year (float, NaN when unknown), genres (list of str)``."""
    frame = _read_atomic(
        folder / "ml-100k.item",
        {"item_id": "int", "movie_title": "str", "release_year": "str", "class": "str"},
    )
    return pd.DataFrame(
        {
            "item_id": frame["item_id"].astype("int64"),
            "title": frame["movie_title"],
            "year": pd.to_numeric(frame["release_year"], errors="coerce").astype("float64"),
            "genres": frame["class"].fillna("").str.split(),
        }
    )


def load_kg_links(folder: Path) -> pd.DataFrame:
    """``item_id, entity_id``: the Freebase entity of each linked item."""
    frame = _read_atomic(folder / "ml-100k.link", {"item_id": "int", "entity_id": "str"})
    return frame.astype({"item_id": "int64"})


def load_kg(folder: Path) -> pd.DataFrame:
    """``head_id, relation_id, tail_id`` Freebase triples."""
    return _read_atomic(
        folder / "ml-100k.kg", {"head_id": "str", "relation_id": "str", "tail_id": "str"}
    )


@dataclass(frozen=True)
class MovieLens:
    """The whole data set, loaded and typed."""

    ratings: pd.DataFrame
    users: pd.DataFrame
    items: pd.DataFrame
    kg_links: pd.DataFrame
    kg: pd.DataFrame

    @classmethod
    def load(cls, folder: Path) -> MovieLens:
        return cls(
            ratings=load_ratings(folder),
            users=load_users(folder),
            items=load_items(folder),
            kg_links=load_kg_links(folder),
            kg=load_kg(folder),
        )

    def item_entities(self) -> pd.DataFrame:
        """``item_id, entity``: each item's KG neighbours (tails of its entity's triples)."""
        triples = self.kg.merge(self.kg_links, left_on="head_id", right_on="entity_id")
        pairs = triples[["item_id", "tail_id"]].rename(columns={"tail_id": "entity"})
        return pairs.drop_duplicates(ignore_index=True)
