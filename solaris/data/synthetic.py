"""Seeded synthetic candidate logs, for scale and performance tests only.

The generator produces rows with exactly :data:`~solaris.data.schemas.CANDIDATES_SCHEMA`
(``request_id, user_id, item_id, ts, label``) and the statistical shape that matters to the
SOLARIS serving path, not to model quality:

* **Zipf item popularity.** An item of popularity rank ``r`` (1-based) is drawn with
  probability proportional to ``r ** -zipf_a``; ranks are mapped to item ids by a seeded
  random permutation, so popular items are spread over the id space.
* **Heavy-tailed users.** Each user has a lognormal activity weight (``sigma =
  user_activity_sigma``); the user of a request is drawn proportionally to it.
* **Recurring candidates.** Every user has a persistent pool of ``pool_size`` distinct items
  (initialised from the Zipf popularity when the user first appears). A request takes
  ``round(recurrence * candidates_per_request)`` candidates from the pool (a random subset)
  and the rest are fresh Zipf draws; a few of the fresh items (``max(1, pool_size // 10)``
  per request) then overwrite random pool slots, so the pool drifts like a "recent items"
  set. Pool state is one ``int32`` array ``[n_users, pool_size]``, allocated zero-filled
  (untouched pages of a user who never appears cost no resident memory) and filled lazily.
* **Distinct items within a request.** Duplicates are resampled from the Zipf popularity
  (excluding what the request already holds), which amounts to weighted sampling without
  replacement; after a fixed number of rounds the few remaining duplicates are resampled
  uniformly so the loop always ends quickly.
* **Time.** Requests arrive as one global Poisson process with mean gap
  ``mean_gap_seconds``; ``ts`` (epoch seconds) is non-decreasing over the whole stream and
  ``request_id`` runs 0, 1, 2, ... . The last request is truncated so that exactly
  ``n_pairs`` rows are produced.
* **Labels.** Each candidate is a labelled impression with probability ``label_rate``
  (label 1 with probability ``positive_rate``, else 0); the others have a null label.

Memory is ``O(chunk_rows + n_users * pool_size)`` whatever ``n_pairs`` is: rows are
generated in fixed internal blocks of requests (about 2**18 rows) with numpy, re-sliced into
the requested chunk size. Each block has its own random stream derived from ``seed`` and the
block index, so the output is a function of the spec alone: identical for a given seed
**whatever** ``chunk_rows`` is.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm.auto import tqdm

from solaris.data.schemas import CANDIDATES_SCHEMA
from solaris.errors import SolarisError
from solaris.files import atomic_write

__all__ = ["SyntheticSpec", "SyntheticSpecError", "generate_candidates", "write_synthetic"]

_BLOCK_ROWS = 1 << 18  # rows per internal generation block (fixed: output must not depend on it)
_ZIPF_ROUNDS = 32  # duplicate-resampling rounds from the Zipf law before falling back to uniform
_INT32_MAX = np.iinfo(np.int32).max
# The most generator state a spec may ask for (the users' pools, the items' popularity):
# 100,000 users take 60 MB; 3e9 users took the machine's memory before a row was written.
MAX_STATE_BYTES = 8 * 2**30
# Per item while the popularity is built: ranks, their powers and the cumulative law
# (float64 each) and the id permutation (int64, then int32).
_ITEM_STATE_BYTES = 32

_DrawFn = Callable[[int], np.ndarray]


class SyntheticSpecError(SolarisError, ValueError):
    """A synthetic-data spec or argument the generator refuses; the message names the field."""


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


@dataclass(frozen=True)
class SyntheticSpec:
    """Shape of a synthetic candidate log; see the module docstring for the model.

    ``pool_size`` (per-user recurring pool) defaults to ``None``: 25% more than the number of
    pool candidates per request, ``k = round(recurrence * candidates_per_request)``, so that
    consecutive requests of a user share most of their pool items (``0`` when
    ``recurrence == 0``). An explicit value must lie in ``[k, n_items - (candidates_per_request
    - k)]`` so pool and fresh candidates can always be distinct.
    """

    n_pairs: int
    n_users: int = 100_000
    n_items: int = 50_000
    candidates_per_request: int = 200
    zipf_a: float = 1.1
    user_activity_sigma: float = 1.5
    recurrence: float = 0.6
    label_rate: float = 0.02
    positive_rate: float = 0.55
    start_ts: int = 1_700_000_000
    mean_gap_seconds: float = 1.0
    seed: int = 0
    pool_size: int | None = None

    def __post_init__(self) -> None:
        for name in ("n_pairs", "n_users", "n_items", "candidates_per_request"):
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                raise SyntheticSpecError(f"{name} must be a positive integer, got {value!r}")
        if self.n_items > _INT32_MAX:
            raise SyntheticSpecError(
                f"n_items must be at most {_INT32_MAX} (int32), got {self.n_items}"
            )
        if self.candidates_per_request > self.n_items:
            raise SyntheticSpecError(
                "candidates_per_request must not exceed n_items (items within a request are "
                f"distinct), got {self.candidates_per_request} > {self.n_items}"
            )
        for name in ("zipf_a", "user_activity_sigma", "mean_gap_seconds"):
            value = getattr(self, name)
            if not _is_real(value) or not math.isfinite(value) or value < 0:
                raise SyntheticSpecError(f"{name} must be a finite number >= 0, got {value!r}")
        for name in ("recurrence", "label_rate", "positive_rate"):
            value = getattr(self, name)
            if not _is_real(value) or not 0.0 <= value <= 1.0:
                raise SyntheticSpecError(f"{name} must be a share in [0, 1], got {value!r}")
        if not _is_int(self.start_ts) or self.start_ts < 0:
            raise SyntheticSpecError(
                f"start_ts must be a non-negative integer, got {self.start_ts!r}"
            )
        if not _is_int(self.seed) or self.seed < 0:
            raise SyntheticSpecError(f"seed must be a non-negative integer, got {self.seed!r}")
        if self.pool_size is not None:
            if not _is_int(self.pool_size):
                raise SyntheticSpecError(
                    f"pool_size must be an integer or None, got {self.pool_size!r}"
                )
            low = self.pool_candidates
            high = self.n_items - self.fresh_candidates
            if not low <= self.pool_size <= high:
                raise SyntheticSpecError(
                    f"pool_size must lie in [{low}, {high}] (pool candidates per request, "
                    f"n_items minus fresh candidates per request), got {self.pool_size}"
                )
        if self.state_bytes > MAX_STATE_BYTES:
            raise SyntheticSpecError(
                f"n_users {self.n_users:,} with pools of {self.effective_pool_size} items and "
                f"n_items {self.n_items:,} need {self.state_bytes / 2**30:,.1f} GiB of "
                f"generator state, more than {MAX_STATE_BYTES / 2**30:g} GiB: fewer users or "
                "items, or a smaller recurrence"
            )

    @property
    def n_requests(self) -> int:
        """Number of requests, the last one possibly truncated."""
        return -(-self.n_pairs // self.candidates_per_request)

    @property
    def pool_candidates(self) -> int:
        """Candidates per (full) request taken from the user's pool."""
        return round(self.recurrence * self.candidates_per_request)

    @property
    def fresh_candidates(self) -> int:
        """Candidates per (full) request drawn fresh from the Zipf popularity."""
        return self.candidates_per_request - self.pool_candidates

    @property
    def state_bytes(self) -> int:
        """Memory of the generator's state, allocated before the first row: per user the
        ``int32`` pool, the ready flag and the activity weight (float64); per item the
        popularity law while it is built."""
        return self.n_users * (4 * self.effective_pool_size + 1 + 8) + (
            self.n_items * _ITEM_STATE_BYTES
        )

    @property
    def effective_pool_size(self) -> int:
        """The per-user pool size in use (``pool_size`` or its default)."""
        if self.pool_size is not None:
            return self.pool_size
        k = self.pool_candidates
        if k == 0:
            return 0
        return min(k + k // 4, self.n_items - self.fresh_candidates)


def _isin_sorted(values: np.ndarray, sorted_ref: np.ndarray) -> np.ndarray:
    """``values`` elementwise in ``sorted_ref`` (sorted, 1-D), by binary search."""
    if sorted_ref.size == 0:
        return np.zeros(values.shape, dtype=bool)
    idx = np.searchsorted(sorted_ref, values)
    np.minimum(idx, sorted_ref.size - 1, out=idx)
    return sorted_ref[idx] == values


def _make_rows_distinct(
    mat: np.ndarray, draw: _DrawFn, rng: np.random.Generator, n_items: int
) -> None:
    """Resample, in place, every entry of ``mat`` (int64, C-contiguous ``[rows, width]``) that
    repeats an earlier entry of its row, until each row holds distinct items.

    The leftmost occurrence of a value is kept, so columns placed first (the pool) win.
    Replacements come from ``draw`` (the Zipf law) and are rejected when already in the row,
    i.e. weighted sampling without replacement; after ``_ZIPF_ROUNDS`` rounds they come from
    the uniform law, which ends quickly since ``width <= n_items``.
    """
    rows, width = mat.shape
    if rows == 0 or width <= 1:
        return
    flat = mat.reshape(-1)  # a view: edits go to ``mat``
    row_of = np.repeat(np.arange(rows, dtype=np.int64) * n_items, width)
    keys = flat + row_of
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    repeat = np.empty(sorted_keys.size, dtype=bool)
    repeat[0] = False
    np.equal(sorted_keys[1:], sorted_keys[:-1], out=repeat[1:])
    pending = order[repeat]
    if pending.size == 0:
        return
    accepted = sorted_keys[~repeat]  # sorted unique keys already held by the rows
    extra = np.empty(0, dtype=np.int64)  # sorted keys accepted in later rounds
    rounds = 0
    while pending.size:
        if rounds < _ZIPF_ROUNDS:
            items = draw(pending.size).astype(np.int64, copy=False)
        else:
            items = rng.integers(0, n_items, size=pending.size, dtype=np.int64)
        new_keys = items + row_of[pending]
        free = ~(_isin_sorted(new_keys, accepted) | _isin_sorted(new_keys, extra))
        free_idx = np.flatnonzero(free)
        uniq, first = np.unique(new_keys[free_idx], return_index=True)
        take = free_idx[first]
        flat[pending[take]] = items[take]
        extra = np.insert(extra, np.searchsorted(extra, uniq), uniq)
        keep = np.ones(pending.size, dtype=bool)
        keep[take] = False
        pending = pending[keep]
        rounds += 1


class _Generator:
    """Stateful block generator behind :func:`generate_candidates`."""

    def __init__(self, spec: SyntheticSpec) -> None:
        self.spec = spec
        setup = np.random.default_rng(np.random.SeedSequence(spec.seed, spawn_key=(0,)))
        weights = setup.lognormal(0.0, spec.user_activity_sigma, size=spec.n_users)
        self.user_cdf = np.cumsum(weights)
        self.user_cdf /= self.user_cdf[-1]
        self.user_cdf[-1] = 1.0
        ranks = np.arange(1, spec.n_items + 1, dtype=np.float64)
        self.item_cdf = np.cumsum(ranks**-spec.zipf_a)
        self.item_cdf /= self.item_cdf[-1]
        self.item_cdf[-1] = 1.0
        self.rank_to_item = setup.permutation(spec.n_items).astype(np.int32)
        self.pool_size = spec.effective_pool_size
        self.k_pool = spec.pool_candidates if self.pool_size else 0
        self.n_fresh = spec.candidates_per_request - self.k_pool
        self.n_refresh = min(self.n_fresh, max(1, self.pool_size // 10)) if self.k_pool else 0
        # np.zeros maps fresh zero pages: rows of users never seen stay non-resident.
        self.pool = np.zeros((spec.n_users, self.pool_size), dtype=np.int32)
        self.pool_ready = np.zeros(spec.n_users, dtype=bool)
        self.clock = 0.0  # seconds since start_ts of the last request generated
        self.block_requests = max(1, _BLOCK_ROWS // spec.candidates_per_request)

    def _zipf(self, rng: np.random.Generator) -> _DrawFn:
        def draw(size: int) -> np.ndarray:
            ranks = np.searchsorted(self.item_cdf, rng.random(size), side="right")
            return self.rank_to_item[ranks]

        return draw

    def block(self, index: int) -> pa.Table:
        spec = self.spec
        cpr = spec.candidates_per_request
        first = index * self.block_requests
        n_req = min(self.block_requests, spec.n_requests - first)
        rng = np.random.default_rng(np.random.SeedSequence(spec.seed, spawn_key=(1, index)))
        draw = self._zipf(rng)

        users = np.searchsorted(self.user_cdf, rng.random(n_req), side="right")
        if self.k_pool:
            new_users = np.unique(users[~self.pool_ready[users]])
            if new_users.size:
                init = draw(new_users.size * self.pool_size).astype(np.int64)
                init = init.reshape(new_users.size, self.pool_size)
                _make_rows_distinct(init, draw, rng, spec.n_items)
                self.pool[new_users] = init
                self.pool_ready[new_users] = True
            # Whole pool row in random order (the first k_pool are this request's pool
            # candidates), then the fresh draws: fresh items end up distinct from the pool.
            perm = np.argsort(rng.random((n_req, self.pool_size)), axis=1)
            pool_rows = np.take_along_axis(self.pool[users], perm, axis=1).astype(np.int64)
            fresh = draw(n_req * self.n_fresh).astype(np.int64).reshape(n_req, self.n_fresh)
            mat = np.ascontiguousarray(np.concatenate([pool_rows, fresh], axis=1))
            _make_rows_distinct(mat, draw, rng, spec.n_items)
            items = np.concatenate([mat[:, : self.k_pool], mat[:, self.pool_size :]], axis=1)
            if self.n_refresh:
                slots = rng.integers(0, self.pool_size, size=(n_req, self.n_refresh))
                new_items = mat[:, self.pool_size : self.pool_size + self.n_refresh]
                self.pool[users[:, None], slots] = new_items
        else:
            items = draw(n_req * cpr).astype(np.int64).reshape(n_req, cpr)
            _make_rows_distinct(items, draw, rng, spec.n_items)

        gaps = rng.exponential(spec.mean_gap_seconds, size=n_req)
        times = self.clock + np.cumsum(gaps)
        self.clock = float(times[-1])
        ts = spec.start_ts + np.floor(times).astype(np.int64)

        n_rows = min(n_req * cpr, spec.n_pairs - first * cpr)
        u = rng.random(n_rows)
        labelled = u < spec.label_rate
        label = (u < spec.label_rate * spec.positive_rate).astype(np.int8)
        request_ids = np.arange(first, first + n_req, dtype=np.int64)
        arrays = [
            pa.array(np.repeat(request_ids, cpr)[:n_rows]),
            pa.array(np.repeat(users.astype(np.int64), cpr)[:n_rows]),
            pa.array(items.reshape(-1)[:n_rows]),
            pa.array(np.repeat(ts, cpr)[:n_rows]),
            pa.array(label, mask=~labelled, type=pa.int8()),
        ]
        return pa.Table.from_arrays(arrays, schema=CANDIDATES_SCHEMA)

    def n_blocks(self) -> int:
        return -(-self.spec.n_requests // self.block_requests)


def generate_candidates(spec: SyntheticSpec, chunk_rows: int = 1_000_000) -> Iterator[pa.Table]:
    """Yield the synthetic candidate log of ``spec`` as tables of ``chunk_rows`` rows.

    Every table has exactly :data:`CANDIDATES_SCHEMA`; all but the last hold ``chunk_rows``
    rows and together they hold ``spec.n_pairs``. ``ts`` is non-decreasing and
    ``request_id`` increasing over the whole stream; a request may straddle two chunks. The
    stream depends only on ``spec`` (``seed`` included), not on ``chunk_rows``. Memory is
    ``O(chunk_rows + n_users * pool_size)``.
    """
    if not _is_int(chunk_rows) or chunk_rows < 1:
        raise SyntheticSpecError(f"chunk_rows must be a positive integer, got {chunk_rows!r}")
    gen = _Generator(spec)
    buffer: list[pa.Table] = []
    buffered = 0
    for index in range(gen.n_blocks()):
        block = gen.block(index)
        buffer.append(block)
        buffered += block.num_rows
        if buffered < chunk_rows:
            continue
        pending = pa.concat_tables(buffer)
        offset = 0
        while buffered - offset >= chunk_rows:
            yield pending.slice(offset, chunk_rows).combine_chunks()
            offset += chunk_rows
        buffer = [pending.slice(offset)] if offset < buffered else []
        buffered -= offset
    if buffered:
        yield pa.concat_tables(buffer).combine_chunks()


def write_synthetic(
    spec: SyntheticSpec,
    path: str | os.PathLike[str],
    chunk_rows: int = 1_000_000,
    progress: bool = True,
) -> int:
    """Write the synthetic candidate log of ``spec`` to one parquet file at ``path``.

    Chunks are streamed through a :class:`pyarrow.parquet.ParquetWriter` into the atomic
    writer of :mod:`solaris.files` (a unique temporary file next to ``path``, fsynced, then
    renamed over it); on failure the temporary file is removed and ``path`` is left
    untouched. Returns the number of rows written (``spec.n_pairs``).
    """
    written = 0

    def write(fh: BinaryIO) -> None:
        nonlocal written
        with (
            pq.ParquetWriter(fh, CANDIDATES_SCHEMA) as writer,
            tqdm(total=spec.n_pairs, unit="pairs", unit_scale=True, disable=not progress) as bar,
        ):
            for table in generate_candidates(spec, chunk_rows=chunk_rows):
                writer.write_table(table)
                written += table.num_rows
                bar.update(table.num_rows)

    atomic_write(Path(path), write)
    return written
