"""Tests for ``solaris.examples.movielens.features``: every feature of a row is computed
strictly before the row's time."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from solaris.examples.movielens.data import LIKE_THRESHOLD, MovieLens
from solaris.examples.movielens.features import FM_DENSE, VM_DENSE, VM_USER_DENSE, FeatureContext
from solaris.examples.movielens.models.batch import FeatureBatch

HISTORY = 6


@pytest.fixture
def ctx(tiny_ml) -> FeatureContext:
    return FeatureContext(tiny_ml, history_len=HISTORY, kg_per_item=5, kg_buckets=97)


def _before(ml: MovieLens, t: int) -> MovieLens:
    return dataclasses.replace(ml, ratings=ml.ratings[ml.ratings["ts"] < t])


def _assert_batches_equal(a: FeatureBatch, b: FeatureBatch) -> None:
    for field in dataclasses.fields(FeatureBatch):
        x, y = getattr(a, field.name), getattr(b, field.name)
        assert x.dtype == y.dtype, field.name
        assert torch.equal(x, y), field.name


def _grid(ml: MovieLens, t: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every known (user, item) pair, as of ``t``."""
    users = ml.users["user_id"].to_numpy()
    items = ml.items["item_id"].to_numpy()
    u, i = np.meshgrid(users, items, indexing="ij")
    return u.ravel(), i.ravel(), np.full(u.size, t, dtype=np.int64)


# --- no feature sees data at or after the row's time -------------------------------------


@pytest.mark.parametrize("quantile", [0.05, 0.3, 0.6, 0.95])
def test_features_equal_a_context_built_from_the_past_only(tiny_ml, ctx, quantile):
    ts = tiny_ml.ratings["ts"]
    t = int(ts.quantile(quantile))  # often exactly a rating's ts
    past = FeatureContext(_before(tiny_ml, t), history_len=HISTORY, kg_per_item=5, kg_buckets=97)
    u, i, tt = _grid(tiny_ml, t)
    _assert_batches_equal(ctx.fm_batch(u, i, tt), past.fm_batch(u, i, tt))
    _assert_batches_equal(ctx.vm_batch(u, i, tt), past.vm_batch(u, i, tt))


def test_rating_rows_equal_a_context_built_from_the_past_only(tiny_ml, ctx):
    """The rows a model is trained on: each rating, featurised at its own time."""
    rows = tiny_ml.ratings.iloc[np.linspace(5, len(tiny_ml.ratings) - 1, 30).astype(int)]
    for row in rows.itertuples(index=False):
        past = FeatureContext(
            _before(tiny_ml, row.ts), history_len=HISTORY, kg_per_item=5, kg_buckets=97
        )
        u, i, t = np.array([row.user_id]), np.array([row.item_id]), np.array([row.ts])
        _assert_batches_equal(ctx.fm_batch(u, i, t), past.fm_batch(u, i, t))
        _assert_batches_equal(ctx.vm_batch(u, i, t), past.vm_batch(u, i, t))


def test_future_ratings_do_not_change_features(tiny_ml, ctx):
    ratings = tiny_ml.ratings
    t = int(ratings["ts"].iloc[len(ratings) // 2])
    future = ratings["ts"] >= t
    changed = ratings.copy()
    changed.loc[future, "rating"] = (6 - changed.loc[future, "rating"]).astype("int8")
    other = FeatureContext(
        dataclasses.replace(tiny_ml, ratings=changed),
        history_len=HISTORY,
        kg_per_item=5,
        kg_buckets=97,
    )
    u, i, tt = _grid(tiny_ml, t)
    _assert_batches_equal(ctx.fm_batch(u, i, tt), other.fm_batch(u, i, tt))


def test_context_from_no_ratings(tiny_ml):
    first = int(tiny_ml.ratings["ts"].min())
    past = FeatureContext(_before(tiny_ml, first), history_len=HISTORY)
    batch = past.fm_batch(np.array([1]), np.array([1]), np.array([first]))
    assert batch.hist_items.eq(0).all()


# --- history -----------------------------------------------------------------------------


def test_history_is_the_users_past_most_recent_first(tiny_ml, ctx):
    ratings = tiny_ml.ratings
    rows = ratings.iloc[np.linspace(0, len(ratings) - 1, 60).astype(int)]
    batch = ctx.fm_batch(rows["user_id"], rows["item_id"], rows["ts"])
    for b, row in enumerate(rows.itertuples(index=False)):
        mine = ratings[(ratings["user_id"] == row.user_id) & (ratings["ts"] < row.ts)]
        # most recent first; ratings at the same second in reverse item order
        mine = mine.sort_values(["ts", "item_id"], ascending=False).head(HISTORY)
        pad = HISTORY - len(mine)
        expected_items = [*mine["item_id"], *[0] * pad]
        expected_ratings = [*mine["rating"].astype(int), *[0] * pad]
        assert batch.hist_items[b].tolist() == expected_items
        assert batch.hist_ratings[b].tolist() == expected_ratings
        assert row.item_id not in batch.hist_items[b].tolist()  # never its own label


def test_a_row_at_a_ratings_ts_does_not_see_that_rating(tiny_ml, ctx):
    ratings = tiny_ml.ratings
    # Two ratings of one user at the very same second (the fixture has such pairs).
    dup = ratings[ratings.duplicated(["user_id", "ts"], keep=False)].iloc[:2]
    assert len(dup) == 2 and dup["user_id"].nunique() == 1
    u, t = int(dup["user_id"].iloc[0]), int(dup["ts"].iloc[0])
    both = dup["item_id"].tolist()
    at = ctx.fm_batch(np.array([u, u]), np.array(both), np.array([t, t]))
    after = ctx.fm_batch(np.array([u, u]), np.array(both), np.array([t + 1, t + 1]))
    for item in both:
        assert item not in at.hist_items.flatten().tolist()
        assert item in after.hist_items[0].tolist()
    n_before = int(((ratings["user_id"] == u) & (ratings["ts"] < t)).sum())
    user_count = FM_DENSE.index("user_count")
    assert at.dense[0, user_count].item() == pytest.approx(np.log1p(n_before) / 5)
    assert after.dense[0, user_count].item() == pytest.approx(np.log1p(n_before + 2) / 5)


def test_item_statistics_by_hand(tiny_ml, ctx):
    ratings = tiny_ml.ratings
    item = int(ratings["item_id"].value_counts().idxmax())
    t = int(ratings.loc[ratings["item_id"] == item, "ts"].iloc[-1])  # its last rating's ts
    seen = ratings.loc[(ratings["item_id"] == item) & (ratings["ts"] < t), "rating"].astype(int)
    n = len(seen)
    batch = ctx.fm_batch(np.array([1]), np.array([item]), np.array([t]))
    dense = dict(zip(FM_DENSE, batch.dense[0].tolist(), strict=True))
    assert dense["item_count"] == pytest.approx(np.log1p(n) / 6)
    assert dense["item_mean"] == pytest.approx((seen.sum() + 7.0) / (n + 2) - 3.5, abs=1e-6)
    like = (seen >= LIKE_THRESHOLD).sum()
    assert dense["item_like"] == pytest.approx((like + 1.1) / (n + 2) - 0.55, abs=1e-6)


def test_user_without_history_has_empty_history_and_priors(tiny_ml, ctx):
    first = tiny_ml.ratings.iloc[0]
    u, i, t = np.array([first["user_id"]]), np.array([first["item_id"]]), np.array([first["ts"]])
    batch = ctx.fm_batch(u, i, t)
    assert batch.hist_items.eq(0).all() and batch.hist_ratings.eq(0).all()
    dense = dict(zip(FM_DENSE, batch.dense[0].tolist(), strict=True))
    assert dense["user_count"] == 0.0
    assert dense["user_mean"] == pytest.approx(0.0)
    assert dense["user_like"] == pytest.approx(0.0, abs=1e-6)
    assert dense["user_recency"] == pytest.approx(np.log1p(1e4) / 5)


# --- unknown ids, shapes, VM -------------------------------------------------------------


def test_unknown_ids_map_to_zero(tiny_ml, ctx):
    t = int(tiny_ml.ratings["ts"].max()) + 1
    users = np.array([1, 10_000, ctx.n_users, 2])
    items = np.array([10_000, 3, 5, ctx.n_items])
    ts = np.full(4, t)
    fm = ctx.fm_batch(users, items, ts)
    assert fm.item_id.tolist() == [0, 3, 5, 0]
    known = ctx.fm_batch(np.array([0, 0]), np.array([3, 5]), ts[:2])
    for name in ("user_cat", "hist_items", "hist_ratings"):
        assert getattr(fm, name)[1:3].eq(0).all(), name  # unknown user -> user 0: empty
        assert torch.equal(getattr(fm, name)[1:3], getattr(known, name)), name
    for name in ("item_cat", "genres", "kg"):
        assert getattr(fm, name)[[0, 3]].eq(0).all(), name
    assert torch.isfinite(fm.dense).all()
    vm = ctx.vm_batch(users, items, ts)
    assert vm.item_id.tolist() == [0, 3, 5, 0]
    assert vm.user_cat[1:3].eq(0).all()


def test_fm_batch_shapes_match_spec(tiny_ml, ctx):
    spec = ctx.spec("fm")
    rows = tiny_ml.ratings.iloc[:17]
    batch = ctx.fm_batch(rows["user_id"], rows["item_id"], rows["ts"])
    b = len(rows)
    assert len(batch) == b
    assert batch.dense.shape == (b, spec.n_dense) and batch.dense.dtype == torch.float32
    assert spec.n_dense == len(FM_DENSE)
    assert batch.user_cat.shape == (b, len(spec.user_cat_cardinalities))
    assert batch.item_id.shape == (b,)
    assert batch.item_cat.shape == (b, len(spec.item_cat_cardinalities))
    assert batch.genres.shape == (b, spec.genres_per_item)
    assert batch.kg.shape == (b, spec.kg_per_item)
    assert batch.hist_items.shape == (b, spec.history_len) == (b, HISTORY)
    assert batch.hist_ratings.shape == (b, spec.history_len)
    for name in ("user_cat", "item_id", "item_cat", "genres", "kg", "hist_items", "hist_ratings"):
        assert getattr(batch, name).dtype == torch.int64, name
    # Every id is inside its vocabulary.
    for col, card in enumerate(spec.user_cat_cardinalities):
        assert int(batch.user_cat[:, col].max()) < card
    for col, card in enumerate(spec.item_cat_cardinalities):
        assert int(batch.item_cat[:, col].max()) < card
    assert int(batch.item_id.max()) < spec.n_items
    assert int(batch.hist_items.max()) < spec.n_items
    assert int(batch.genres.max()) < spec.n_genres
    assert int(batch.kg.max()) < spec.kg_buckets
    assert int(batch.hist_ratings.max()) <= 5


def test_vm_batch_has_no_history_or_kg(tiny_ml, ctx):
    spec = ctx.spec("vm")
    rows = tiny_ml.ratings.iloc[100:111]
    vm = ctx.vm_batch(rows["user_id"], rows["item_id"], rows["ts"])
    fm = ctx.fm_batch(rows["user_id"], rows["item_id"], rows["ts"])
    b = len(rows)
    assert vm.kg.shape == vm.hist_items.shape == vm.hist_ratings.shape == (b, 0)
    assert spec.history_len == 0 and spec.kg_per_item == 0
    assert vm.dense.shape == (b, spec.n_dense) and spec.n_dense == len(VM_DENSE)
    # The VM's dense features are the first columns of the FM's.
    assert torch.equal(vm.dense, fm.dense[:, : spec.n_dense])
    for name in ("user_cat", "item_id", "item_cat", "genres"):
        assert torch.equal(getattr(vm, name), getattr(fm, name)), name
    fm_spec = ctx.spec("fm")
    assert dataclasses.replace(fm_spec, n_dense=6, history_len=0, kg_per_item=0) == spec


def test_kg_features_come_from_item_entities(tiny_ml, ctx):
    linked = set(tiny_ml.item_entities()["item_id"])
    items = np.arange(1, ctx.n_items)
    batch = ctx.fm_batch(np.ones_like(items), items, np.zeros_like(items))
    has_kg = batch.kg.ne(0).any(dim=1).tolist()
    assert has_kg == [int(i) in linked for i in items]
    n_ent = tiny_ml.item_entities().groupby("item_id").size()
    for row, item in enumerate(items):
        expected = min(int(n_ent.get(item, 0)), ctx.kg_per_item)
        assert int(batch.kg[row].ne(0).sum()) == expected


def test_fm_batch_is_deterministic(tiny_ml):
    a = FeatureContext(tiny_ml, history_len=HISTORY)
    b = FeatureContext(tiny_ml, history_len=HISTORY)
    rows = tiny_ml.ratings
    _assert_batches_equal(
        a.fm_batch(rows["user_id"], rows["item_id"], rows["ts"]),
        b.fm_batch(rows["user_id"], rows["item_id"], rows["ts"]),
    )


def test_the_user_aware_vm_batch_is_the_fms_user_statistics_and_last_items(tiny_ml, ctx):
    spec = ctx.spec("vm", vm_history=3)
    rows = tiny_ml.ratings.iloc[100:111]
    vm = ctx.vm_batch(rows["user_id"], rows["item_id"], rows["ts"], history=3)
    fm = ctx.fm_batch(rows["user_id"], rows["item_id"], rows["ts"])
    assert spec.history_len == 3 and spec.kg_per_item == 0
    assert spec.n_dense == len(VM_USER_DENSE) == len(FM_DENSE)
    # Rating mean, like rate and recency: exactly what the FM reads, as of the row's time.
    assert torch.equal(vm.dense, fm.dense)
    # The last three items, most recent first; the ratings of the history stay unread.
    assert torch.equal(vm.hist_items, fm.hist_items[:, :3])
    assert vm.hist_ratings.shape == vm.kg.shape == (len(rows), 0)
