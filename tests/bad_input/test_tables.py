"""Bad tables: wrong dtypes, missing columns, NaN/inf, ids out of range, duplicate keys,
empty tables, times out of range and unsorted times.

They go through the public entry points that take tables: the validators of
:mod:`solaris.data.schemas` (through :func:`~solaris.data.schemas.write_table`, so an
existing file is there to be spoiled), the embedding step's shard reader
(:func:`~solaris.pipeline.embed.embed_shard`), verifier selection
(:func:`~solaris.pipeline.select.select_candidates`), the neighbour tier and the MovieLens
ratings loader. Each case checks the error's type and that its message names the table
(file), the column and the first bad row, and that no file changed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from solaris.data.schemas import SchemaError, write_table
from solaris.errors import SolarisError
from solaris.examples.movielens.data import MovieLensFormatError, load_ratings
from solaris.pipeline.embed import embed_shard
from solaris.pipeline.neighbors import NeighborsError, nearest_users, neighbour_fill
from solaris.pipeline.select import SelectionError, select_candidates

Z = 4
T0 = 880_000_000  # 1997-11-20, MovieLens-100K's era
US = 1_000_000


# --------------------------------------------------------------------------------------------
# Tables, valid unless a case overrides a column
# --------------------------------------------------------------------------------------------


def _table(columns: dict[str, Any], over: dict[str, Any], drop: tuple[str, ...]) -> pa.Table:
    merged = {**columns, **over}
    return pa.table({k: v for k, v in merged.items() if k not in drop})


def _candidates(over: dict[str, Any], drop: tuple[str, ...] = ()) -> pa.Table:
    columns = {
        "request_id": [1, 1, 2, 2],
        "user_id": [5, 5, 6, 6],
        "item_id": [10, 11, 12, 13],
        "ts": [T0, T0, T0 + 60, T0 + 60],
        "label": pa.array([1, 0, None, 0], pa.int8()),
    }
    return _table(columns, over, drop)


def _request_log(over: dict[str, Any], drop: tuple[str, ...] = ()) -> pa.Table:
    return _candidates({"score": pa.array([0.1, 0.2, 0.3, 0.4], pa.float32()), **over}, drop)


def _requests(over: dict[str, Any], drop: tuple[str, ...] = ()) -> pa.Table:
    columns = {"request_id": [1, 2, 3], "user_id": [5, 6, 7], "ts": [T0, T0 + 60, T0 + 120]}
    return _table(columns, over, drop)


def _codes(rows: list[list[Any]], value_type: pa.DataType | None = None) -> pa.Array:
    return pa.array(rows, pa.list_(value_type or pa.float32()))


def _pair_embeddings(over: dict[str, Any], drop: tuple[str, ...] = ()) -> pa.Table:
    columns = {
        "user_id": [5, 6, 7],
        "item_id": [10, 11, 12],
        "z": _codes([[0.5] * Z, [0.25] * Z, [1.0] * Z]),
        "fm_version": ["fm-1", "fm-1", "fm-1"],
        "computed_at": pa.array([T0 * US] * 3, pa.timestamp("us", tz="UTC")),
    }
    return _table(columns, over, drop)


_BUILDERS: dict[str, Callable[..., pa.Table]] = {
    "candidates": _candidates,
    "request_log": _request_log,
    "requests": _requests,
    "pair_embeddings": _pair_embeddings,
}


@dataclass(frozen=True)
class TableCase:
    """A table of ``kind`` with ``over`` columns replaced (``drop``: removed), refused with a
    message naming ``column``, ``row`` (when the problem has one) and matching ``problem``."""

    id: str
    kind: str
    over: dict[str, Any]
    column: str
    row: int | None
    problem: str
    drop: tuple[str, ...] = field(default=())

    def table(self) -> pa.Table:
        if self.id == "empty-table-without-columns":
            return pa.table({})
        return _BUILDERS[self.kind](self.over, self.drop)


NAN, INF = float("nan"), float("inf")
TABLE_CASES = [
    # candidates
    TableCase("ts-as-strings", "candidates", {"ts": ["a", "b", "c", "d"]}, "ts", None,
              r"wrong type: got string, expected int64"),
    TableCase("user-id-as-floats-with-nan", "candidates", {"user_id": [5.0, NAN, 6.0, 6.0]},
              "user_id", None, r"wrong type: got double"),
    TableCase("item-id-column-missing", "candidates", {}, "item_id", None,
              r"missing column; columns present", drop=("item_id",)),
    TableCase("negative-item-id", "candidates", {"item_id": [10, 11, -1, 13]}, "item_id", 2,
              r"1 negative ids"),
    TableCase("item-id-beyond-int64", "candidates",
              {"item_id": pa.array([10, 11, 2**63, 13], pa.uint64())}, "item_id", None,
              r"values out of range for int64"),
    TableCase("ts-unsorted", "candidates", {"ts": [T0, T0 + 60, T0, T0 + 60]}, "ts", 2,
              r"not sorted by ts"),
    TableCase("ts-null", "candidates", {"ts": [T0, None, T0 + 60, T0 + 60]}, "ts", 1,
              r"1 null values"),
    TableCase("label-outside-0-1", "candidates", {"label": [1, 0, 0, 2]}, "label", 3,
              r"values outside \{0, 1\}"),
    TableCase("ts-before-1970", "candidates", {"ts": [-60, T0, T0 + 60, T0 + 60]}, "ts", 0,
              r"outside \[0, 1e\+10\) epoch seconds"),
    TableCase("ts-in-milliseconds", "candidates",
              {"ts": [T0 * 1000, T0 * 1000, T0 * 1000 + 1, T0 * 1000 + 1]}, "ts", 0,
              r"outside \[0, 1e\+10\) epoch seconds, i\.e\. before 1970 or in milliseconds"),
    TableCase("empty-table-without-columns", "candidates", {}, "request_id", None,
              r"missing column; also missing"),
    # request log
    TableCase("score-nan", "request_log",
              {"score": pa.array([0.1, NAN, 0.3, 0.4], pa.float32())}, "score", 1,
              r"non-finite score"),
    TableCase("score-inf", "request_log", {"score": pa.array([0.1, 0.2, INF, 0.4])}, "score",
              2, r"non-finite score"),
    TableCase("score-beyond-float32", "request_log", {"score": pa.array([0.1, 0.2, 0.3, 1e300])},
              "score", 3, r"non-finite score"),
    TableCase("score-as-strings", "request_log", {"score": ["a", "b", "c", "d"]}, "score", None,
              r"wrong type: got string, expected float32"),
    TableCase("score-column-missing", "request_log", {}, "score", None, r"missing column",
              drop=("score",)),
    # requests
    TableCase("negative-request-id", "requests", {"request_id": [-1, 2, 3]}, "request_id", 0,
              r"1 negative ids"),
    TableCase("ts-as-floats-with-inf", "requests", {"ts": [float(T0), INF, float(T0)]}, "ts",
              None, r"wrong type: got double"),
    # pair embeddings
    TableCase("z-with-nan", "pair_embeddings",
              {"z": _codes([[0.5] * Z, [0.1, NAN, 0.2, 0.3], [1.0] * Z])}, "z", 1,
              r"NaN or inf values"),
    TableCase("z-beyond-float32", "pair_embeddings",
              {"z": _codes([[1e300] + [0.0] * (Z - 1), [0.5] * Z, [0.5] * Z], pa.float64())},
              "z", 0, r"NaN or inf values \(as float32"),
    TableCase("z-of-the-wrong-length", "pair_embeddings",
              {"z": _codes([[0.5] * Z, [0.5] * Z, [0.5] * (Z + 1)])}, "z", 2,
              rf"wrong length: expected d={Z}"),
    TableCase("z-of-strings", "pair_embeddings",
              {"z": _codes([["a"] * Z] * 3, pa.string())}, "z", None, r"wrong type"),
    TableCase("computed-at-as-ints", "pair_embeddings", {"computed_at": [T0, T0, T0]},
              "computed_at", None, r"wrong type: got int64, expected a timestamp"),
    TableCase("computed-at-before-1970", "pair_embeddings",
              {"computed_at": pa.array([T0 * US, -US, T0 * US], pa.timestamp("us", tz="UTC"))},
              "computed_at", 1, r"outside \[0, 1e\+10\) epoch seconds"),
    TableCase("fm-version-empty", "pair_embeddings", {"fm_version": ["fm-1", "", "fm-1"]},
              "fm_version", 1, r"1 empty strings"),
    TableCase("negative-user-id", "pair_embeddings", {"user_id": [5, 6, -7]}, "user_id", 2,
              r"1 negative ids"),
]  # fmt: skip


@pytest.mark.parametrize("case", TABLE_CASES, ids=[c.id for c in TABLE_CASES])
def test_a_bad_table_is_refused_naming_file_column_and_row_and_the_old_file_stays(
    case: TableCase, tmp_path: Path, snapshot_files
) -> None:
    target = tmp_path / "tables" / f"{case.kind}.parquet"
    z_dim = Z if case.kind == "pair_embeddings" else None
    write_table(_BUILDERS[case.kind]({}), target, case.kind, z_dim=z_dim)  # a valid old file
    snap = snapshot_files(target.parent)
    before = snap()

    with pytest.raises(SchemaError) as caught:
        write_table(case.table(), target, case.kind, z_dim=z_dim)

    error, message = caught.value, str(caught.value)
    assert isinstance(error, SolarisError) and isinstance(error, ValueError)
    assert (error.source, error.column) == (str(target), case.column)
    assert message.startswith(f"{target}: column '{case.column}': ")
    if case.row is not None:
        assert re.search(rf"\brow {case.row}\b", message), message
    assert re.search(case.problem, message), message
    assert snap() == before


# --------------------------------------------------------------------------------------------
# The embedding step: a bad candidates shard writes no pair-embedding file
# --------------------------------------------------------------------------------------------


class _Untouchable:
    """An FM or autoencoder that must not be used: the shard is refused before any work."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"the models were used ({name}) although the shard is bad")


def _write_shard(path: Path, table: pa.Table) -> None:
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)


SHARD_CASES = [
    ("shard-missing", None, None, r"cannot read parquet: no such file"),
    ("shard-not-parquet", b"PAR1 but not really", None, r"cannot read parquet"),
    ("rows-at-or-after-the-run-time", {"ts": [T0, T0, T0 + 60, T0 + 120]}, "ts",
     r"2 timestamps after as_of=880000059 \(first at row 2"),
    ("negative-user-id", {"user_id": [5, -5, 6, 6]}, "user_id", r"negative ids \(first at row 1"),
    ("ts-unsorted", {"ts": [T0 + 30, T0, T0 + 40, T0 + 40]}, "ts", r"not sorted by ts.*row 1"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("content", "column", "problem"),
    [c[1:] for c in SHARD_CASES],
    ids=[c[0] for c in SHARD_CASES],
)
def test_a_bad_candidates_shard_is_refused_before_embedding_and_writes_no_output(
    content: dict | bytes | None, column: str | None, problem: str, tmp_path: Path, snapshot_files
) -> None:
    shard = tmp_path / "shards" / "shard-0000.parquet"
    out = tmp_path / "embeddings" / "shard-0000.parquet"
    if isinstance(content, bytes):
        shard.parent.mkdir(parents=True)
        shard.write_bytes(content)
    elif content is not None:
        _write_shard(shard, _candidates(content))
    snap = snapshot_files(tmp_path)
    before = snap()

    with pytest.raises(SchemaError, match=problem) as caught:
        embed_shard(
            shard,
            out,
            fm=_Untouchable(),  # type: ignore[arg-type]
            autoencoder=_Untouchable(),  # type: ignore[arg-type]
            computed_at=T0 + 60,
            fm_version="fm-1",
        )

    assert isinstance(caught.value, SolarisError)
    assert str(caught.value).startswith(f"{shard}: ")
    assert caught.value.column == column
    assert snap() == before
    assert not out.exists()


# --------------------------------------------------------------------------------------------
# Verifier selection: ids must fit 31 bits, one request is one user at one time
# --------------------------------------------------------------------------------------------


def _selection_input() -> tuple[pd.DataFrame, np.ndarray]:
    candidates = pd.DataFrame(
        {
            "request_id": [1, 1, 2, 2],
            "user_id": [5, 5, 6, 6],
            "item_id": [10, 11, 12, 13],
            "ts": [T0, T0, T0 + 60, T0 + 60],
        }
    )
    return candidates, np.array([0.9, 0.1, 0.5, 0.4])


def _cache(**over: Any) -> pd.DataFrame:
    return pd.DataFrame({"user_id": [5], "item_id": [10], "expires_at": [T0 + 3600], **over})


SELECTION_CASES: list[tuple[str, Callable[[pd.DataFrame, np.ndarray], dict], str]] = [
    ("item-id-not-below-2-pow-31",
     lambda c, s: {"candidates": c.assign(item_id=[10, 11, 2**31, 13])},
     r"candidates: item_id 2147483648 is outside \[0, 2\*\*31\) \(first at row 2\)"),
    ("negative-user-id",
     lambda c, s: {"candidates": c.assign(user_id=[5, 5, -6, -6])},
     r"candidates: user_id -6 is outside \[0, 2\*\*31\) \(first at row 2\)"),
    ("item-id-column-missing",
     lambda c, s: {"candidates": c.drop(columns="item_id")},
     r"candidates: missing columns \['item_id'\]"),
    ("ids-as-floats",
     lambda c, s: {"candidates": c.assign(item_id=[10.0, 11.5, 12.0, 13.0])},
     r"candidates: column 'item_id' must be integers, got float64"),
    ("ts-with-nan",
     lambda c, s: {"candidates": c.assign(ts=[float(T0), np.nan, T0 + 60.0, T0 + 60.0])},
     r"candidates: column 'ts' must be integers, got float64"),
    ("ts-with-a-null",
     lambda c, s: {"candidates": c.assign(ts=pd.array([T0, None, T0 + 60, T0 + 60], "Int64"))},
     r"candidates: column 'ts' is null at row 1"),
    ("request-id-of-two-users",
     lambda c, s: {"candidates": c.assign(user_id=[5, 5, 6, 7])},
     r"candidates: request_id 2 has rows of different user_id \(row 2: 6, row 3: 7\)"),
    ("request-id-at-two-times",
     lambda c, s: {"candidates": c.assign(ts=[T0, T0 + 1, T0 + 60, T0 + 60])},
     r"candidates: request_id 1 has rows of different ts \(row 0: 880000000, row 1: 880000001\)"),
    ("fewer-scores-than-rows", lambda c, s: {"scores": s[:3]},
     r"scores: 3 values \(shape \(3,\)\) for 4 candidates"),
    ("scores-two-dimensional", lambda c, s: {"scores": s.reshape(2, 2)},
     r"scores: 4 values \(shape \(2, 2\)\) for 4 candidates"),
    ("score-nan", lambda c, s: {"scores": np.array([0.9, np.nan, 0.5, 0.4])},
     r"scores: 1 NaN \(first at row 1\)"),
    ("scores-as-strings", lambda c, s: {"scores": np.array(["a", "b", "c", "d"])},
     r"scores: must be numbers, got dtype <U1"),
    ("share-above-one", lambda c, s: {"share": 1.5},
     r"selection share must be in \(0, 1\], got 1\.5"),
    ("share-nan", lambda c, s: {"share": float("nan")}, r"selection share .* got nan"),
    ("cache-without-expires-at", lambda c, s: {"cache": _cache().drop(columns="expires_at")},
     r"cache: missing columns \['expires_at'\]"),
    ("cache-item-id-not-below-2-pow-31", lambda c, s: {"cache": _cache(item_id=[2**40])},
     r"cache: item_id 1099511627776 is outside \[0, 2\*\*31\) \(first at row 0\)"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("make", "message"), [c[1:] for c in SELECTION_CASES], ids=[c[0] for c in SELECTION_CASES]
)
def test_selection_refuses_bad_candidates_scores_cache_or_share_naming_them(
    make: Callable[[pd.DataFrame, np.ndarray], dict],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    snapshot_files,
) -> None:
    monkeypatch.chdir(tmp_path)  # selection is pure: not even a stray file may appear here
    candidates, scores = _selection_input()
    args = {"candidates": candidates, "scores": scores, "share": 0.5, "cache": _cache()}
    args.update(make(candidates, scores))
    snap = snapshot_files(tmp_path)
    before = snap()

    with pytest.raises(SelectionError, match=message) as caught:
        select_candidates(
            args["candidates"], args["scores"], share=args["share"], cache=args["cache"]
        )

    assert isinstance(caught.value, SolarisError) and isinstance(caught.value, ValueError)
    assert snap() == before


def test_the_valid_selection_input_of_these_cases_is_accepted() -> None:
    candidates, scores = _selection_input()
    chosen = select_candidates(candidates, scores, share=0.5, cache=_cache())
    assert chosen["item_id"].tolist() == [11, 12]  # item 10 is cached and fresh


# --------------------------------------------------------------------------------------------
# The neighbour tier: duplicate keys and non-finite embeddings
# --------------------------------------------------------------------------------------------


def test_nearest_users_refuses_a_duplicate_user_id_naming_it_and_its_row() -> None:
    emb = np.eye(3, dtype=np.float32)
    with pytest.raises(NeighborsError, match=r"user_ids.*\b7\b.*row 2") as caught:
        nearest_users(np.array([5, 7, 7]), emb, k=1)
    assert isinstance(caught.value, SolarisError) and isinstance(caught.value, ValueError)


def test_nearest_users_refuses_a_nan_embedding_naming_its_row() -> None:
    emb = np.array([[1.0, 0.0], [np.nan, 1.0], [0.5, 0.5]], np.float32)
    with pytest.raises(NeighborsError, match=r"emb.*row 1") as caught:
        nearest_users(np.array([5, 6, 7]), emb, k=1)
    assert isinstance(caught.value, SolarisError) and isinstance(caught.value, ValueError)


def test_neighbour_fill_refuses_a_user_named_among_its_own_neighbours() -> None:
    # Once dropped silently: a table that lists a user as its own neighbour was not built by
    # the neighbour search, so it is refused, naming the user.
    neighbors = pd.DataFrame(
        {"user_id": [5, 6], "nbr_ids": [[6], [7, 6]], "nbr_sims": [[0.9], [0.8, 0.7]]}
    )
    pairs = pd.DataFrame(
        {"user_id": [7], "item_id": [10], "computed_at": [T0], "fm_version": ["fm-1"]}
    )
    with pytest.raises(NeighborsError, match=r"nbr_ids of user_id 6 names user_id 6 itself"):
        neighbour_fill(
            pd.DataFrame({"user_id": [5, 6], "item_id": [10, 10]}),
            neighbors,
            pairs,
            np.ones((1, Z), np.float32),
            as_of=T0 + 60,
            ttl_seconds=3600,
            fm_version="fm-1",
        )


def test_neighbour_fill_refuses_two_neighbour_rows_of_one_user_naming_it() -> None:
    neighbors = pd.DataFrame({"user_id": [5, 5], "nbr_ids": [[6], [7]], "nbr_sims": [[0.9], [0.8]]})
    pairs = pd.DataFrame(
        {"user_id": [6], "item_id": [10], "computed_at": [T0], "fm_version": ["fm-1"]}
    )
    with pytest.raises(NeighborsError, match=r"neighbors.*user_id 5.*row 1") as caught:
        neighbour_fill(
            pd.DataFrame({"user_id": [5], "item_id": [10]}),
            neighbors,
            pairs,
            np.ones((1, Z), np.float32),
            as_of=T0 + 60,
            ttl_seconds=3600,
            fm_version="fm-1",
        )
    assert isinstance(caught.value, SolarisError) and isinstance(caught.value, ValueError)


# --------------------------------------------------------------------------------------------
# The MovieLens ratings table (recbole atomic .inter file)
# --------------------------------------------------------------------------------------------

HEADER = "user_id:token\titem_id:token\trating:float\ttimestamp:float"
GOOD = ["1\t10\t4\t880000000", "1\t11\t5\t880000010", "2\t10\t3\t880000020"]

RATINGS_CASES = [
    pytest.param("user_id:token\titem_id:token\ttimestamp:float", ["1\t10\t880000000"],
                 r"missing columns \['rating'\]", id="rating-column-missing"),
    pytest.param(HEADER, [*GOOD, "3\t\t4\t880000030"], r"column 'item_id': missing value at row 3",
                 id="item-id-value-missing"),
    pytest.param(HEADER, [GOOD[0], "1\t12\t4\tnan"], r"column 'timestamp': missing value at row 1",
                 id="timestamp-nan"),
    pytest.param(HEADER, [*GOOD, "3\t10\tgood\t880000030"],
                 r"column 'rating': 'good' is not a number at row 3", id="rating-not-a-number"),
    pytest.param(HEADER, [GOOD[0], "-1\t10\t4\t880000000"],
                 r"column 'user_id': -1 is not an id \(ids are >= 0\) at row 1",
                 id="negative-user-id"),
    pytest.param(HEADER, [GOOD[0], "1\t12\t9\t880000000"],
                 r"column 'rating': 9 is not in 1\.\.5 at row 1", id="rating-outside-1-5"),
    pytest.param(HEADER, [GOOD[0], "1\t12.5\t4\t880000000"],
                 r"column 'item_id': 12\.5 is not a whole number below 2\*\*53 at row 1",
                 id="item-id-not-whole"),
]  # fmt: skip


@pytest.mark.parametrize(("header", "rows", "message"), RATINGS_CASES)
def test_a_bad_ratings_file_is_refused_naming_file_column_and_row(
    header: str, rows: list[str], message: str, tmp_path: Path, snapshot_files
) -> None:
    folder = tmp_path / "ml-100k"
    folder.mkdir()
    path = folder / "ml-100k.inter"
    path.write_text("\n".join([header, *rows]) + "\n", encoding="utf-8")
    snap = snapshot_files(tmp_path)
    before = snap()

    with pytest.raises(MovieLensFormatError, match=message) as caught:
        load_ratings(folder)

    assert isinstance(caught.value, SolarisError)
    assert str(caught.value).startswith(f"{path}: ")
    assert snap() == before
