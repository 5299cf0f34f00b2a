"""A worked example of SOLARIS on a user's own FM and traffic, with no MovieLens in it.

SOLARIS reaches a recommender only through the interfaces of :mod:`solaris.adapters`. This
module implements all of them for a small seeded world, to show what a user writes:

* **Traffic** (:class:`SyntheticTraffic`, factory :func:`traffic`, a
  :class:`~solaris.adapters.TrafficSource`): the candidate log of
  :func:`solaris.data.synthetic.generate_candidates` (requests with recurring (user, item)
  pairs, a few labelled impressions), stored as ``log.parquet`` with the ``score`` that a
  production verifier would have logged with each candidate.
* **Foundation model** (:class:`SyntheticFoundationModel`, factory
  :func:`foundation_model`, a :class:`~solaris.adapters.FoundationModel`): a
  :class:`PairTowerFM`, shaped unlike the MovieLens DCNv2 ranker: a hashed user-id
  embedding, an item-id embedding and eight causal counters read from the log (how often
  the item, the user and the pair appeared and were labelled strictly before ``ts``,
  :class:`LogFeatures`), through an MLP to ``h`` of width ``shared_dim = 24``, with one
  linear head for the label.
* **Verifier** (:class:`RecurrenceVerifier`, factory :func:`verifier`, a
  :class:`~solaris.adapters.Verifier`, optional): recomputes the logged score from the log,
  for a user who prefers re-scoring to the default (the logged scores). The score favours
  recurring pairs: the pair's candidate count in the previous 6 hours plus
  ``0.05 * log1p`` of the item's candidate count in the previous 24 hours.

:func:`prepare` writes both artefacts under ``<artifacts_dir>/synthetic``: the log
(``log.parquet``) and the trained FM (``fm.pt``, its weights only, loaded with
``weights_only=True``, and ``fm.pt.json``, its constructor arguments and version: a SOLARIS
checkpoint, :func:`solaris.models.checkpoints.save_checkpoint`). It takes a few seconds on a
CPU, is seeded, and rewrites byte-identical files for the same :class:`SyntheticWorld`.
Then configure::

    namespace: synthetic
    replay: true
    model:
      foundation: "solaris.examples.synthetic:foundation_model"
      trainer: null
      # verifier: "solaris.examples.synthetic:verifier"   # re-score instead of logged scores
    requests:
      source: "solaris.examples.synthetic:traffic"

The default world: 20,000 candidate rows in 800 requests of 25 candidates, 200 users, 300
items, about 71 hours from 2023-11-14T00:00Z (``ts`` from 1,699,920,000), 5% labelled;
about 43% of the rows repeat a pair the user was shown in the previous 6 hours. The
generator draws labels independently of everything else, so the FM's head can learn little
more than the base rate: the example shows the plumbing, not model quality. The FM's
``h`` is nevertheless a deterministic function of causal features, which is all SOLARIS
needs from it.

``SolarisConfig.model.shared_dim`` and the other ``model`` sizes configure the MovieLens
FM; this example ignores them and reports its own ``shared_dim``.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import torch
from torch import nn

from solaris.data.schemas import request_log_frame
from solaris.data.synthetic import SyntheticSpec, generate_candidates
from solaris.files import atomic_write_parquet
from solaris.models.checkpoints import checkpoint_meta_path, load_checkpoint, save_checkpoint

if TYPE_CHECKING:
    from solaris.config import SolarisConfig

__all__ = [
    "FEATURE_NAMES",
    "FM_FILE",
    "FM_KIND",
    "ITEM_WINDOW_SECONDS",
    "LOG_FILE",
    "PAIR_WINDOW_SECONDS",
    "POPULARITY_WEIGHT",
    "LogFeatures",
    "PairBatch",
    "PairTowerFM",
    "RecurrenceVerifier",
    "SyntheticFoundationModel",
    "SyntheticTraffic",
    "SyntheticWorld",
    "foundation_model",
    "load_foundation_model",
    "prepare",
    "synthetic_dir",
    "traffic",
    "verifier",
]

LOG_FILE = "log.parquet"
FM_FILE = "fm.pt"
FM_KIND = "synthetic-pair-tower"  # the checkpoint's kind
_FORMAT = 1  # salts the FM version; bump when what the version hashes changes

_HOUR = 3_600
PAIR_WINDOW_SECONDS = 6 * _HOUR  # "recent" for a pair: the recurrence window of the score
ITEM_WINDOW_SECONDS = 24 * _HOUR  # "recent" for an item's popularity
POPULARITY_WEIGHT = 0.05  # the score's item-popularity term, a tie-break between equal counts

FEATURE_NAMES: tuple[str, ...] = (
    "item_seen",  # log1p(candidates of the item before ts)
    "item_seen_24h",  # log1p(candidates of the item in [ts - 24 h, ts))
    "item_labelled",  # log1p(labelled impressions of the item before ts)
    "item_positive_rate",  # (positives + 1) / (labelled + 2), before ts
    "user_seen",  # log1p(candidates of the user before ts)
    "user_positive_rate",  # (positives + 1) / (labelled + 2), before ts
    "pair_seen_6h",  # log1p(candidates of the (user, item) in [ts - 6 h, ts))
    "pair_seen",  # log1p(candidates of the (user, item) before ts)
)

_DEFAULT_SPEC = SyntheticSpec(
    n_pairs=20_000,
    n_users=200,
    n_items=300,
    candidates_per_request=25,
    recurrence=0.7,
    label_rate=0.05,
    start_ts=1_699_920_000,  # 2023-11-14T00:00:00Z, a multiple of 86,400
    mean_gap_seconds=324.0,  # 800 requests over about 3 days
    seed=0,
)

# ts must fit below _STRIDE so that (key rank, ts) packs into one sortable int64.
_STRIDE = 1 << 34
_MAX_KEYS = (1 << 63) // _STRIDE
_USER_HASH = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing of user ids into buckets


@dataclass(frozen=True)
class SyntheticWorld:
    """Settings of the example: its candidate log and its FM.

    Attributes:
        spec: the candidate log (its ``seed`` seeds the log).
        seed: seeds the FM's initialisation and training order.
        shared_dim: width of ``h`` (deliberately unlike MovieLens's 128).
        embed_dim: width of the user and item embeddings.
        hidden_dim: width of the MLP's hidden layer.
        user_buckets: hash buckets of the user-id embedding.
        train_share: the FM learns from the labelled rows of this first share of the time
            range (the rest is left to SOLARIS's replay).
        epochs, batch_size, lr: the FM's training.
    """

    spec: SyntheticSpec = _DEFAULT_SPEC
    seed: int = 0
    shared_dim: int = 24
    embed_dim: int = 16
    hidden_dim: int = 64
    user_buckets: int = 64
    train_share: float = 0.6
    epochs: int = 8
    batch_size: int = 64
    lr: float = 3e-3

    def __post_init__(self) -> None:
        for name in ("shared_dim", "embed_dim", "hidden_dim", "user_buckets", "epochs"):
            _check_positive(name, getattr(self, name))
        _check_positive("batch_size", self.batch_size)
        if not 0.0 < self.train_share < 1.0:
            raise ValueError(f"train_share must be in (0, 1), got {self.train_share!r}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr!r}")


def _check_positive(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def synthetic_dir(cfg: SolarisConfig) -> Path:
    """The example's folder, ``<artifacts_dir>/synthetic``."""
    return Path(cfg.artifacts_dir) / "synthetic"


def _missing(path: Path) -> FileNotFoundError:
    return FileNotFoundError(
        f"{path} does not exist: call solaris.examples.synthetic.prepare(cfg) first "
        f"(it writes {LOG_FILE} and {FM_FILE} under {path.parent})"
    )


# --------------------------------------------------------------------------------------------
# Causal counters over the log
# --------------------------------------------------------------------------------------------


def _as_int64(name: str, values: Any) -> np.ndarray:
    array = np.asarray(values)
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {array.shape}")
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise ValueError(f"{name} must hold integers, got {array.dtype}")
    return array.astype(np.int64, copy=False)


class _EventIndex:
    """Events ``(key, ts, weights)`` sorted by ``(key, ts)``: per-query counts and weight sums
    of a key's events in a time window, by binary search (no loop over rows).

    ``key`` ranks and ``ts`` pack into one int64 code ``rank * 2**34 + ts``, so the events of
    a key in ``[start, end)`` are one contiguous run of the sorted codes; prefix sums of the
    weights turn a run into sums.
    """

    def __init__(self, keys: np.ndarray, ts: np.ndarray, weights: np.ndarray) -> None:
        self.keys, inverse = np.unique(keys, return_inverse=True)  # (K,), (N,)
        if self.keys.size > _MAX_KEYS:
            raise ValueError(f"at most {_MAX_KEYS} distinct keys, got {self.keys.size}")
        order = np.lexsort((ts, inverse))  # (N,)
        self.codes = inverse[order].astype(np.int64) * _STRIDE + ts[order]  # (N,) sorted
        self.cumsum = np.zeros((ts.size + 1, weights.shape[1]), dtype=np.float64)  # (N + 1, W)
        np.cumsum(weights[order], axis=0, out=self.cumsum[1:])

    def window(
        self, keys: np.ndarray, start: np.ndarray, end: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """Events of ``keys[k]`` with ``start[k] <= ts < end[k]``: counts ``[B]`` int64 and
        weight sums ``[B, W]``. Unknown keys count zero."""
        pos = np.searchsorted(self.keys, keys)  # (B,)
        found = np.zeros(keys.shape, dtype=bool)
        inside = pos < self.keys.size
        found[inside] = self.keys[pos[inside]] == keys[inside]
        base = np.where(found, pos, 0).astype(np.int64) * _STRIDE
        lo = np.searchsorted(self.codes, base + start, side="left")
        hi = np.searchsorted(self.codes, base + np.maximum(end, start), side="left")
        hi = np.where(found, hi, lo)
        return hi - lo, self.cumsum[hi] - self.cumsum[lo]


class LogFeatures:
    """Causal counters of a candidate log: the FM's dense features and the verifier's score.

    Every value for a query ``(user, item, ts)`` reads only log rows with a time strictly
    before ``ts``, so rows at or after ``ts`` (the query's own request included) change
    nothing. Queries are vectorised: a handful of ``numpy.searchsorted`` calls over arrays
    sorted once at construction.

    Args:
        users, items, ts (np.ndarray): ``[N]`` int64 columns of the log (``ts`` epoch
            seconds, ``0 <= ts < 2**34``).
        labels (np.ndarray): ``[N]`` int8, ``1``/``0`` for labelled impressions, ``-1`` for
            unlabelled candidates.
    """

    def __init__(
        self, users: np.ndarray, items: np.ndarray, ts: np.ndarray, labels: np.ndarray
    ) -> None:
        users, items, ts = (
            _as_int64(n, a) for n, a in (("users", users), ("items", items), ("ts", ts))
        )
        labels = np.asarray(labels)
        if not users.size == items.size == ts.size == labels.size:
            raise ValueError("users, items, ts and labels must have the same length")
        _check_ts(ts)
        labelled = (labels >= 0).astype(np.float64)
        positive = (labels == 1).astype(np.float64)
        counts = np.stack([labelled, positive], axis=1)  # (N, 2)
        self.user_ids = np.unique(users)
        self.item_ids = np.unique(items)
        self._items = _EventIndex(items, ts, counts)
        self._users = _EventIndex(users, ts, counts)
        self._pairs = _EventIndex(self._pair_keys(users, items), ts, np.zeros((ts.size, 0)))
        self.n_rows = int(ts.size)

    @classmethod
    def from_table(cls, table: pa.Table | pd.DataFrame) -> LogFeatures:
        """From a log with columns ``user_id, item_id, ts, label`` (label null: unlabelled)."""
        if isinstance(table, pd.DataFrame):
            table = pa.Table.from_pandas(table, preserve_index=False)
        label = table["label"].cast(pa.int8()).fill_null(-1).to_numpy()
        return cls(
            table["user_id"].to_numpy(), table["item_id"].to_numpy(), table["ts"].to_numpy(), label
        )

    def _pair_keys(self, users: np.ndarray, items: np.ndarray) -> np.ndarray:
        """Exact int64 keys of (user, item) pairs of the log's ids; ``-1`` for other ids."""
        u = np.searchsorted(self.user_ids, users)
        i = np.searchsorted(self.item_ids, items)
        known = (u < self.user_ids.size) & (i < self.item_ids.size)
        known[known] = (self.user_ids[u[known]] == users[known]) & (
            self.item_ids[i[known]] == items[known]
        )
        return np.where(known, u.astype(np.int64) * self.item_ids.size + i, -1)

    def _query(self, users: Any, items: Any, ts: Any) -> tuple[np.ndarray, ...]:
        users, items, ts = (
            _as_int64(n, a) for n, a in (("users", users), ("items", items), ("ts", ts))
        )
        if not users.size == items.size == ts.size:
            raise ValueError(
                f"users, items and ts must have the same length, got {users.size}, "
                f"{items.size}, {ts.size}"
            )
        _check_ts(ts)
        return users, items, ts

    def dense(self, users: Any, items: Any, ts: Any) -> np.ndarray:
        """The dense features of :data:`FEATURE_NAMES`, ``[B, 8]`` float32."""
        users, items, ts = self._query(users, items, ts)
        zero = np.zeros_like(ts)
        item_n, item_w = self._items.window(items, zero, ts)
        item_24h, _ = self._items.window(items, np.maximum(ts - ITEM_WINDOW_SECONDS, 0), ts)
        user_n, user_w = self._users.window(users, zero, ts)
        pairs = self._pair_keys(users, items)
        pair_6h, _ = self._pairs.window(pairs, np.maximum(ts - PAIR_WINDOW_SECONDS, 0), ts)
        pair_n, _ = self._pairs.window(pairs, zero, ts)
        columns = [
            np.log1p(item_n),
            np.log1p(item_24h),
            np.log1p(item_w[:, 0]),
            (item_w[:, 1] + 1.0) / (item_w[:, 0] + 2.0),
            np.log1p(user_n),
            (user_w[:, 1] + 1.0) / (user_w[:, 0] + 2.0),
            np.log1p(pair_6h),
            np.log1p(pair_n),
        ]
        return np.stack(columns, axis=1).astype(np.float32)  # (B, 8)

    def score(self, users: Any, items: Any, ts: Any) -> np.ndarray:
        """The cheap verifier score, ``[B]`` float32: the pair's candidates in
        ``[ts - 6 h, ts)`` plus ``0.05 * log1p`` of the item's candidates in ``[ts - 24 h, ts)``."""
        users, items, ts = self._query(users, items, ts)
        pairs = self._pair_keys(users, items)
        pair_6h, _ = self._pairs.window(pairs, np.maximum(ts - PAIR_WINDOW_SECONDS, 0), ts)
        item_24h, _ = self._items.window(items, np.maximum(ts - ITEM_WINDOW_SECONDS, 0), ts)
        return (pair_6h + POPULARITY_WEIGHT * np.log1p(item_24h)).astype(np.float32)

    def digest(self) -> str:
        """sha256 of the indexed log, so that the FM's version names the log it reads."""
        hasher = hashlib.sha256()
        for index in (self._items, self._users, self._pairs):
            for array in (index.keys, index.codes, index.cumsum):
                hasher.update(np.ascontiguousarray(array).tobytes())
        return hasher.hexdigest()


def _check_ts(ts: np.ndarray) -> None:
    if ts.size and (ts.min() < 0 or ts.max() >= _STRIDE):
        raise ValueError(f"ts must be epoch seconds in [0, 2**34), got [{ts.min()}, {ts.max()}]")


# --------------------------------------------------------------------------------------------
# The FM
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PairBatch:
    """The FM's input for ``B`` pairs (what :meth:`SyntheticFoundationModel.features` returns).

    Attributes:
        user_bucket: ``[B]`` int64, the hashed user id in ``[0, user_buckets)``.
        item_index: ``[B]`` int64, the item id in ``[0, n_items)``, or ``n_items`` for an item
            the FM was not built for.
        dense: ``[B, 8]`` float32, the raw :data:`FEATURE_NAMES` (the FM standardises them).
    """

    user_bucket: torch.Tensor
    item_index: torch.Tensor
    dense: torch.Tensor

    def __len__(self) -> int:
        return int(self.user_bucket.shape[0])

    def to(self, device: torch.device | str) -> PairBatch:
        return PairBatch(
            self.user_bucket.to(device), self.item_index.to(device), self.dense.to(device)
        )


class PairTowerFM(nn.Module):
    """A two-tower-with-interaction FM over ids and causal counters.

    Parts, in order:

    * ``user_embedding``: ``nn.Embedding(user_buckets, E)`` of the hashed user id;
    * ``item_embedding``: ``nn.Embedding(n_items + 1, E)`` of the item id (the last row is
      every unknown item);
    * ``dense_arch``: standardisation by the fitted buffers ``dense_mean`` / ``dense_std``,
      then ``Linear(n_dense, E) -> ReLU``;
    * ``over_arch``: ``[u, i, u * i, d]`` (width ``4E``) through ``Linear -> ReLU -> Linear
      -> LayerNorm -> ReLU`` to ``h``, the LAST SHARED LAYER, ``[B, shared_dim]``;
    * ``head``: ``nn.Linear(shared_dim, 1)``, the label's logit.

    Args:
        user_buckets (int): hash buckets of the user id.
        n_items (int): item ids ``0 .. n_items - 1`` have their own row.
        n_dense (int): width of ``batch.dense``.
        embed_dim (int): width ``E`` of the embeddings and the dense projection.
        hidden_dim (int): hidden width of ``over_arch``.
        shared_dim (int): width of ``h``.

    Call args:
        batch (PairBatch): ``B`` pairs.

    Returns:
        torch.Tensor: ``[B]`` logits (``forward``); ``shared`` returns ``[B, shared_dim]``.

    Example::

        >>> fm = PairTowerFM(user_buckets=4, n_items=10, n_dense=8, embed_dim=4, shared_dim=6)
        >>> batch = PairBatch(torch.tensor([0, 3]), torch.tensor([2, 10]), torch.rand(2, 8))
        >>> fm.shared(batch).shape, fm(batch).shape
        (torch.Size([2, 6]), torch.Size([2]))
    """

    def __init__(
        self,
        user_buckets: int,
        n_items: int,
        n_dense: int = len(FEATURE_NAMES),
        embed_dim: int = 16,
        hidden_dim: int = 64,
        shared_dim: int = 24,
    ) -> None:
        super().__init__()
        for name, value in (
            ("user_buckets", user_buckets),
            ("n_items", n_items),
            ("n_dense", n_dense),
            ("embed_dim", embed_dim),
            ("hidden_dim", hidden_dim),
            ("shared_dim", shared_dim),
        ):
            _check_positive(name, value)
        self.user_buckets = user_buckets
        self.n_items = n_items
        self.n_dense = n_dense
        self.embed_dim = embed_dim
        self.hidden_dim = hidden_dim
        self.shared_dim = shared_dim
        self.register_buffer("dense_mean", torch.zeros(n_dense))
        self.register_buffer("dense_std", torch.ones(n_dense))
        self.user_embedding = nn.Embedding(user_buckets, embed_dim)
        self.item_embedding = nn.Embedding(n_items + 1, embed_dim)
        self.dense_arch = nn.Sequential(nn.Linear(n_dense, embed_dim), nn.ReLU())
        self.over_arch = nn.Sequential(
            nn.Linear(4 * embed_dim, hidden_dim),
            nn.ReLU(),
            nn.Linear(hidden_dim, shared_dim),
            nn.LayerNorm(shared_dim),
            nn.ReLU(),
        )
        self.head = nn.Linear(shared_dim, 1)

    def init_kwargs(self) -> dict[str, int]:
        """The constructor's arguments, plain ints (stored in ``fm.pt``)."""
        return {
            "user_buckets": self.user_buckets,
            "n_items": self.n_items,
            "n_dense": self.n_dense,
            "embed_dim": self.embed_dim,
            "hidden_dim": self.hidden_dim,
            "shared_dim": self.shared_dim,
        }

    def shared(self, batch: PairBatch) -> torch.Tensor:
        """The last shared layer ``h``, the representation SOLARIS precomputes.

        Args:
            batch (PairBatch): ``B`` pairs, on this module's device.

        Returns:
            torch.Tensor: ``[B, shared_dim]``.
        """
        u = self.user_embedding(batch.user_bucket)  # (B, E)
        i = self.item_embedding(batch.item_index)  # (B, E)
        dense = (batch.dense - self.dense_mean) / self.dense_std  # (B, n_dense)
        d = self.dense_arch(dense)  # (B, E)
        return self.over_arch(torch.cat([u, i, u * i, d], dim=1))  # (B, shared_dim)

    def forward(self, batch: PairBatch) -> torch.Tensor:
        """
        Args:
            batch (PairBatch): ``B`` pairs.

        Returns:
            torch.Tensor: ``[B]`` logits of the label.
        """
        return self.head(self.shared(batch)).squeeze(1)  # (B,)


def _user_buckets(users: np.ndarray, buckets: int) -> np.ndarray:
    """Fibonacci hash of int64 user ids into ``[0, buckets)`` (wrapping uint64 arithmetic)."""
    hashed = users.astype(np.uint64) * _USER_HASH  # (B,), wraps modulo 2**64
    hashed ^= hashed >> np.uint64(29)
    return (hashed % np.uint64(buckets)).astype(np.int64)


def _make_batch(
    module: PairTowerFM, log: LogFeatures, users: Any, items: Any, ts: Any
) -> PairBatch:
    dense = log.dense(users, items, ts)  # validates and aligns the three columns
    users = _as_int64("users", users)
    items = _as_int64("items", items)
    item_index = np.where((items >= 0) & (items < module.n_items), items, module.n_items)
    return PairBatch(
        user_bucket=torch.from_numpy(_user_buckets(users, module.user_buckets)),
        item_index=torch.from_numpy(item_index.astype(np.int64)),
        dense=torch.from_numpy(dense),
    )


def _fm_version(init: dict[str, int], state: dict[str, torch.Tensor], log_digest: str) -> str:
    """``synthfm-`` and 12 hex digits of the sha256 of the init, the weights and the log."""
    hasher = hashlib.sha256(f"synthfm/{_FORMAT}".encode())
    hasher.update(json.dumps(init, sort_keys=True).encode())
    hasher.update(log_digest.encode())
    for name in sorted(state):
        hasher.update(name.encode())
        hasher.update(state[name].detach().cpu().contiguous().numpy().tobytes())
    return "synthfm-" + hasher.hexdigest()[:12]


class SyntheticFoundationModel:
    """The :class:`~solaris.adapters.FoundationModel` of the example.

    Attributes:
        version: ``synthfm-`` and 12 hex digits naming the weights, the init and the log
            the features are read from.
        shared_dim: width of ``h`` (24 in the default world).
        module: the :class:`PairTowerFM`, in eval mode.
        log: the :class:`LogFeatures` the dense features come from.
    """

    def __init__(self, module: PairTowerFM, log: LogFeatures, version: str) -> None:
        self.module = module.eval()
        self.log = log
        self.version = version
        self.shared_dim = module.shared_dim

    def features(self, users: np.ndarray, items: np.ndarray, ts: np.ndarray) -> PairBatch:
        """The batch of pairs ``(users[k], items[k])`` as of ``ts[k]`` (CPU tensors); reads
        only log rows strictly before ``ts[k]``."""
        return _make_batch(self.module, self.log, users, items, ts)

    def shared(self, batch: PairBatch) -> torch.Tensor:
        """``h``, ``[B, shared_dim]`` float32, on the module's device."""
        device = self.module.dense_mean.device
        with torch.inference_mode():
            return self.module.shared(batch.to(device))

    def to(self, device: torch.device | str) -> SyntheticFoundationModel:
        self.module.to(device)
        return self


def load_foundation_model(folder: str | os.PathLike[str]) -> SyntheticFoundationModel:
    """The FM saved by :func:`prepare` in ``folder``, reading features from its log.

    Raises:
        FileNotFoundError: ``fm.pt``, its metadata or ``log.parquet`` is missing (naming
            :func:`prepare`).
        ValueError: the files do not belong together (one was rewritten without the other),
            or ``fm.pt`` is not a tensors-only checkpoint of this FM
            (:class:`~solaris.models.checkpoints.CheckpointError`).
    """
    folder = Path(folder)
    fm_path, log_path = folder / FM_FILE, folder / LOG_FILE
    for path in (fm_path, checkpoint_meta_path(fm_path), log_path):
        if not path.is_file():
            raise _missing(path)
    module, saved_version = load_checkpoint(fm_path, PairTowerFM, kind=FM_KIND)
    log = LogFeatures.from_table(
        pq.read_table(log_path, columns=["user_id", "item_id", "ts", "label"])
    )
    version = _fm_version(module.init_kwargs(), module.state_dict(), log.digest())
    if version != saved_version:
        raise ValueError(
            f"{fm_path} (version {saved_version}) was not trained on {log_path} (or was "
            "altered): call solaris.examples.synthetic.prepare(cfg) again"
        )
    return SyntheticFoundationModel(module, log, version)


def foundation_model(cfg: SolarisConfig) -> SyntheticFoundationModel:
    """Factory for ``model.foundation``: the FM :func:`prepare` saved in :func:`synthetic_dir`."""
    return load_foundation_model(synthetic_dir(cfg))


# --------------------------------------------------------------------------------------------
# Traffic and verifier
# --------------------------------------------------------------------------------------------


class SyntheticTraffic:
    """The :class:`~solaris.adapters.TrafficSource` of the example: rows of ``log.parquet``.

    Args:
        path: the log written by :func:`prepare`.
    """

    columns = ("request_id", "user_id", "item_id", "ts", "label", "score")

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise _missing(self.path)

    def requests(self, start: int, end: int) -> pd.DataFrame:
        """Candidate rows with ``start <= ts < end``, sorted by ``ts``: ``request_id, user_id,
        item_id, ts`` int64, ``label`` Int8 (null: unlabelled), ``score`` float32."""
        dataset = ds.dataset(self.path, format="parquet")
        condition = (ds.field("ts") >= int(start)) & (ds.field("ts") < int(end))
        table = dataset.to_table(columns=list(self.columns), filter=condition)
        table = table.sort_by([("ts", "ascending")])
        return request_log_frame(table, str(self.path))


def traffic(cfg: SolarisConfig) -> SyntheticTraffic:
    """Factory for ``requests.source``: replays the log :func:`prepare` wrote."""
    return SyntheticTraffic(synthetic_dir(cfg) / LOG_FILE)


class RecurrenceVerifier:
    """The optional :class:`~solaris.adapters.Verifier` of the example: recomputes, from the
    log, the score that ``log.parquet`` holds (:meth:`LogFeatures.score`).

    Args:
        log: the counters of the log.
    """

    version = "synthetic-recurrence"

    def __init__(self, log: LogFeatures) -> None:
        self.log = log

    def score(self, candidates: pd.DataFrame) -> np.ndarray:
        """One float64 per row of ``candidates`` (columns ``user_id, item_id, ts``)."""
        scores = self.log.score(
            candidates["user_id"].to_numpy(np.int64),
            candidates["item_id"].to_numpy(np.int64),
            candidates["ts"].to_numpy(np.int64),
        )
        return scores.astype(np.float64)


def verifier(cfg: SolarisConfig) -> RecurrenceVerifier:
    """Factory for ``model.verifier``: re-scores with the counters of the prepared log."""
    path = synthetic_dir(cfg) / LOG_FILE
    if not path.is_file():
        raise _missing(path)
    return RecurrenceVerifier(
        LogFeatures.from_table(pq.read_table(path, columns=["user_id", "item_id", "ts", "label"]))
    )


# --------------------------------------------------------------------------------------------
# prepare
# --------------------------------------------------------------------------------------------


def _train(world: SyntheticWorld, log: LogFeatures, table: pa.Table) -> PairTowerFM:
    """The FM fitted on the labelled rows of the first ``train_share`` of the time range."""
    ts = table["ts"].to_numpy()
    labels = table["label"].cast(pa.int8()).fill_null(-1).to_numpy()
    cutoff = ts[0] + world.train_share * (ts[-1] - ts[0])
    rows = np.flatnonzero((ts < cutoff) & (labels >= 0))
    users = table["user_id"].to_numpy()[rows]
    items = table["item_id"].to_numpy()[rows]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: the same float sums, so the same weights
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(world.seed)
            module = PairTowerFM(
                user_buckets=world.user_buckets,
                n_items=world.spec.n_items,
                embed_dim=world.embed_dim,
                hidden_dim=world.hidden_dim,
                shared_dim=world.shared_dim,
            )
            batch = _make_batch(module, log, users, items, ts[rows])
            module.dense_mean.copy_(batch.dense.mean(dim=0))
            module.dense_std.copy_(batch.dense.std(dim=0, correction=0).clamp_min(1e-3))
            target = torch.from_numpy(labels[rows].astype(np.float32))
            optimiser = torch.optim.Adam(module.parameters(), lr=world.lr)
            loss_fn = nn.BCEWithLogitsLoss()
            order = torch.Generator().manual_seed(world.seed)
            module.train()
            for _ in range(world.epochs):
                perm = torch.randperm(len(rows), generator=order)
                for step in range(0, len(rows), world.batch_size):
                    idx = perm[step : step + world.batch_size]
                    sub = PairBatch(batch.user_bucket[idx], batch.item_index[idx], batch.dense[idx])
                    optimiser.zero_grad()
                    loss_fn(module(sub), target[idx]).backward()
                    optimiser.step()
    finally:
        torch.set_num_threads(threads)
    return module.eval()


def prepare(cfg: SolarisConfig, world: SyntheticWorld | None = None) -> Path:
    """Write the example's log and FM under ``<artifacts_dir>/synthetic``; return the folder.

    * ``log.parquet``: the candidate log of ``world.spec`` (``request_id, user_id, item_id,
      ts, label``) and ``score`` float32, the verifier's score at each row's time;
    * ``fm.pt`` and ``fm.pt.json``: the :class:`PairTowerFM` trained on the labelled rows of
      the first ``world.train_share`` of the time range, as a SOLARIS checkpoint (weights
      only; kind, constructor arguments and version in the JSON file).

    Every file is replaced atomically. The result is a function of ``world`` alone: the
    same world gives byte-identical files and the same FM version. ``world`` defaults to
    :class:`SyntheticWorld()`.
    """
    world = SyntheticWorld() if world is None else world
    folder = synthetic_dir(cfg)
    folder.mkdir(parents=True, exist_ok=True)

    table = pa.concat_tables(generate_candidates(world.spec)).combine_chunks()
    log = LogFeatures.from_table(table)
    score = log.score(
        table["user_id"].to_numpy(), table["item_id"].to_numpy(), table["ts"].to_numpy()
    )
    table = table.append_column(pa.field("score", pa.float32(), nullable=False), pa.array(score))
    atomic_write_parquet(folder / LOG_FILE, table)

    module = _train(world, log, table)
    init = module.init_kwargs()
    version = _fm_version(init, module.state_dict(), log.digest())
    save_checkpoint(folder / FM_FILE, module, kind=FM_KIND, version=version, init=init)
    return folder
