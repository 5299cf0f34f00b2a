"""Typed loaders for the MovieLens-100K atomic files shipped in the ``recbole`` wheel.

Each loader checks the header it expects and names the file when it finds something else.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from solaris.data.tasks import LIKE_THRESHOLD, LOVE_RATING  # noqa: F401 (re-exported)
from solaris.errors import SolarisError


class MovieLensFormatError(SolarisError, ValueError):
    """A MovieLens file does not look like the recbole atomic format."""


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
        raise MovieLensFormatError(f"{path}: {exc}") from exc
    for column, kind in expected.items():
        if kind == "int" and frame[column].isna().any():
            row = int(np.flatnonzero(frame[column].isna().to_numpy())[0])
            raise MovieLensFormatError(f"{path}: column '{column}': missing value at row {row}")
    return frame


def load_ratings(folder: Path) -> pd.DataFrame:
    """``user_id, item_id, rating, ts`` (int64, int64, int8, int64 epoch s), sorted by time."""
    frame = _read_atomic(
        folder / "ml-100k.inter",
        {"user_id": "int", "item_id": "int", "rating": "int", "timestamp": "int"},
    )
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
