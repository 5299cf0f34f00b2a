"""user_embeddings / UserIndex / nearest_users / neighbour_fill: hand-computed tables, and
the index against a numpy brute force on seeded random users."""

from __future__ import annotations

import faiss
import numpy as np
import pandas as pd
import pytest

from solaris.config import ModelConfig, SolarisConfig
from solaris.errors import SolarisError
from solaris.pipeline import neighbors
from solaris.pipeline.neighbors import (
    NeighborsError,
    UserIndex,
    nearest_users,
    neighbour_fill,
    user_embeddings,
)
from solaris.store import codec
from solaris.store.contract import NBR

AS_OF = 1_000_000
TTL = 6 * 3600
V = "fm-1"
R = 1 / np.sqrt(2)


def _pairs(rows: list[tuple[int, int, int, str]]) -> pd.DataFrame:
    """(user_id, item_id, computed_at, fm_version) rows."""
    return pd.DataFrame(rows, columns=["user_id", "item_id", "computed_at", "fm_version"]).astype(
        {"user_id": "int64", "item_id": "int64", "computed_at": "int64"}
    )


def _f32(values: list[list[float]]) -> np.ndarray:
    return np.asarray(values, dtype=np.float32)


def _by_user(unn: pd.DataFrame) -> dict[int, tuple[list[int], list[float]]]:
    return {
        int(u): (list(ids), list(sims))
        for u, ids, sims in zip(unn["user_id"], unn["nbr_ids"], unn["nbr_sims"], strict=True)
    }


# ---------------------------------------------------------------------------- user_embeddings


def test_user_embeddings_are_mean_codes_in_window_of_the_version() -> None:
    pairs = _pairs(
        [
            (2, 1, AS_OF, V),
            (1, 1, AS_OF, V),
            (1, 2, AS_OF - 1, V),
            (1, 3, AS_OF - TTL, V),  # at the window start: outside
            (2, 2, AS_OF, "fm-0"),  # other version
        ]
    )
    z = _f32([[0.5, 0.5], [1, 0], [3, 2], [100, 0], [100, 0]])
    users, emb = user_embeddings(pairs, z, as_of=AS_OF, window_seconds=TTL, fm_version=V)
    assert users.tolist() == [1, 2]
    assert users.dtype == np.int64 and emb.dtype == np.float32
    np.testing.assert_array_equal(emb, [[2, 1], [0.5, 0.5]])


def test_user_embeddings_reject_misaligned_codes() -> None:
    pairs = _pairs([(1, 1, AS_OF, V)])
    with pytest.raises(ValueError, match="rows"):
        user_embeddings(pairs, _f32([[1], [2]]), as_of=AS_OF, window_seconds=TTL, fm_version=V)


# ---------------------------------------------------------------------------- nearest_users

# 2-D hand case: cos(10,20) = cos(20,30) = 1/√2, cos(10,30) = cos(30,40) = 0,
# cos(20,40) = −1/√2, cos(10,40) = −1.
IDS = np.array([10, 20, 30, 40])
EMB = _f32([[1, 0], [1, 1], [0, 2], [-3, 0]])


def test_nearest_users_orders_by_cosine_and_excludes_self() -> None:
    out = _by_user(nearest_users(IDS, EMB, k=2))
    assert list(out) == [10, 20, 30, 40]
    assert out[10][0] == [20, 30]
    assert out[20][0] == [10, 30]  # tie at 1/√2: smaller id first
    assert out[30][0] == [20, 10]  # tie at 0 with 40: smaller id first
    assert out[40][0] == [30, 20]
    np.testing.assert_allclose(out[10][1], [R, 0], atol=1e-6)
    np.testing.assert_allclose(out[40][1], [0, -R], atol=1e-6)
    for u, (ids, _) in out.items():
        assert u not in ids


def test_nearest_users_lists_have_int64_ids_and_float32_sims() -> None:
    unn = nearest_users(IDS, EMB, k=3)
    assert unn["user_id"].dtype == np.int64
    assert all(np.asarray(v).dtype == np.int64 for v in unn["nbr_ids"])
    assert all(np.asarray(v).dtype == np.float32 for v in unn["nbr_sims"])
    np.testing.assert_allclose(_by_user(unn)[10][1], [R, 0, -1], atol=1e-6)


def test_nearest_users_caps_k_at_number_of_other_users() -> None:
    out = _by_user(nearest_users(IDS, EMB, k=100))
    assert all(len(ids) == 3 and len(sims) == 3 for ids, sims in out.values())


def test_nearest_users_zero_norm_user_has_no_neighbours_and_is_never_one() -> None:
    ids = np.append(IDS, 50)
    emb = np.vstack([EMB, _f32([[0, 0]])])
    out = _by_user(nearest_users(ids, emb, k=10))
    assert out[50] == ([], [])
    assert all(50 not in nbrs for nbrs, _ in out.values())
    assert all(len(nbrs) == 3 for u, (nbrs, _) in out.items() if u != 50)


def test_nearest_users_with_one_eligible_user_gives_empty_lists() -> None:
    out = _by_user(nearest_users(np.array([1, 2]), _f32([[1, 1], [0, 0]]), k=5))
    assert out == {1: ([], []), 2: ([], [])}


def test_nearest_users_identical_directions_still_exclude_self() -> None:
    ids = np.array([1, 2, 3])
    out = _by_user(nearest_users(ids, _f32([[1, 1], [2, 2], [3, 3]]), k=1))
    # Which of the equally similar users is kept is arbitrary; self never is.
    for u, (nbrs, sims) in out.items():
        assert len(nbrs) == 1 and nbrs[0] != u
        assert sims[0] == pytest.approx(1.0, abs=1e-6)


def test_nearest_users_rejects_bad_inputs() -> None:
    with pytest.raises(ValueError, match="k must be"):
        nearest_users(IDS, EMB, k=0)
    with pytest.raises(ValueError, match="k must be"):
        nearest_users(IDS, EMB, k=-3)
    with pytest.raises(ValueError, match="rows"):
        nearest_users(IDS[:3], EMB, k=1)
    with pytest.raises(ValueError, match="2-D"):
        nearest_users(IDS, EMB[:, 0], k=1)
    with pytest.raises(ValueError, match="NaN"):
        nearest_users(IDS, np.where(EMB == 0, np.nan, EMB).astype(np.float32), k=1)
    with pytest.raises(ValueError, match="duplicates"):
        nearest_users(np.array([1, 1, 2, 3]), EMB, k=1)


# -------------------------------------------------------------------------------- UserIndex


def _brute_force(ids: np.ndarray, emb: np.ndarray, k: int) -> dict[int, tuple[list, list]]:
    """The old exact search in plain numpy: cosine in float64, self and zero-norm users out,
    similarity descending then id ascending, ``k`` capped at the other eligible users."""
    x = emb.astype(np.float64)
    norm = np.linalg.norm(x, axis=1)
    ok = norm > 0
    unit = np.where(ok[:, None], x / np.where(ok, norm, 1)[:, None], 0)
    sims = unit @ unit.T
    k_eff = min(k, int(ok.sum()) - 1)
    out: dict[int, tuple[list, list]] = {}
    for i, u in enumerate(ids):
        cand = np.flatnonzero(ok & (np.arange(len(ids)) != i)) if ok[i] else np.zeros(0, int)
        order = np.lexsort((ids[cand], -sims[i, cand]))[: max(k_eff, 0)]
        out[int(u)] = (ids[cand[order]].tolist(), sims[i, cand[order]].tolist())
    return out


def _random_users(n: int, d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Seeded ids (not positions, not sorted) and float32 embeddings; every 17th is zero."""
    rng = np.random.default_rng(seed)
    ids = rng.choice(10**12, size=n, replace=False).astype(np.int64)
    emb = rng.standard_normal((n, d)).astype(np.float32)
    emb[::17] = 0
    return ids, emb


def _assert_same_table(got: pd.DataFrame, want: dict[int, tuple[list, list]]) -> None:
    got_rows = _by_user(got)
    assert list(got_rows) == list(want)
    for u, (ids, sims) in want.items():
        assert got_rows[u][0] == ids, u
        np.testing.assert_allclose(got_rows[u][1], sims, atol=1e-6)


@pytest.mark.parametrize("exact_below", [10**9, 0], ids=["flat", "hnsw"])
def test_user_index_equals_numpy_brute_force(exact_below: int) -> None:
    ids, emb = _random_users(400, 8)
    index = UserIndex.build(ids, emb, exact_below=exact_below)
    assert index.exact == (exact_below > 0)
    want = _brute_force(ids, emb, k=15)
    _assert_same_table(index.query(ids, 15), want)
    if exact_below:
        _assert_same_table(nearest_users(ids, emb, k=15), want)


def test_user_index_query_of_a_subset_equals_rows_of_the_full_query() -> None:
    ids, emb = _random_users(500, 8)
    for exact_below in (10**9, 0):
        index = UserIndex.build(ids, emb, exact_below=exact_below)
        full = index.query(ids, 12).set_index("user_id")
        subset = np.random.default_rng(1).permutation(ids)[:37]  # any order, zero-norm ones too
        part = index.query(subset, 12)
        assert part["user_id"].tolist() == subset.tolist()
        for u, nbrs, sims in zip(part["user_id"], part["nbr_ids"], part["nbr_sims"], strict=True):
            np.testing.assert_array_equal(nbrs, full.at[u, "nbr_ids"])
            np.testing.assert_array_equal(sims, full.at[u, "nbr_sims"])


@pytest.mark.parametrize("exact_below", [10**9, 0], ids=["flat", "hnsw"])
def test_user_index_bytes_round_trip_gives_identical_answers(exact_below: int) -> None:
    ids, emb = _random_users(300, 6)
    index = UserIndex.build(ids, emb, exact_below=exact_below)
    data = index.to_bytes()
    assert isinstance(data, bytes)
    back = UserIndex.from_bytes(data)
    assert back.exact == index.exact and len(back) == len(index)
    np.testing.assert_array_equal(back.user_ids, ids)
    pd.testing.assert_frame_equal(back.query(ids, 9), index.query(ids, 9))
    assert back.to_bytes() == data


def test_user_index_refuses_bytes_that_are_not_an_index() -> None:
    with pytest.raises(NeighborsError, match="not a UserIndex blob"):
        UserIndex.from_bytes(b"not an index")


def test_user_index_hnsw_recall_at_10_against_exact() -> None:
    rng = np.random.default_rng(2)
    n, k = 10_000, 10  # 20,000 takes about 1 s on 2 idle cores, 4 s on busy ones
    ids = np.arange(n, dtype=np.int64)
    emb = rng.standard_normal((n, 32)).astype(np.float32)
    index = UserIndex.build(ids, emb, exact_below=0)
    assert not index.exact
    sample = rng.choice(n, size=500, replace=False)
    got = index.query(ids[sample], k)["nbr_ids"]
    unit = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    sims = unit[sample] @ unit.T
    sims[np.arange(len(sample)), sample] = -np.inf
    exact = np.argpartition(-sims, k, axis=1)[:, :k]
    hits = sum(len(np.intersect1d(g, e)) for g, e in zip(got, exact, strict=True))
    assert hits / (len(sample) * k) >= 0.95


def test_user_index_hnsw_build_is_deterministic_whatever_the_thread_count() -> None:
    ids, emb = _random_users(3000, 16)
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    try:
        first = UserIndex.build(ids, emb, exact_below=0)
    finally:
        faiss.omp_set_num_threads(threads)
    second = UserIndex.build(ids, emb, exact_below=0)
    assert first.to_bytes() == second.to_bytes()
    pd.testing.assert_frame_equal(first.query(ids, 20), second.query(ids, 20))


def test_user_index_hnsw_short_rows_are_searched_again_exactly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # With efSearch = 1 the graph search returns far fewer than k + 1 of 200 users (-1
    # labels); those rows must come back complete, from the exact search.
    monkeypatch.setattr(neighbors, "_ef_search", lambda n: 1)
    ids, emb = _random_users(200, 8)
    out = UserIndex.build(ids, emb, exact_below=0).query(ids, 150)
    _assert_same_table(out, _brute_force(ids, emb, k=150))


def test_user_index_zero_norm_users_get_empty_lists_and_are_never_neighbours() -> None:
    ids = np.append(IDS, [50, 60])
    emb = np.vstack([EMB, _f32([[0, 0], [0, 0]])])
    index = UserIndex.build(ids, emb)
    out = _by_user(index.query(np.array([50, 20, 60]), 10))
    assert out[50] == ([], []) and out[60] == ([], [])
    assert out[20][0] == [10, 30, 40]
    only_zero = UserIndex.build(np.array([7, 8]), _f32([[0, 0], [0, 0]]))
    assert _by_user(only_zero.query(np.array([8, 7]), 3)) == {8: ([], []), 7: ([], [])}
    assert _by_user(UserIndex.from_bytes(only_zero.to_bytes()).query([7], 1)) == {7: ([], [])}


def test_user_index_query_refuses_unknown_and_repeated_ids_and_bad_k() -> None:
    index = UserIndex.build(IDS, EMB)
    with pytest.raises(NeighborsError, match=r"user_id 99 at row 1, which is not in the index"):
        index.query(np.array([10, 99, 98]), 2)
    with pytest.raises(NeighborsError, match=r"duplicates: 20 at row 2 repeats row 0"):
        index.query(np.array([20, 10, 20]), 2)
    with pytest.raises(NeighborsError, match="k must be"):
        index.query(IDS, 0)
    with pytest.raises(NeighborsError, match="must be integers"):
        index.query(np.array([1.5]), 1)
    empty = index.query(np.zeros(0, np.int64), 3)
    assert list(empty.columns) == ["user_id", "nbr_ids", "nbr_sims"] and len(empty) == 0


def test_user_index_build_refuses_the_inputs_nearest_users_refuses() -> None:
    with pytest.raises(NeighborsError, match="rows"):
        UserIndex.build(IDS[:3], EMB)
    with pytest.raises(NeighborsError, match="NaN"):
        UserIndex.build(IDS, np.where(EMB == 0, np.nan, EMB).astype(np.float32))
    with pytest.raises(NeighborsError, match="duplicates"):
        UserIndex.build(np.array([1, 1, 2, 3]), EMB)
    with pytest.raises(NeighborsError, match="exact_below"):
        UserIndex.build(IDS, EMB, exact_below=1.5)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------- neighbour_fill

NEIGHBORS = pd.DataFrame(
    {
        "user_id": np.array([1, 6, 7], dtype=np.int64),
        "nbr_ids": [
            np.array([2, 3, 4], dtype=np.int64),
            np.array([2, 3], dtype=np.int64),
            np.array([], dtype=np.int64),
        ],
        "nbr_sims": [
            np.array([0.9, 0.5, -0.2], dtype=np.float32),
            np.array([-0.1, -0.3], dtype=np.float32),
            np.array([], dtype=np.float32),
        ],
    }
)


def _fill(targets: list[tuple[int, int]], pairs: pd.DataFrame, z: np.ndarray) -> pd.DataFrame:
    tg = pd.DataFrame(targets, columns=["user_id", "item_id"]).astype("int64")
    return neighbour_fill(tg, NEIGHBORS, pairs, z, as_of=AS_OF, ttl_seconds=TTL, fm_version=V)


def _row(out: pd.DataFrame, user: int, item: int) -> pd.Series:
    hit = out[(out["user_id"] == user) & (out["item_id"] == item)]
    assert len(hit) == 1
    return hit.iloc[0]


def _z(value: np.ndarray, d: int = 2) -> np.ndarray:
    """One vector cell: a float32 ``[d]`` array of float16-rounded values."""
    assert isinstance(value, np.ndarray)
    assert value.dtype == np.float32 and value.shape == (d,)
    np.testing.assert_array_equal(codec.f16_round(value), value)
    return value


def test_neighbour_fill_top1_is_most_similar_neighbour_that_has_the_item() -> None:
    # User 2 (sim 0.9) lacks item 200; users 3 (0.5) and 4 (−0.2) have it.
    pairs = _pairs([(2, 100, AS_OF, V), (3, 200, AS_OF, V), (4, 200, AS_OF, V)])
    z = _f32([[9, 9], [2, 4], [8, 0]])
    out = _fill([(1, 200)], pairs, z)
    row = _row(out, 1, 200)
    assert row["src_user"] == 3
    assert row["similarity"] == pytest.approx(0.5)
    np.testing.assert_array_equal(_z(row["z_top1"]), [2, 4])
    # weights max(0.5, 0) = 0.5 and max(−0.2, 0) = 0: the mean is user 3's code.
    np.testing.assert_array_equal(_z(row["z_mean"]), [2, 4])
    assert row["n_nbrs"] == 2


def test_neighbour_fill_weighted_mean_by_hand() -> None:
    pairs = _pairs([(2, 100, AS_OF, V), (3, 100, AS_OF - 60, V), (4, 100, AS_OF, V)])
    z = _f32([[1, 0], [0, 2], [5, 5]])
    row = _row(_fill([(1, 100)], pairs, z), 1, 100)
    assert row["src_user"] == 2 and row["similarity"] == pytest.approx(0.9)
    np.testing.assert_array_equal(_z(row["z_top1"]), [1, 0])
    # (0.9·[1, 0] + 0.5·[0, 2] + 0·[5, 5]) / 1.4 = [0.642857, 0.714286]
    np.testing.assert_allclose(_z(row["z_mean"]), [0.9 / 1.4, 1.0 / 1.4], atol=1e-3)
    assert row["n_nbrs"] == 3


def test_neighbour_fill_all_nonpositive_similarities_give_plain_mean() -> None:
    pairs = _pairs([(2, 100, AS_OF, V), (3, 100, AS_OF, V)])
    z = _f32([[1, 0], [0, 3]])
    row = _row(_fill([(6, 100)], pairs, z), 6, 100)
    assert row["src_user"] == 2  # −0.1 beats −0.3
    assert row["similarity"] == pytest.approx(-0.1)
    np.testing.assert_array_equal(_z(row["z_mean"]), [0.5, 1.5])
    assert row["n_nbrs"] == 2


def test_neighbour_fill_ignores_stale_and_other_version_neighbour_codes() -> None:
    pairs = _pairs(
        [
            (2, 300, AS_OF - TTL, V),  # at as_of − ttl: stale
            (3, 300, AS_OF, "fm-0"),  # other version
            (4, 300, AS_OF - TTL + 1, V),  # fresh
            (2, 301, AS_OF + 1, V),  # computed after as_of
            (3, 302, AS_OF - 2 * TTL, V),  # stale
        ]
    )
    z = _f32([[1, 1], [2, 2], [3, 3], [4, 4], [5, 5]])
    out = _fill([(1, 300), (1, 301), (1, 302)], pairs, z)
    assert out[["user_id", "item_id"]].values.tolist() == [[1, 300]]
    row = _row(out, 1, 300)
    assert row["src_user"] == 4 and row["n_nbrs"] == 1
    np.testing.assert_array_equal(_z(row["z_top1"]), [3, 3])
    np.testing.assert_array_equal(_z(row["z_mean"]), [3, 3])  # only weight 0: plain mean


def test_neighbour_fill_skips_targets_with_their_own_fresh_pair() -> None:
    pairs = _pairs(
        [
            (1, 400, AS_OF, V),  # own fresh pair: served by the pair tier
            (2, 400, AS_OF, V),
            (1, 401, AS_OF - TTL, V),  # own pair is stale: still needs the neighbour tier
            (2, 401, AS_OF, V),
        ]
    )
    z = _f32([[1, 1], [2, 2], [3, 3], [4, 4]])
    out = _fill([(1, 400), (1, 401)], pairs, z)
    assert out[["user_id", "item_id"]].values.tolist() == [[1, 401]]
    np.testing.assert_array_equal(_z(_row(out, 1, 401)["z_top1"]), [4, 4])


def test_neighbour_fill_without_any_neighbour_having_item_gives_no_row() -> None:
    pairs = _pairs([(2, 100, AS_OF, V), (9, 999, AS_OF, V)])
    z = _f32([[1, 1], [2, 2]])
    # (1, 999): user 9 has it but is not a neighbour; 7 has no neighbours; 8 no unn row.
    out = _fill([(1, 999), (7, 100), (8, 100)], pairs, z)
    assert out.empty
    assert list(out.columns) == [
        "user_id",
        "item_id",
        "z_top1",
        "src_user",
        "similarity",
        "z_mean",
        "n_nbrs",
        "fm_version",
        "event_ts",
    ]


def test_neighbour_fill_output_columns_types_and_duplicate_targets() -> None:
    pairs = _pairs([(2, 100, AS_OF, V), (3, 200, AS_OF, V)])
    z = _f32([[1, 0], [0, 1]])
    out = _fill([(1, 200), (1, 100), (1, 100)], pairs, z)
    assert out[["user_id", "item_id"]].values.tolist() == [[1, 100], [1, 200]]
    assert out["src_user"].dtype == np.int64 and out["n_nbrs"].dtype == np.int64
    assert out["similarity"].dtype == np.float32
    assert (out["fm_version"] == V).all()
    assert (out["event_ts"] == pd.Timestamp(AS_OF, unit="s", tz="UTC")).all()
    for column in ("z_top1", "z_mean"):
        for value in out[column]:
            _z(value)


def test_neighbour_fill_codes_are_float16_rounded() -> None:
    pairs = _pairs([(2, 100, AS_OF, V), (3, 100, AS_OF, V)])
    z = _f32([[0.1, 1 / 3], [1e-5, 0.7]])
    row = _row(_fill([(1, 100)], pairs, z), 1, 100)
    np.testing.assert_array_equal(_z(row["z_top1"]), codec.f16_round(z[0]))
    z16 = codec.f16_round(z).astype(np.float64)
    expected = (0.9 * z16[0] + 0.5 * z16[1]) / 1.4
    np.testing.assert_allclose(_z(row["z_mean"]), expected, rtol=1e-3)
    assert not np.array_equal(row["z_top1"], z[0])


def test_neighbour_fill_frame_is_a_valid_nbr_write() -> None:
    pairs = _pairs([(2, 100, AS_OF, V), (3, 200, AS_OF, V), (4, 200, AS_OF, V)])
    z = _f32([[0.1, 1 / 3], [2, 4], [8, 0.3]])
    out = _fill([(1, 100), (1, 200), (6, 100)], pairs, z)
    params = NBR.params(SolarisConfig(model=ModelConfig(z_dim=2)))
    table = codec.normalize(NBR, params, out)
    rows = codec.decode_records(NBR, params, codec.encode_records(NBR, params, table))
    assert rows.found.all()
    for column in ("z_top1", "z_mean"):
        assert rows.values[column].dtype == np.float16
        np.testing.assert_array_equal(rows.values[column], np.stack(out[column]))
    np.testing.assert_array_equal(rows.values["src_user"], out["src_user"].to_numpy())
    np.testing.assert_array_equal(rows.values["similarity"], out["similarity"].to_numpy())
    np.testing.assert_array_equal(rows.values["n_nbrs"], out["n_nbrs"].to_numpy())
    assert (rows.values["computed_at"] == AS_OF).all()
    assert rows.values["fm_version"].tolist() == [V.encode()] * len(out)


def test_neighbour_fill_rejects_bad_inputs() -> None:
    pairs = _pairs([(2, 100, AS_OF, V)])
    z = _f32([[1, 0]])
    tg = pd.DataFrame({"user_id": [1], "item_id": [100]})
    kw = {"as_of": AS_OF, "ttl_seconds": TTL, "fm_version": V}
    with pytest.raises(ValueError, match="rows"):
        neighbour_fill(tg, NEIGHBORS, pairs, _f32([[1, 0], [0, 1]]), **kw)
    with pytest.raises(ValueError, match="2-D"):
        neighbour_fill(tg, NEIGHBORS, pairs, np.ones(1, np.float32), **kw)
    with pytest.raises(ValueError, match="NaN"):
        neighbour_fill(tg, NEIGHBORS, pairs, _f32([[np.nan, 0]]), **kw)
    with pytest.raises(ValueError, match="targets is missing"):
        neighbour_fill(tg[["user_id"]], NEIGHBORS, pairs, z, **kw)
    with pytest.raises(ValueError, match="ttl_seconds"):
        neighbour_fill(tg, NEIGHBORS, pairs, z, **{**kw, "ttl_seconds": -1})
    bad = NEIGHBORS.assign(nbr_sims=[np.zeros(1, np.float32)] * 3)
    with pytest.raises(ValueError, match="differ in length"):
        neighbour_fill(tg, bad, pairs, z, **kw)
    with pytest.raises(ValueError, match="neighbors is missing"):
        neighbour_fill(tg, NEIGHBORS.drop(columns="nbr_sims"), pairs, z, **kw)


def test_nearest_users_names_the_first_repeated_id_and_both_rows() -> None:
    ids = np.array([10, 20, 30, 20, 10])  # 10 repeats later, but row 3 is the first repeat
    with pytest.raises(NeighborsError, match=r"duplicates: 20 at row 3 repeats row 1"):
        nearest_users(ids, _f32(np.ones((5, 2))), k=1)


def test_nearest_users_names_the_row_and_user_of_an_infinite_embedding() -> None:
    emb = EMB.copy()
    emb[2, 1] = np.inf
    with pytest.raises(NeighborsError, match=r"emb contains NaN or ±inf at row 2 \(user_id 30\)"):
        nearest_users(IDS, emb, k=1)


def test_neighbors_errors_are_solaris_errors_that_stay_value_errors() -> None:
    assert issubclass(NeighborsError, SolarisError)
    assert issubclass(NeighborsError, ValueError)
    with pytest.raises(NeighborsError, match="k must be"):
        nearest_users(IDS, EMB, k=0)


def test_neighbour_fill_names_the_user_whose_neighbour_lists_are_bad() -> None:
    pairs = _pairs([(2, 100, AS_OF, V)])
    tg = pd.DataFrame({"user_id": [1, 6], "item_id": [100, 100]})
    kw = {"as_of": AS_OF, "ttl_seconds": TTL, "fm_version": V}
    sims = NEIGHBORS["nbr_sims"].to_list()
    short = NEIGHBORS.assign(nbr_sims=[sims[0], sims[1][:1], sims[2]])
    with pytest.raises(NeighborsError, match=r"differ in length for user_id 6 \(2 ids, 1 sim"):
        neighbour_fill(tg, short, pairs, _f32([[1, 0]]), **kw)
    nan = NEIGHBORS.assign(nbr_sims=[sims[0], np.array([0.5, np.nan], np.float32), sims[2]])
    with pytest.raises(NeighborsError, match=r"nbr_sims contains NaN for user_id 6"):
        neighbour_fill(tg, nan, pairs, _f32([[1, 0]]), **kw)


def test_users_added_to_an_index_get_the_neighbours_a_full_build_gives_them() -> None:
    """Between builds the index gains the users it lacks: their neighbours (exact search)
    are the ones an index built over everyone gives, and an indexed user cannot be added
    again."""
    from solaris.pipeline.neighbors import UserIndex

    rng = np.random.default_rng(4)
    ids = np.arange(10, 70, dtype=np.int64)
    emb = rng.standard_normal((60, 5)).astype(np.float32)
    emb[7] = 0  # a zero-norm user: kept, never indexed
    base = UserIndex.build(ids[:40], emb[:40])
    grown = UserIndex.from_bytes(base.to_bytes()).with_users(ids[40:], emb[40:])
    whole = UserIndex.build(ids, emb)
    got, want = grown.query(ids[40:], 5), whole.query(ids[40:], 5)
    for a, b in zip(got["nbr_ids"], want["nbr_ids"], strict=True):
        assert a.tolist() == b.tolist()
    assert len(UserIndex.from_bytes(grown.to_bytes())) == 60
    with pytest.raises(NeighborsError, match="already indexed"):
        grown.with_users(ids[:1], emb[:1])
