"""`solaris data fetch` against the real package index: the recbole wheel's MovieLens-100K."""

from __future__ import annotations

from pathlib import Path

import pytest

from solaris.config import DataConfig
from solaris.examples.movielens.data import MovieLens
from solaris.examples.movielens.fetch import DataFetchError, fetch_movielens, is_fetched


@pytest.mark.integration
def test_fetch_unpacks_movielens_from_the_recbole_wheel(tmp_path: Path) -> None:
    cfg = DataConfig(cache_dir=tmp_path / "cache")
    folder = fetch_movielens(cfg)
    assert is_fetched(cfg)
    data = MovieLens.load(folder)
    assert (len(data.ratings), len(data.users), len(data.items)) == (100_000, 943, 1682)
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".fetch-")]
    # A second fetch reuses the cache without downloading.
    stamp = (folder / "ml-100k.inter").stat().st_mtime_ns
    assert fetch_movielens(cfg) == folder
    assert (folder / "ml-100k.inter").stat().st_mtime_ns == stamp


@pytest.mark.integration
def test_fetch_of_an_unknown_version_fails_clearly_and_leaves_nothing(tmp_path: Path) -> None:
    cfg = DataConfig(cache_dir=tmp_path / "cache", recbole_version="0.0.0.404")
    with pytest.raises(DataFetchError, match=r"recbole==0\.0\.0\.404"):
        fetch_movielens(cfg)
    assert not (tmp_path / "cache" / "ml-100k").exists()
    assert not list((tmp_path / "cache").iterdir())
