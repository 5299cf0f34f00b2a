"""Shared fixtures: a tiny, fake MovieLens-100K in recbole atomic format.

The real MovieLens files must never be used in unit tests (their licence forbids
redistribution, and tests must not depend on the local cache), so ``tiny_movielens`` writes
a small synthetic data set with the same file names, headers and quirks:

* ~30 users, 40 items, 600 ratings (unique (user, item) pairs) over 20 days;
* ratings come in sessions: several items rated seconds apart, sometimes at the very same
  second, so many users rate several items within the same minute;
* the ``.inter`` rows are written in shuffled order (the loader must sort them);
* one item has no release year, zip codes keep leading zeros and letters;
* most items are linked to a KG entity; some KG heads are not linked items, and some
  (head, tail) pairs occur under several relations.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

from solaris.examples.movielens.data import MovieLens
from solaris.examples.movielens.settings import ADAPTERS

# Airflow reads its settings once, on first import, so the whole test session gets one
# private AIRFLOW_HOME (SQLite metadata DB inside) before any test module imports airflow;
# nothing of the developer's own Airflow is read or written.
AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="solaris-test-airflow-"))
atexit.register(shutil.rmtree, AIRFLOW_HOME, ignore_errors=True)
os.environ.update(
    AIRFLOW_HOME=str(AIRFLOW_HOME),
    AIRFLOW__CORE__DAGS_FOLDER=str(Path(__file__).resolve().parents[1] / "dags"),
    AIRFLOW__CORE__LOAD_EXAMPLES="False",
    AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="False",
    AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{AIRFLOW_HOME}/airflow.db",
)

TINY_N_USERS = 30
TINY_N_ITEMS = 40
TINY_N_RATINGS = 600
TINY_DAYS = 20
TINY_T0 = 10_185 * 86_400  # 1997-11-20 00:00 UTC, a day boundary (like ML-100K's era)
TINY_N_LINKED = 32  # items 1..32 have a KG entity

_GENRES = ("Action", "Adventure", "Animation", "Children's", "Comedy", "Drama", "Horror")
_OCCUPATIONS = ("engineer", "student", "writer", "artist", "doctor", "none")
_RELATIONS = ("film.film.genre", "film.film.directed_by", "film.film.starring")

HEADERS = {
    "inter": "user_id:token\titem_id:token\trating:float\ttimestamp:float",
    "user": "user_id:token\tage:token\tgender:token\toccupation:token\tzip_code:token",
    "item": "item_id:token\tmovie_title:token_seq\trelease_year:token\tclass:token_seq",
    "kg": "head_id:token\trelation_id:token\ttail_id:token",
    "link": "item_id:token\tentity_id:token",
}


def _write(folder: Path, suffix: str, rows: list[str]) -> None:
    text = "\n".join([HEADERS[suffix], *rows]) + "\n"
    (folder / f"ml-100k.{suffix}").write_text(text, encoding="utf-8")


def _ratings(rng: np.random.Generator) -> list[tuple[int, int, int, int]]:
    """(user, item, rating, ts): unique pairs, rated in sessions of a few seconds apart."""
    pairs = rng.choice(TINY_N_USERS * TINY_N_ITEMS, size=TINY_N_RATINGS, replace=False)
    rows = []
    for user in range(1, TINY_N_USERS + 1):
        items = rng.permutation(pairs[pairs // TINY_N_ITEMS == user - 1] % TINY_N_ITEMS + 1)
        i = 0
        while i < len(items):
            size = int(rng.integers(1, 6))
            ts = TINY_T0 + int(rng.integers(0, TINY_DAYS * 86_400 - 600))
            for item in items[i : i + size]:
                rating = int(rng.choice(5, p=[0.06, 0.11, 0.27, 0.34, 0.22])) + 1
                rows.append((user, int(item), rating, ts))
                ts += int(rng.integers(0, 25))  # 0: same second as the previous rating
            i += size
    return [rows[k] for k in rng.permutation(len(rows))]  # unsorted on disk


def write_tiny_movielens(folder: Path, seed: int = 0) -> Path:
    """Write the five ``ml-100k.*`` atomic files into ``folder``; returns ``folder``."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    _write(folder, "inter", [f"{u}\t{i}\t{r}\t{t}" for u, i, r, t in _ratings(rng)])

    users = []
    for user in range(1, TINY_N_USERS + 1):
        age = int(rng.integers(7, 74))
        gender = "MF"[int(rng.integers(2))]
        occupation = _OCCUPATIONS[int(rng.integers(len(_OCCUPATIONS)))]
        zip_code = f"{int(rng.integers(0, 100_000)):05d}" if user % 7 else "T8H1N"
        users.append(f"{user}\t{age}\t{gender}\t{occupation}\t{zip_code}")
    _write(folder, "user", users)

    items = []
    for item in range(1, TINY_N_ITEMS + 1):
        year = "" if item == TINY_N_ITEMS else str(int(rng.integers(1930, 1999)))
        n_genres = int(rng.integers(1, 4))
        genres = " ".join(sorted(rng.choice(_GENRES, size=n_genres, replace=False)))
        title = f"Movie number {item}" + (f" ({year})" if year else "")
        items.append(f"{item}\t{title}\t{year}\t{genres}")
    _write(folder, "item", items)

    _write(folder, "link", [f"{i}\tm.item{i}" for i in range(1, TINY_N_LINKED + 1)])
    triples = []
    for item in range(1, TINY_N_LINKED + 1):
        for tail in rng.choice(25, size=int(rng.integers(1, 6)), replace=False):
            relation = _RELATIONS[int(rng.integers(len(_RELATIONS)))]
            triples.append(f"m.item{item}\t{relation}\tm.e{tail}")
    triples.append(f"m.item1\t{_RELATIONS[0]}\tm.shared")  # same (head, tail) twice
    triples.append(f"m.item1\t{_RELATIONS[1]}\tm.shared")
    triples += [f"m.e{k}\t{_RELATIONS[2]}\tm.e{(k + 1) % 25}" for k in range(5)]  # unlinked heads
    _write(folder, "kg", triples)
    return folder


def tiny_solaris_config(tmp: Path, project: str, redis: str) -> dict:
    """Settings (as YAML would hold them) for a whole SOLARIS run on the tiny fake data in
    ``tmp/ml-100k``: small models, a private copy of ``feature_repo/`` and its own Feast
    project and miss stream on ``redis``."""
    repo = tmp / "feature_repo"
    shutil.copytree(
        Path(__file__).resolve().parents[1] / "feature_repo",
        repo,
        ignore=shutil.ignore_patterns("data"),
    )
    return {
        "namespace": project,
        "store": {"redis": redis, "repo_path": str(repo)},
        # fetch_movielens finds <cache_dir>/ml-100k complete and downloads nothing.
        "data": {"cache_dir": str(tmp)},
        "artifacts_dir": str(tmp / "artifacts"),
        "requests": {"retrieval_k": 8, **ADAPTERS["requests"]},
        "model": {
            **ADAPTERS["model"],
            "history_len": 5,
            "embed_dim": 4,
            "shared_dim": 16,
            "z_dim": 8,
            "kg_buckets": 64,
            "kg_entities_per_item": 4,
            "vm_hidden": 8,
        },
        "train": {"max_epochs": 2, "ae_epochs": 2, "batch_size": 64},
        "selection": {"cadence_minutes": 60, "ttl_hours": 24},
    }


@pytest.fixture(scope="session")
def tiny_config():
    """:func:`tiny_solaris_config`."""
    return tiny_solaris_config


@pytest.fixture(scope="session")
def write_movielens():
    """:func:`write_tiny_movielens`, for fixtures of a wider scope than ``tiny_movielens``."""
    return write_tiny_movielens


@pytest.fixture
def tiny_movielens(tmp_path: Path) -> Path:
    """A folder with a small fake MovieLens-100K in recbole atomic format (seeded)."""
    return write_tiny_movielens(tmp_path / "ml-100k")


@pytest.fixture
def tiny_ml(tiny_movielens: Path) -> MovieLens:
    """``MovieLens.load`` of ``tiny_movielens``."""
    return MovieLens.load(tiny_movielens)
