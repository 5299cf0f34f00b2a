"""Causal features for (user, item, time) rows, vectorised with ``searchsorted``.

``FeatureContext`` indexes the ratings twice, by (user, ts) and by (item, ts); a row's
history and counts are the ratings strictly before its time, so no feature can see the
label it is asked to predict or anything after it. The FM gets everything (rating-aware
history, KG entities, user rating statistics). The VM gets a production-like subset in one
of two forms: user-blind (no history, no KG, no user rating statistics: the VM of the
report's first versions) or user-aware (the user's rating statistics and their last items,
as a production VM that already knows the user would have; still no KG and no ratings of
the history).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from solaris.config import ModelConfig
from solaris.examples.movielens.data import LIKE_THRESHOLD, MovieLens
from solaris.examples.movielens.models.batch import FeatureBatch, FeatureSpec

__all__ = ["FM_DENSE", "VM_DENSE", "VM_USER_DENSE", "FeatureContext"]

_KEY = 1 << 32  # composite key: id * _KEY + ts, ts < 2**32
_AGE_EDGES = np.array([18, 25, 35, 45, 50, 56])
VM_DENSE = ("user_count", "item_count", "item_mean", "item_like", "age", "year")
FM_DENSE = (*VM_DENSE, "user_mean", "user_like", "user_recency")
# The user-aware VM reads the FM's causal user statistics (its count is in VM_DENSE).
VM_USER_DENSE = FM_DENSE


def _codes(values: pd.Series) -> tuple[np.ndarray, int]:
    """Categorical codes starting at 1 (0 = unknown), and the vocab size."""
    codes, uniques = pd.factorize(values, sort=True)
    return codes.astype(np.int64) + 1, len(uniques) + 1


def _vocab_size(*ids: pd.Series) -> int:
    """Largest id in any of ``ids`` plus one; empty tables (no past yet) are fine."""
    return int(max(s.to_numpy().max(initial=0) for s in ids)) + 1


def _padded(groups: pd.Series, index_size: int, width: int) -> np.ndarray:
    """``[index_size, width]`` int64 from a Series of int lists indexed by id; 0-padded."""
    out = np.zeros((index_size, width), dtype=np.int64)
    for idx, values in groups.items():  # one pass over ~1.7k items at build time
        vals = np.asarray(values, dtype=np.int64)[:width]
        out[int(idx), : len(vals)] = vals
    return out


@dataclass(frozen=True)
class _TimeIndex:
    """Ratings sorted by (entity, ts), with prefix sums for causal counts and means."""

    keys: np.ndarray
    starts: np.ndarray
    other: np.ndarray  # the item (for a user index) or user (for an item index)
    rating: np.ndarray
    ts: np.ndarray
    sum_rating: np.ndarray  # prefix sums with a leading 0
    sum_like: np.ndarray

    @classmethod
    def build(cls, ratings: pd.DataFrame, entity: str, other: str, size: int) -> _TimeIndex:
        r = ratings.sort_values([entity, "ts", other], kind="stable")
        ids = r[entity].to_numpy()
        rating = r["rating"].to_numpy().astype(np.int64)
        # ``other``, ``rating`` and ``ts`` carry one trailing pad so that masked gathers at
        # position 0 stay in bounds even when there are no ratings yet.
        return cls(
            keys=ids * _KEY + r["ts"].to_numpy(),
            starts=np.searchsorted(ids, np.arange(size + 1)),
            other=np.append(r[other].to_numpy(), 0),
            rating=np.append(rating, 0),
            ts=np.append(r["ts"].to_numpy(), 0),
            sum_rating=np.concatenate([[0], np.cumsum(rating)]),
            sum_like=np.concatenate([[0], np.cumsum(rating >= LIKE_THRESHOLD)]),
        )

    def before(self, ids: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Start of each id's ratings and the position of its first rating at or after ts."""
        ids = np.clip(ids, 0, len(self.starts) - 2)
        return self.starts[ids], np.searchsorted(self.keys, ids * _KEY + ts, side="left")

    def stats(self, ids: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, ...]:
        """Count, mean rating and like rate strictly before ts (prior-smoothed)."""
        start, pos = self.before(ids, ts)
        n = (pos - start).astype(np.float32)
        mean = (self.sum_rating[pos] - self.sum_rating[start] + 3.5 * 2) / (n + 2)
        like = (self.sum_like[pos] - self.sum_like[start] + 0.55 * 2) / (n + 2)
        return n, mean.astype(np.float32), like.astype(np.float32)


class FeatureContext:
    """Everything needed to featurise rows as of their own time.

    >>> ctx = FeatureContext(movielens, history_len=50)
    >>> batch = ctx.fm_batch(users, items, ts)   # FeatureBatch for the FM
    """

    def __init__(
        self, data: MovieLens, history_len: int, kg_per_item: int = 32, kg_buckets: int = 20_000
    ) -> None:
        ratings = data.ratings
        self.n_users = _vocab_size(ratings["user_id"], data.users["user_id"])
        self.n_items = _vocab_size(ratings["item_id"], data.items["item_id"])
        self.history_len = history_len
        self._by_user = _TimeIndex.build(ratings, "user_id", "item_id", self.n_users)
        self._by_item = _TimeIndex.build(ratings, "item_id", "user_id", self.n_items)

        users = data.users.set_index("user_id").reindex(range(self.n_users))
        age_bucket = np.where(
            users["age"].isna(), 0, np.digitize(users["age"].fillna(0), _AGE_EDGES) + 1
        )
        gender, n_gender = _codes(users["gender"])
        occupation, n_occ = _codes(users["occupation"])
        zip_digit, n_zip = _codes(users["zip_code"].str[:1])
        self._user_cat = np.stack([age_bucket, gender, occupation, zip_digit], axis=1).astype(
            np.int64
        )
        self._user_cat[users["gender"].isna().to_numpy()] = 0
        self._age = (users["age"].fillna(30).to_numpy() / 50.0).astype(np.float32)

        items = data.items.set_index("item_id").reindex(range(self.n_items))
        year = items["year"].to_numpy(dtype=np.float64)
        half_decade = np.where(
            np.isnan(year), 0, np.clip((np.nan_to_num(year) - 1920) // 5, 0, 16) + 1
        )
        self._item_cat = half_decade.astype(np.int64)[:, None]  # 5-year release bins
        self._year = np.nan_to_num((year - 1990) / 10.0).astype(np.float32)

        genre_lists = items["genres"].dropna()
        vocab = {g: k + 1 for k, g in enumerate(sorted({g for gs in genre_lists for g in gs}))}
        self.genres_per_item = max(1, max(len(gs) for gs in genre_lists))
        self._genres = _padded(
            genre_lists.map(lambda gs: [vocab[g] for g in gs]), self.n_items, self.genres_per_item
        )
        ent = data.item_entities()
        freq = ent["entity"].map(ent["entity"].value_counts())
        ent = ent.assign(freq=freq).sort_values(
            ["item_id", "freq", "entity"], ascending=[True, False, True]
        )
        hashed = pd.util.hash_array(ent["entity"].to_numpy(dtype=object)) % (kg_buckets - 1) + 1
        self._kg = _padded(
            pd.Series(hashed.astype(np.int64)).groupby(ent["item_id"].to_numpy()).agg(list),
            self.n_items,
            kg_per_item,
        )
        self.kg_per_item = kg_per_item
        self.kg_buckets = kg_buckets
        self._n_genres = len(vocab) + 1
        self._user_cards = (len(_AGE_EDGES) + 2, n_gender, n_occ, n_zip)

    @classmethod
    def from_config(cls, data: MovieLens, model: ModelConfig) -> FeatureContext:
        """The context sized by the model settings (history length, KG width and buckets)."""
        return cls(data, model.history_len, model.kg_entities_per_item, model.kg_buckets)

    def spec(self, model: str, vm_history: int = 0) -> FeatureSpec:
        """The ``FeatureSpec`` of ``model`` ("fm" or "vm"); for the VM, ``vm_history > 0`` is
        the user-aware VM of :meth:`vm_batch`."""
        dense: tuple[str, ...]
        if model == "fm":
            dense, history = FM_DENSE, self.history_len
        else:
            dense, history = (VM_USER_DENSE if vm_history else VM_DENSE), vm_history
        return FeatureSpec(
            n_dense=len(dense),
            user_cat_cardinalities=self._user_cards,
            n_items=self.n_items,
            item_cat_cardinalities=(18,),
            n_genres=self._n_genres,
            kg_buckets=self.kg_buckets,
            history_len=history,
            genres_per_item=self.genres_per_item,
            kg_per_item=self.kg_per_item if model == "fm" else 0,
        )

    def _dense(
        self, users: np.ndarray, items: np.ndarray, ts: np.ndarray, full: bool
    ) -> np.ndarray:
        u_n, u_mean, u_like = self._by_user.stats(users, ts)
        i_n, i_mean, i_like = self._by_item.stats(items, ts)
        columns = [
            np.log1p(u_n) / 5,
            np.log1p(i_n) / 6,
            i_mean - 3.5,
            i_like - 0.55,
            self._age[users],
            self._year[items],
        ]
        if full:
            start, pos = self._by_user.before(users, ts)
            last = self._by_user.ts[np.maximum(pos - 1, 0)]
            hours = np.where(pos > start, (ts - last) / 3600.0, 1e4)
            columns += [u_mean - 3.5, u_like - 0.55, np.log1p(hours) / 5]
        return np.stack(columns, axis=1).astype(np.float32)

    def _history(
        self, users: np.ndarray, ts: np.ndarray, length: int
    ) -> tuple[np.ndarray, np.ndarray]:
        start, pos = self._by_user.before(users, ts)
        idx = pos[:, None] - 1 - np.arange(length)[None, :]  # most recent first
        valid = idx >= start[:, None]
        idx = np.where(valid, idx, 0)
        items = np.where(valid, self._by_user.other[idx], 0)
        ratings = np.where(valid, self._by_user.rating[idx], 0)
        return items.astype(np.int64), ratings.astype(np.int64)

    def _ids(self, users: np.ndarray, items: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        users = np.asarray(users, dtype=np.int64)
        items = np.asarray(items, dtype=np.int64)
        known_user = (users >= 0) & (users < self.n_users)
        known_item = (items >= 0) & (items < self.n_items)
        return np.where(known_user, users, 0), np.where(known_item, items, 0)

    def fm_batch(self, users: np.ndarray, items: np.ndarray, ts: np.ndarray) -> FeatureBatch:
        """FM features of rows ``(users[b], items[b])`` as of ``ts[b]`` (strictly before)."""
        users, items = self._ids(users, items)
        ts = np.asarray(ts, dtype=np.int64)
        hist_items, hist_ratings = self._history(users, ts, self.history_len)
        return FeatureBatch(
            dense=torch.from_numpy(self._dense(users, items, ts, full=True)),
            user_cat=torch.from_numpy(self._user_cat[users]),
            item_id=torch.from_numpy(items),
            item_cat=torch.from_numpy(self._item_cat[items]),
            genres=torch.from_numpy(self._genres[items]),
            kg=torch.from_numpy(self._kg[items]),
            hist_items=torch.from_numpy(hist_items),
            hist_ratings=torch.from_numpy(hist_ratings),
        )

    def vm_batch(
        self, users: np.ndarray, items: np.ndarray, ts: np.ndarray, history: int = 0
    ) -> FeatureBatch:
        """The VM's own, smaller feature set; the KG field is empty (width 0).

        ``history == 0``: the user-blind VM (``VM_DENSE``, empty history fields).
        ``history > 0``: the user-aware VM (``VM_USER_DENSE``: the user's rating mean, like
        rate and recency too, and the user's last ``history`` items, most recent first;
        ``hist_ratings`` stays empty). Everything strictly before ``ts``."""
        users, items = self._ids(users, items)
        ts = np.asarray(ts, dtype=np.int64)
        empty = torch.zeros((len(users), 0), dtype=torch.int64)
        hist_items = empty
        if history > 0:
            hist_items = torch.from_numpy(self._history(users, ts, history)[0])
        return FeatureBatch(
            dense=torch.from_numpy(self._dense(users, items, ts, full=history > 0)),
            user_cat=torch.from_numpy(self._user_cat[users]),
            item_id=torch.from_numpy(items),
            item_cat=torch.from_numpy(self._item_cat[items]),
            genres=torch.from_numpy(self._genres[items]),
            kg=empty,
            hist_items=hist_items,
            hist_ratings=empty,
        )
