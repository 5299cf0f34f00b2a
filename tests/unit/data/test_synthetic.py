import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from solaris.data import synthetic
from solaris.data.schemas import CANDIDATES_SCHEMA
from solaris.data.synthetic import SyntheticSpec, generate_candidates, write_synthetic

SMALL = {"n_users": 500, "n_items": 20_000, "seed": 7}


def _table(spec: SyntheticSpec, chunk_rows: int = 1_000_000) -> pa.Table:
    return pa.concat_tables(generate_candidates(spec, chunk_rows=chunk_rows))


def _col(table: pa.Table, name: str) -> np.ndarray:
    return table[name].to_numpy(zero_copy_only=False)


def _seen_before_share(table: pa.Table) -> float:
    """Share of the candidates of a user's later requests that the user had in an earlier one."""
    users, items, reqs = _col(table, "user_id"), _col(table, "item_id"), _col(table, "request_id")
    order = np.lexsort((reqs, items, users))
    u, i, r = users[order], items[order], reqs[order]
    seen = np.zeros(order.size, dtype=bool)
    seen[1:] = (u[1:] == u[:-1]) & (i[1:] == i[:-1])  # same pair in an earlier request
    first_req = np.full(users.max() + 1, np.iinfo(np.int64).max)
    np.minimum.at(first_req, users, reqs)
    later = r != first_req[u]
    return float(seen[later].mean())


@pytest.fixture(scope="module")
def medium() -> pa.Table:
    return _table(SyntheticSpec(n_pairs=200_000, **SMALL), chunk_rows=30_000)


def test_schema_is_exact(medium):
    assert medium.schema == CANDIDATES_SCHEMA
    for chunk in generate_candidates(SyntheticSpec(n_pairs=1_000, **SMALL), chunk_rows=300):
        assert chunk.schema.equals(CANDIDATES_SCHEMA, check_metadata=True)


@pytest.mark.parametrize(
    ("n_pairs", "cpr", "chunk_rows"),
    [(1, 200, 1_000), (199, 200, 50), (200, 200, 200), (201, 200, 1_000), (12_345, 37, 1_000)],
)
def test_row_count_and_chunk_sizes(n_pairs, cpr, chunk_rows):
    spec = SyntheticSpec(n_pairs=n_pairs, candidates_per_request=cpr, **SMALL)
    sizes = [t.num_rows for t in generate_candidates(spec, chunk_rows=chunk_rows)]
    assert sum(sizes) == n_pairs
    assert all(s == chunk_rows for s in sizes[:-1])
    assert 0 < sizes[-1] <= chunk_rows
    table = _table(spec, chunk_rows)
    counts = np.bincount(_col(table, "request_id"))
    assert counts.size == spec.n_requests
    assert (counts[:-1] == cpr).all()
    assert counts[-1] == n_pairs - (spec.n_requests - 1) * cpr  # only the last is truncated


def test_request_structure(medium):
    reqs, ts = _col(medium, "request_id"), _col(medium, "ts")
    assert (np.diff(reqs) >= 0).all() and reqs[0] == 0
    assert (np.diff(np.unique(reqs)) == 1).all()
    assert (np.diff(ts) >= 0).all()
    assert ts[0] >= 1_700_000_000
    # one user and one ts per request
    starts = np.flatnonzero(np.r_[True, reqs[1:] != reqs[:-1]])
    for name in ("user_id", "ts"):
        col = _col(medium, name)
        assert (col == np.repeat(col[starts], np.diff(np.r_[starts, reqs.size]))).all()
    # items are distinct within a request
    pairs = reqs * 1_000_000 + _col(medium, "item_id")
    assert np.unique(pairs).size == pairs.size
    items, users = _col(medium, "item_id"), _col(medium, "user_id")
    assert items.min() >= 0 and items.max() < SMALL["n_items"]
    assert users.min() >= 0 and users.max() < SMALL["n_users"]


def test_many_blocks_monotone_and_independent_of_chunk_rows(monkeypatch):
    # Tiny internal blocks exercise block boundaries and pool state carried across them.
    monkeypatch.setattr(synthetic, "_BLOCK_ROWS", 1_000)
    spec = SyntheticSpec(n_pairs=20_011, candidates_per_request=50, mean_gap_seconds=0.3, **SMALL)
    chunks = list(generate_candidates(spec, chunk_rows=777))
    ts = np.concatenate([_col(c, "ts") for c in chunks])
    reqs = np.concatenate([_col(c, "request_id") for c in chunks])
    assert (np.diff(ts) >= 0).all() and (np.diff(reqs) >= 0).all()
    assert ts.size == 20_011
    assert _table(spec, 777).equals(_table(spec, 20_011))
    assert _table(spec, 777).equals(_table(spec, 1_000))


def test_deterministic_for_seed_and_independent_of_chunk_rows(medium):
    spec = SyntheticSpec(n_pairs=200_000, **SMALL)
    assert _table(spec, chunk_rows=30_000).equals(medium)
    assert _table(spec, chunk_rows=1_000_000).equals(medium)
    other = _table(SyntheticSpec(n_pairs=200_000, **{**SMALL, "seed": 8}))
    assert other.schema == medium.schema and other.num_rows == medium.num_rows
    assert not other.equals(medium)
    assert (_col(other, "item_id") != _col(medium, "item_id")).mean() > 0.5


def test_item_popularity_is_heavy_tailed(medium):
    counts = np.bincount(_col(medium, "item_id"), minlength=SMALL["n_items"])
    top = np.sort(counts)[::-1][: SMALL["n_items"] // 100]
    assert top.sum() / counts.sum() > 0.10  # top 1% of items: > 10% of rows (uniform: 1%)


def test_user_activity_is_heavy_tailed(medium):
    users = _col(medium, "user_id")[::200]  # one row per request
    counts = np.bincount(users, minlength=SMALL["n_users"])
    top = np.sort(counts)[::-1][: SMALL["n_users"] // 100]
    # lognormal(sigma=1.5): the top 1% of users hold about 20% of the activity mass
    assert top.sum() / counts.sum() > 0.08


def test_candidates_recur_for_a_user(medium):
    # Baseline: the same spec with no pool, i.e. independent (distinct-per-request) Zipf draws;
    # its seen-before share comes only from popular items recurring by chance.
    baseline = _seen_before_share(_table(SyntheticSpec(n_pairs=200_000, recurrence=0.0, **SMALL)))
    share = _seen_before_share(medium)
    # With recurrence=0.6, 60% of each request comes from the user's pool; the default pool
    # holds 150 items of which a request takes 120 (80%), and refreshed slots hold items of
    # the user's earlier requests, so nearly all pool candidates of a returning user were seen
    # before: share >= ~0.6 * 0.9 from the pool alone, whatever the popularity head adds.
    assert share > 0.5
    assert share > baseline + 0.2


def test_label_shares_near_spec(medium):
    labels = medium["label"]
    share = (len(labels) - labels.null_count) / medium.num_rows
    assert share == pytest.approx(0.02, abs=0.002)  # 4000 expected, sd ~63 rows
    values = labels.drop_null().to_numpy()
    assert set(np.unique(values).tolist()) <= {0, 1}
    assert values.mean() == pytest.approx(0.55, abs=0.04)  # sd ~0.008


def test_label_extremes():
    none = _table(SyntheticSpec(n_pairs=500, label_rate=0.0, **SMALL))
    assert none["label"].null_count == 500
    every = _table(SyntheticSpec(n_pairs=500, label_rate=1.0, positive_rate=1.0, **SMALL))
    assert every["label"].null_count == 0 and (_col(every, "label") == 1).all()


def test_full_recurrence_and_tiny_catalogue():
    spec = SyntheticSpec(
        n_pairs=5_000, n_users=10, n_items=60, candidates_per_request=50, recurrence=1.0
    )
    table = _table(spec)
    pairs = _col(table, "request_id") * 100 + _col(table, "item_id")
    assert np.unique(pairs).size == pairs.size
    assert spec.effective_pool_size == 60


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_pairs": 0}, "n_pairs"),
        ({"n_pairs": 1.5}, "n_pairs"),
        ({"n_pairs": True}, "n_pairs"),
        ({"n_users": 0}, "n_users"),
        ({"n_items": 10, "candidates_per_request": 11}, "candidates_per_request"),
        ({"n_items": 2**31}, "int32"),
        ({"zipf_a": -0.1}, "zipf_a"),
        ({"user_activity_sigma": float("inf")}, "user_activity_sigma"),
        ({"recurrence": 1.1}, "recurrence"),
        ({"label_rate": -0.01}, "label_rate"),
        ({"positive_rate": 2}, "positive_rate"),
        ({"mean_gap_seconds": -1}, "mean_gap_seconds"),
        ({"start_ts": -5}, "start_ts"),
        ({"seed": -1}, "seed"),
        ({"pool_size": 10}, "pool_size"),
        ({"pool_size": 10**9}, "pool_size"),
    ],
)
def test_spec_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SyntheticSpec(**{"n_pairs": 1_000, **kwargs})


def test_spec_defaults():
    spec = SyntheticSpec(n_pairs=10)
    assert (spec.n_users, spec.n_items, spec.candidates_per_request) == (100_000, 50_000, 200)
    assert spec.pool_candidates == 120 and spec.effective_pool_size == 150
    assert SyntheticSpec(n_pairs=10, recurrence=0.0).effective_pool_size == 0


def test_chunk_rows_validation():
    with pytest.raises(ValueError, match="chunk_rows"):
        next(generate_candidates(SyntheticSpec(n_pairs=10), chunk_rows=0))


def test_write_synthetic_round_trip(tmp_path):
    spec = SyntheticSpec(n_pairs=12_345, **SMALL)
    path = tmp_path / "out" / "candidates.parquet"
    assert write_synthetic(spec, path, chunk_rows=4_000, progress=False) == 12_345
    assert sorted(p.name for p in path.parent.iterdir()) == ["candidates.parquet"]
    back = pq.read_table(path)
    assert back.schema.equals(CANDIDATES_SCHEMA)
    assert back.equals(_table(spec))
    # overwriting an existing file works and still leaves no temporary file
    assert write_synthetic(spec, path, progress=False) == 12_345
    assert sorted(p.name for p in path.parent.iterdir()) == ["candidates.parquet"]


def test_write_synthetic_failure_leaves_nothing(tmp_path, monkeypatch):
    def broken(spec, chunk_rows):
        yield from generate_candidates(spec, chunk_rows=chunk_rows)
        raise RuntimeError("boom")

    monkeypatch.setattr(synthetic, "generate_candidates", broken)
    with pytest.raises(RuntimeError, match="boom"):
        write_synthetic(SyntheticSpec(n_pairs=1_000, **SMALL), tmp_path / "x.parquet")
    assert list(tmp_path.iterdir()) == []
