"""User clustering and the neighbour tier: user embeddings → cosine KNN → ``nbr`` rows.

Two steps of the enrichment pipeline (DESIGN §1, §4):

* the daily clustering job builds one embedding per user (:func:`user_embeddings`) and the
  user's top-k most similar users by cosine similarity (the ``unn`` view): one faiss index
  over all users (:class:`UserIndex`, exact below 200,000 users, HNSW above), built once per
  run, serialised to one blob and queried per partition; :func:`nearest_users` is build +
  query of everyone in one process;
* the enrichment job fills the ``nbr`` view for (user, item) candidates the verifier did not
  select (:func:`neighbour_fill`; :class:`NeighbourFill` folds the codes in a chunk at a time,
  so a partition's fill streams the window's shards): the code of the most similar neighbour
  that has a fresh code for that item, and the similarity-weighted mean over all neighbours
  that have one. The Redis store cannot follow neighbour ids at read time, hence the
  precomputation.

Like :mod:`solaris.pipeline.aggregate`, every code is used float16-rounded (the values the
``pair`` view serves), and everything is vectorised: merges, sorts and segment reductions.
Bad input raises :class:`NeighborsError` naming the argument and the first bad id or row; the
checks are vectorised too, and the row is looked up only once a check has failed.
"""

from __future__ import annotations

import io
import numbers
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass

import faiss
import numpy as np
import pandas as pd

from solaris.errors import SolarisError
from solaris.pipeline.aggregate import (
    _as_int,
    _check_version,
    _event_ts,
    _group_sums,
    select_window,
    vectors,
)
from solaris.store.codec import f16_round
from solaris.store.contract import (
    EVENT_TS,
    FM_VERSION,
    ITEM_ID,
    N_NBRS,
    SIMILARITY,
    SRC_USER,
    USER_ID,
    Z_MEAN,
    Z_TOP1,
)

__all__ = [
    "CodeIndex",
    "NeighborsError",
    "NeighbourFill",
    "UserIndex",
    "nearest_users",
    "neighbour_fill",
    "user_embeddings",
]


class NeighborsError(SolarisError, ValueError):
    """Input the neighbour tier cannot use: the message names the argument (``user_ids``,
    ``emb``, ``neighbors``, ``targets``) and the first bad id or row."""


def _first_repeat(values: np.ndarray | pd.Series) -> tuple[int, int] | None:
    """``(row, first_row)``: the first row of ``values`` that repeats an earlier one, and that
    earlier row; ``None`` when all differ. A hash pass, no Python loop over the rows."""
    dup = pd.Series(values, copy=False).duplicated().to_numpy()
    if not dup.any():
        return None
    arr = np.asarray(values)
    row = int(np.argmax(dup))
    return row, int(np.argmax(arr == arr[row]))


def user_embeddings(
    pairs: pd.DataFrame,
    z: np.ndarray,
    *,
    as_of: int,
    window_seconds: int,
    fm_version: str,
) -> tuple[np.ndarray, np.ndarray]:
    """Per user, the mean of their float16-rounded pair codes in ``(as_of − window, as_of]``.

    Why the mean of ``z``: the neighbour tier substitutes a neighbour's ``z[v, i]`` for the
    missing ``z[u, i]``, so users should be close when their codes are close. The mean code
    is a user-side summary in exactly that space (the FM's compressed last shared layer), needs
    no extra model, and is what the user aggregate already serves, so the clustering and the
    fallback agree on what "similar" means. Rows are selected as in
    :func:`solaris.pipeline.aggregate.select_window` (same version, latest code per pair).

    Returns ``(user_ids [U] int64 ascending, emb [U, d] float32)``; users without a code in
    the window are absent.
    """
    rows, z16 = select_window(
        pairs, z, as_of=as_of, window_seconds=window_seconds, fm_version=fm_version
    )
    users, sums, counts = _group_sums(rows["user_id"].to_numpy(), z16)
    emb = (sums / np.maximum(counts, 1)[:, None]).astype(np.float32)
    return users.astype(np.int64), emb


def _cells(rows: np.ndarray) -> np.ndarray:
    """A 1-D object array whose cells are the rows of the 2-D ``rows`` (list-column cells)."""
    return np.fromiter(iter(rows), dtype=object, count=len(rows))


def _check_k(k: int) -> int:
    """``k`` as an ``int``; a bool, a non-integer or ``k <= 0`` is refused."""
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k <= 0:
        raise NeighborsError(f"k must be a positive integer, got {k!r}")
    return int(k)


def _check_ids(user_ids: np.ndarray) -> np.ndarray:
    """``user_ids`` as 1-D int64 without repeats (empty input may have any dtype)."""
    ids = np.asarray(user_ids)
    if ids.ndim != 1:
        raise NeighborsError(f"user_ids must be 1-D, got ndim={ids.ndim}")
    if not np.issubdtype(ids.dtype, np.integer) and len(ids):
        raise NeighborsError(f"user_ids must be integers, got dtype {ids.dtype}")
    ids = ids.astype(np.int64)
    repeat = _first_repeat(ids)
    if repeat is not None:
        row, first = repeat
        raise NeighborsError(
            f"user_ids contains duplicates: {int(ids[row])} at row {row} repeats row {first}"
        )
    return ids


def _unit_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(kept, unit)``: the rows of ``x`` with a non-zero norm, and those rows L2-normalised
    as float32 (cosine similarity is then the inner product).

    Normalised in float64 after dividing by the row's largest magnitude, so neither a tiny
    (subnormal float32) nor a huge (float64 near its max) embedding loses its direction.
    """
    x64 = np.asarray(x, dtype=np.float64)
    scale = np.abs(x64).max(axis=1, initial=0.0)
    kept = scale > 0
    y = x64[kept] / scale[kept, None]
    unit = y / np.linalg.norm(y, axis=1, keepdims=True)
    return kept, np.ascontiguousarray(unit, dtype=np.float32)


_HNSW_M = 32  # graph degree (2·M links on the base layer)
_HNSW_EF_CONSTRUCTION = 80
_HNSW_EF_SEARCH_MIN = 64
_QUERY_ROWS = 8192  # queries searched and post-processed at once (bounds temporary memory)
_BLOB_FORMAT = 1


def _ef_search(n: int) -> int:
    """HNSW ``efSearch`` for ``n`` results: ``3n`` (at least 64).

    Measured with ``efConstruction`` = 80 on uniformly random ``d`` = 32 embeddings (the
    hard case), ``n`` = 101, 5,000 sampled queries against exact (``bench/knn.py`` and a
    sweep): at 10^6 users ``efSearch`` = n, 1.5n, 2n, 3n, 4n give recall@100 0.86, 0.91,
    0.94, 0.97, 0.985 at 0.41, 0.65, 0.91, 1.2, 1.5 ms per query (2 cores); at 10^5 users
    2n already gives 0.988. Recall falls with the number of users, so 3n keeps ≥ 0.95 at
    10^6 for 1.3 times the cost of 2n. Doubling ``efConstruction`` (160) buys the same
    recall at the same query cost as 3n but doubles the build, hence 80 and 3n.
    """
    return max(3 * n, _HNSW_EF_SEARCH_MIN)


def _xb(index: faiss.Index) -> np.ndarray:
    """The index's stored unit vectors ``[n, d]`` float32, a view (no copy) of its flat
    storage: the index and the ids are the whole serialised state, yet the exact
    similarities of returned pairs can be recomputed from it (see :meth:`UserIndex.query`)."""
    flat = faiss.downcast_index(index.storage) if isinstance(index, faiss.IndexHNSW) else index
    n, d = flat.ntotal, flat.d
    if n == 0 or d == 0:
        return np.zeros((n, d), dtype=np.float32)
    return faiss.rev_swig_ptr(flat.get_xb(), n * d).reshape(n, d)


class UserIndex:
    """Cosine KNN index over all users' embeddings: built once per clustering run, stored as
    one blob (:meth:`to_bytes`), queried per partition (:meth:`query`).

    Why: brute force over all users in one process costs ``U^~1.3`` and needs every user
    in memory at once; an index built once and shipped to the partition workers lets each
    query only its own users against all of them, with the same ``unn`` output as
    :func:`nearest_users`.

    Search is the inner product of L2-normalised float32 vectors (= cosine). Below
    ``exact_below`` eligible (non-zero-norm) users the index is ``faiss.IndexFlatIP``, exact:
    the neighbours are today's brute-force ones. From ``exact_below`` on it is
    ``faiss.IndexHNSWFlat`` (``M`` = 32, ``efConstruction`` = 80, ``efSearch`` =
    ``max(3·(k+1), 64)``, see :func:`_ef_search`), approximate: recall@100 ≈ 0.97 on
    uniformly random ``d`` = 32 embeddings at 10^6 users (real embeddings, which cluster,
    fare better). Why 200,000 by default: measured with k = 100 and d = 32 on 2 cores
    (``bench/knn.py``), the exact search of 10^5 users took 9.6 s and HNSW 30 s (build 5 s,
    queries 25 s); the two cross near 3·10^5 users, and below that the exact search is
    also the one that keeps tests, training and serving on the same neighbours.
    """

    def __init__(self, user_ids: np.ndarray, kept: np.ndarray, index: faiss.Index) -> None:
        """Use :meth:`build` or :meth:`from_bytes`; this only assembles checked parts."""
        self._ids = user_ids
        self._kept = kept
        self._index = index
        self._xb = _xb(index)
        # Eligible position of every user (-1 for zero-norm users), and eligible → user id.
        self._pos = np.where(kept, np.cumsum(kept) - 1, -1).astype(np.int64)
        self._kept_ids = user_ids[kept]
        self._lookup: pd.Index | None = None

    # ------------------------------------------------------------------------ construction

    @classmethod
    def build(
        cls, user_ids: np.ndarray, emb: np.ndarray, *, exact_below: int = 200_000
    ) -> UserIndex:
        """Index ``emb [U, d]`` (one row per id of ``user_ids [U]``); zero-norm rows are kept
        as users (they get empty lists) but not indexed (they are never a neighbour).

        Determinism: faiss 1.15 builds the HNSW graph with its deterministic insertion
        (level buckets in a seeded order, prefix-doubling batches whose links are computed
        against a frozen snapshot and merged in a fixed order), so the graph, and hence
        every answer, is the same whatever the thread count; the build stays parallel. The
        classic parallel insertion would link nodes in thread-timing order. The ids are
        indexed in input order, so the same input gives the same blob (the unit test
        ``..._build_is_deterministic_whatever_the_thread_count`` compares the bytes of a
        1-thread and an all-threads build).
        """
        ids = np.asarray(user_ids)
        x = np.asarray(emb)
        if ids.ndim != 1:
            raise NeighborsError(f"user_ids must be 1-D, got ndim={ids.ndim}")
        if not np.issubdtype(ids.dtype, np.integer) and len(ids):
            raise NeighborsError(f"user_ids must be integers, got dtype {ids.dtype}")
        if x.ndim != 2:
            raise NeighborsError(f"emb must be a 2-D array [U, d], got ndim={x.ndim}")
        if x.shape[0] != len(ids):
            raise NeighborsError(f"emb has {x.shape[0]} rows but user_ids has {len(ids)}")
        if not np.issubdtype(x.dtype, np.floating):
            raise NeighborsError(f"emb must be a floating array, got dtype {x.dtype}")
        finite = np.isfinite(x).all(axis=1)
        if not finite.all():
            row = int(np.argmin(finite))
            raise NeighborsError(
                f"emb contains NaN or ±inf at row {row} (user_id {int(ids[row])}): "
                f"{x[row].tolist()}"
            )
        if isinstance(exact_below, bool) or not isinstance(exact_below, numbers.Integral):
            raise NeighborsError(f"exact_below must be an integer, got {exact_below!r}")
        ids = _check_ids(ids)

        kept, unit = _unit_rows(x)
        d = x.shape[1]
        index: faiss.Index
        if len(unit) < exact_below:
            index = faiss.IndexFlatIP(d)
            index.add(unit)
        else:
            index = faiss.IndexHNSWFlat(d, _HNSW_M, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = _HNSW_EF_CONSTRUCTION
            index.add(unit)
        return cls(ids, kept, index)

    def with_users(self, user_ids: np.ndarray, emb: np.ndarray) -> UserIndex:
        """This index with users ``user_ids [n]`` (none of them indexed yet) added, their
        embeddings ``emb [n, d]``: appended to the faiss index (flat or HNSW), not rebuilt,
        so the users indexed before keep their vectors and neighbours. This object's
        faiss index is extended in place (the blob it came from is not)."""
        ids = _check_ids(np.asarray(user_ids))
        x = np.asarray(emb)
        if x.ndim != 2 or x.shape[0] != len(ids) or (len(ids) and x.shape[1] != self._xb.shape[1]):
            raise NeighborsError(
                f"emb must be [{len(ids)}, {self._xb.shape[1]}], got shape {x.shape}"
            )
        if not np.isfinite(x).all():
            raise NeighborsError("emb contains NaN or ±inf")
        known = np.isin(ids, self._ids)
        if known.any():
            raise NeighborsError(
                f"user_ids has user_id {int(ids[np.argmax(known)])}, which is already indexed"
            )
        if not len(ids):
            return self
        kept, unit = _unit_rows(x)
        if len(unit):
            self._index.add(unit)
        return UserIndex(np.r_[self._ids, ids], np.r_[self._kept, kept], self._index)

    def to_bytes(self) -> bytes:
        """The index as one blob (an uncompressed ``.npz``: ids, kept mask, the faiss
        serialised index), for one object in object storage; :meth:`from_bytes` reads it."""
        buf = io.BytesIO()
        np.savez(
            buf,
            format=np.int64(_BLOB_FORMAT),
            user_ids=self._ids,
            kept=self._kept,
            index=faiss.serialize_index(self._index),
        )
        return buf.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> UserIndex:
        """The index that :meth:`to_bytes` wrote; anything else is a :class:`NeighborsError`."""
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as z:
                fmt = int(z["format"])
                ids = z["user_ids"]
                kept = z["kept"]
                blob = z["index"]
        except (OSError, ValueError, KeyError, zipfile.BadZipFile, TypeError) as exc:
            raise NeighborsError(f"data is not a UserIndex blob: {exc}") from exc
        if fmt != _BLOB_FORMAT:
            raise NeighborsError(f"UserIndex blob has format {fmt}, expected {_BLOB_FORMAT}")
        if ids.dtype != np.int64 or kept.dtype != bool or ids.shape != kept.shape:
            raise NeighborsError("UserIndex blob has malformed user_ids or kept arrays")
        try:
            index = faiss.deserialize_index(blob)
        except RuntimeError as exc:
            raise NeighborsError(f"UserIndex blob holds no readable faiss index: {exc}") from exc
        if index.ntotal != int(kept.sum()):
            raise NeighborsError(
                f"UserIndex blob is inconsistent: {index.ntotal} indexed vectors "
                f"for {int(kept.sum())} kept users"
            )
        return cls(ids, kept, index)

    # ------------------------------------------------------------------------------ access

    @property
    def user_ids(self) -> np.ndarray:
        """All indexed users (zero-norm ones included), in build order."""
        return self._ids

    @property
    def exact(self) -> bool:
        """Whether searches are exact (flat index) rather than HNSW."""
        return not isinstance(self._index, faiss.IndexHNSW)

    def __len__(self) -> int:
        return len(self._ids)

    # ------------------------------------------------------------------------------- query

    def query(self, user_ids: np.ndarray, k: int) -> pd.DataFrame:
        """The ``unn`` rows of ``user_ids`` (any subset of the indexed users): each one's
        top-``k`` other indexed users by cosine similarity.

        Rules (those of :func:`nearest_users`):
            * the user itself is never its own neighbour; ``k`` is capped at the number of
              other eligible users of the index;
            * a user whose embedding has zero norm gets empty lists and is never anyone's
              neighbour;
            * neighbours are sorted by similarity descending, exact ties by ascending user id
              (which of several equally similar users makes the cut at rank ``k`` is faiss's
              choice).

        The index is asked for ``k + 1`` and the user itself dropped; when it is not among
        them (other users with its exact direction), the last one is dropped instead. The
        similarities returned are recomputed from the stored unit vectors (float64 sum of
        float32 products, rounded to float32), so a pair's value does not depend on the
        query batch, faiss's BLAS blocking or the HNSW distance path. An HNSW row that
        comes back short (the graph search found fewer than ``k + 1``) is searched again
        exactly over the index's flat storage.

        Returns one row per queried user, in query order: ``user_id`` int64, ``nbr_ids``
        (1-D int64 array), ``nbr_sims`` (1-D float32 array, ``cos ∈ [−1, 1]``). An id that
        is not in the index, or a repeated one, is a :class:`NeighborsError` naming it.
        """
        k = _check_k(k)
        ids = _check_ids(user_ids)
        if self._lookup is None:
            self._lookup = pd.Index(self._ids)
        at = self._lookup.get_indexer(ids)
        if (at < 0).any():
            row = int(np.argmax(at < 0))
            raise NeighborsError(
                f"user_ids has user_id {int(ids[row])} at row {row}, which is not in the index "
                f"({int((at < 0).sum())} unknown ids in all)"
            )

        n = len(ids)
        nbr_ids = _cells(np.zeros((n, 0), dtype=np.int64))
        nbr_sims = _cells(np.zeros((n, 0), dtype=np.float32))
        pos = self._pos[at]
        rows = np.flatnonzero(pos >= 0)
        k_eff = min(k, self._index.ntotal - 1)
        if k_eff > 0:
            for lo in range(0, len(rows), _QUERY_ROWS):
                part = rows[lo : lo + _QUERY_ROWS]
                nbr, sim = self._search(pos[part], k_eff)
                nbr_ids[part] = nbr
                nbr_sims[part] = sim
        return pd.DataFrame({"user_id": ids, "nbr_ids": nbr_ids, "nbr_sims": nbr_sims})

    def _search(self, pos: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Cells ``(nbr_ids, nbr_sims)`` of the eligible users at positions ``pos``, ``k``
        (already capped) neighbours each."""
        xq = self._xb[pos]
        if self.exact:
            _, lab = self._index.search(xq, k + 1)
        else:
            params = faiss.SearchParametersHNSW(efSearch=_ef_search(k + 1))
            _, lab = self._index.search(xq, k + 1, params=params)
            valid = lab >= 0
            short = np.flatnonzero(valid.sum(axis=1) < k + 1)
            if len(short):
                storage = faiss.downcast_index(self._index.storage)
                _, lab[short] = storage.search(xq[short], k + 1)
        # Drop self; when self is not among the k + 1 (or the row is short), drop the last.
        keep = (lab >= 0) & (lab != pos[:, None])
        keep &= np.cumsum(keep, axis=1) <= k
        safe = np.where(keep, lab, 0)
        sim = np.einsum("qd,qkd->qk", xq, self._xb[safe], dtype=np.float64)
        sim = np.clip(sim, -1.0, 1.0).astype(np.float32)
        nbr = self._kept_ids[safe]
        # Similarity descending, then user id ascending; dropped entries last.
        order = np.lexsort((nbr, np.where(keep, -sim, np.inf)), axis=1)[:, :k]
        nbr = np.take_along_axis(nbr, order, axis=1)
        sim = np.take_along_axis(sim, order, axis=1)
        counts = keep.sum(axis=1)
        if (counts == k).all():
            return _cells(nbr), _cells(sim)
        cut = zip(nbr, sim, counts, strict=True)
        cells = [(i[:c], s[:c]) for i, s, c in cut]
        return (
            np.fromiter((c[0] for c in cells), dtype=object, count=len(cells)),
            np.fromiter((c[1] for c in cells), dtype=object, count=len(cells)),
        )


def nearest_users(user_ids: np.ndarray, emb: np.ndarray, k: int) -> pd.DataFrame:
    """The ``unn`` rows: each user's top-``k`` other users by cosine similarity of ``emb``.

    The convenience for one process holding all users: ``UserIndex.build(user_ids,
    emb).query(user_ids, k)`` (see :class:`UserIndex` for the search and the rules). Below
    200,000 eligible users the search is exact brute force (a flat inner-product index);
    from there on it is HNSW, approximate. The partitioned clustering builds the index once
    and queries each partition's users instead.

    Returns one row per input user, in input order: ``user_id`` int64, ``nbr_ids`` (1-D
    int64 array, ``list<int64>`` in Arrow/Feast), ``nbr_sims`` (1-D float32 array,
    ``cos ∈ [−1, 1]``).
    """
    k = _check_k(k)
    return UserIndex.build(user_ids, emb).query(user_ids, k)


def _explode_neighbors(neighbors: pd.DataFrame, users: np.ndarray) -> pd.DataFrame:
    """Edges ``(user_id, nbr_user, similarity)`` of the users in ``users``; a list naming
    its own user is a :class:`NeighborsError`."""
    if not isinstance(neighbors, pd.DataFrame):
        raise NeighborsError(f"neighbors must be a DataFrame, got {type(neighbors).__name__}")
    missing = [c for c in ("user_id", "nbr_ids", "nbr_sims") if c not in neighbors.columns]
    if missing:
        raise NeighborsError(f"neighbors is missing columns {missing}")
    repeat = _first_repeat(neighbors["user_id"])
    if repeat is not None:
        row, first = repeat
        user = neighbors["user_id"].iat[row]
        raise NeighborsError(
            f"neighbors has several rows for user_id {user}: row {row} repeats row {first}"
        )
    nb = neighbors[neighbors["user_id"].isin(users)]
    ids_col = nb["nbr_ids"].to_list()
    sims_col = nb["nbr_sims"].to_list()
    lens = np.fromiter((len(v) for v in ids_col), dtype=np.int64, count=len(ids_col))
    slens = np.fromiter((len(v) for v in sims_col), dtype=np.int64, count=len(sims_col))
    if not np.array_equal(lens, slens):
        at = int(np.argmax(lens != slens))
        raise NeighborsError(
            f"neighbors.nbr_ids and nbr_sims differ in length for user_id "
            f"{nb['user_id'].iat[at]} ({lens[at]} ids, {slens[at]} similarities)"
        )
    if lens.sum() == 0:
        return pd.DataFrame(
            {
                "user_id": np.zeros(0, np.int64),
                "nbr_user": np.zeros(0, np.int64),
                "similarity": np.zeros(0, np.float32),
            }
        )
    flat_ids = np.concatenate([np.asarray(v, dtype=np.int64) for v in ids_col])
    flat_sims = np.concatenate([np.asarray(v, dtype=np.float32) for v in sims_col])
    nan = np.isnan(flat_sims)
    if nan.any():
        at = int(np.searchsorted(np.cumsum(lens), int(np.argmax(nan)), side="right"))
        raise NeighborsError(f"neighbors.nbr_sims contains NaN for user_id {nb['user_id'].iat[at]}")
    users_of_edges = np.repeat(nb["user_id"].to_numpy(np.int64), lens)
    own = users_of_edges == flat_ids
    if own.any():  # a table that says so is not the one UserIndex.query built
        at = int(np.searchsorted(np.cumsum(lens), int(np.argmax(own)), side="right"))
        user = nb["user_id"].iat[at]
        raise NeighborsError(
            f"neighbors.nbr_ids of user_id {user} names user_id {user} itself: a user is never "
            "its own neighbour"
        )
    return pd.DataFrame({"user_id": users_of_edges, "nbr_user": flat_ids, "similarity": flat_sims})


_EXPANSION_ROWS = 1 << 20  # (code, in-edge) rows expanded, and matches folded, at once


@dataclass(frozen=True)
class _Targets:
    """Target pairs and the edges into their users, keyed for the codes-side join: built
    once, then matched against any number of chunks of codes (a fill folds the window's
    codes shard by shard)."""

    users: np.ndarray  # target users, ascending
    items: np.ndarray  # target items, ascending
    item_table: np.ndarray | None  # item id - item_base + 1 -> its index in items (-1: none)
    item_base: int
    keys: pd.Index  # dense (user, item) key of every target, in the targets' order
    neighbours: pd.Index  # the distinct ``e_v``, ascending
    e_v: np.ndarray  # edges u -> v by ascending v: the neighbour
    e_n: np.ndarray  # ... its position in ``neighbours``
    e_start: np.ndarray  # neighbour ``n``'s edges are ``e_start[n]:e_start[n + 1]``
    e_u: np.ndarray  # ... the target user's dense index
    e_s: np.ndarray  # ... the similarity

    @classmethod
    def of(cls, tg: pd.DataFrame, edges: pd.DataFrame) -> _Targets:
        """``tg``: unique targets sorted by (user_id, item_id); ``edges`` out of their users."""
        tg_u = tg["user_id"].to_numpy(np.int64)
        users = np.unique(tg_u)  # every edge starts at a target user
        items = np.unique(tg["item_id"].to_numpy(np.int64))
        keys = np.searchsorted(users, tg_u) * max(len(items), 1) + np.searchsorted(
            items, tg["item_id"].to_numpy(np.int64)
        )
        if len(edges) >= 1 << 32:  # _order_key keeps an edge's position in 32 bits
            raise NeighborsError(f"{len(edges):,} neighbour edges in one fill: at most 2^32")
        order = np.argsort(edges["nbr_user"].to_numpy(np.int64), kind="stable")
        e_v = edges["nbr_user"].to_numpy(np.int64)[order]
        neighbours = np.unique(e_v)
        e_n = np.searchsorted(neighbours, e_v)
        table, base = _dense_table(items)
        return cls(
            users,
            items,
            table,
            base,
            pd.Index(keys),
            pd.Index(neighbours),
            e_v,
            e_n,
            np.searchsorted(e_n, np.arange(len(neighbours) + 1)),
            np.searchsorted(users, edges["user_id"].to_numpy(np.int64)[order]),
            edges["similarity"].to_numpy(np.float32)[order],
        )

    def _position(self, key: np.ndarray) -> np.ndarray:
        """The target of each dense key (−1: none): a hash lookup."""
        return self.keys.get_indexer(key)

    def position(self, c_u: np.ndarray, c_i: np.ndarray) -> np.ndarray:
        """The target each code ``(c_u, c_i)`` is itself (−1: none): a target's own code."""
        if not len(self.users) or not len(self.items):
            return np.full(len(c_u), -1, np.int64)
        u = np.minimum(np.searchsorted(self.users, c_u), len(self.users) - 1)
        i = np.minimum(np.searchsorted(self.items, c_i), len(self.items) - 1)
        known = (self.users[u] == c_u) & (self.items[i] == c_i)
        return np.where(known, self._position(u * len(self.items) + i), -1)

    def item_keys(self, c_i: np.ndarray) -> np.ndarray:
        """The dense index of each item ``c_i`` among the targets' items (−1: no target has it).

        Called on every code row a fill visits, so a table lookup where the items' ids span
        a small range (a binary search per row costs several times more, and the rows
        visited grow faster than the targets when each user has many codes)."""
        if not len(self.items):
            return np.full(len(c_i), -1, np.int64)
        if self.item_table is not None:
            last = len(self.item_table) - 1  # both ends hold -1: every id outside lands there
            at = np.clip(np.asarray(c_i, np.int64) - (self.item_base - 1), 0, last)
            return self.item_table[at].astype(np.int64)
        at = np.minimum(np.searchsorted(self.items, c_i), len(self.items) - 1)
        return np.where(self.items[at] == c_i, at, -1)

    def matches(
        self, codes: CodeIndex, chosen: np.ndarray | None = None
    ) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Blocks ``(target, edge, row)`` of every target ``(u, i)``, edge ``u -> v`` (its
        position in ``e_v``/``e_s``) and code ``(v, i)`` at row ``row`` of ``codes``;
        ``chosen``: the positions in :attr:`neighbours` of the neighbours whose codes
        ``codes`` can hold (``None``: any).

        The codes are sorted by user, so each neighbour's codes are one range found by a
        binary search: only the chosen neighbours' rows are visited, never the rest of the
        index, and each visited row's item is looked up once however many edges point at
        it. Each block expands at most ``_EXPANSION_ROWS`` (edge, code) rows (at least one
        edge), so memory is a block's."""
        every = len(self.neighbours)
        chosen = np.arange(every) if chosen is None else np.asarray(chosen, np.int64)
        nb = self.neighbours.to_numpy()[chosen]
        lo = np.searchsorted(codes.users, nb, side="left")
        hi = np.searchsorted(codes.users, nb, side="right")
        visited = _ranges(lo, hi)  # the neighbours' rows, neighbour by neighbour
        key = self.item_keys(codes.items[visited])
        useful = key >= 0  # rows of an item some target has
        starts = np.concatenate([[0], np.cumsum(useful)])
        bounds = np.concatenate([[0], np.cumsum(hi - lo)])
        first_of = starts[bounds[:-1]]  # each chosen neighbour's useful rows: [first, first + n)
        n_of = starts[bounds[1:]] - first_of
        rows, key = visited[useful], key[useful]
        # Only the edges into the neighbours with useful rows here are walked: a fill folds
        # every partition's codes in turn, and a walk over all its edges for each would cost
        # partitions x edges.
        has = np.flatnonzero(n_of)
        e_lo, e_hi = self.e_start[chosen[has]], self.e_start[chosen[has] + 1]
        edges = _ranges(e_lo, e_hi)  # ascending where ``chosen`` is
        of_edge = np.repeat(has, e_hi - e_lo)  # each edge's neighbour, among the chosen
        count = n_of[of_edge]  # each edge's codes here (>= 1)
        ends = np.cumsum(count)
        n_items = max(len(self.items), 1)
        first = 0
        while first < len(count):
            base = ends[first - 1] if first else 0
            last = max(int(np.searchsorted(ends, base + _EXPANSION_ROWS, side="right")), first + 1)
            j = np.repeat(np.arange(first, last), count[first:last])  # (E,) in ``edges``
            offset = np.arange(len(j)) - (ends[j] - count[j] - base)  # rank in range
            at = first_of[of_edge[j]] + offset  # (E,) positions in ``rows``
            edge = edges[j]
            target = self._position(self.e_u[edge] * n_items + key[at])
            hit = target >= 0
            yield target[hit], edge[hit], rows[at[hit]]
            first = last


_DENSE_SPAN = 8  # a table of item ids is built while their span is <= 8 x their number


def _dense_table(ids: np.ndarray) -> tuple[np.ndarray | None, int]:
    """``(table, base)`` with ``table[id - base + 1]`` the position of ``id`` in the ascending
    ``ids`` and −1 for any other id in range, one −1 slot at each end for ids outside;
    ``(None, 0)`` when the ids span more than ``_DENSE_SPAN`` × their number (or 2^31)."""
    if not len(ids):
        return None, 0
    base, span = int(ids[0]), int(ids[-1]) - int(ids[0]) + 1
    if span > max(_DENSE_SPAN * len(ids), 1 << 16) or span >= 1 << 31:
        return None, 0
    table = np.full(span + 2, -1, np.int32)
    table[ids - base + 1] = np.arange(len(ids), dtype=np.int32)
    return table, base


def _ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The concatenation of ``arange(lo[k], hi[k])`` over ``k``, without a Python loop."""
    count = hi - lo
    total = int(count.sum())
    if not total:
        return np.zeros(0, np.int64)
    starts = np.repeat(lo - (np.cumsum(count) - count), count)
    return starts + np.arange(total)


@dataclass(frozen=True)
class CodeIndex:
    """Usable pair codes sorted by user, for the neighbour fill's lookups.

    One partition's codes fresh at an interval end (its enrichment aggregates task builds it
    from the codes it reads anyway, :func:`solaris.data.schemas.write_fill_codes` stores it);
    every partition's fill then looks up its users' neighbours' codes in it by binary search
    instead of scanning the window's codes, so a fill's cost follows its own targets and
    their neighbours, not the traffic.

    ``users [n]`` int64 ascending (pairs by ``(user, item)``, each at most once), ``items
    [n]`` int64, ``z16 [n, d]`` float16: the codes as the ``pair`` view serves them. Arrays
    may be memory-mapped: a fill reads only the rows it needs.
    """

    users: np.ndarray
    items: np.ndarray
    z16: np.ndarray

    @classmethod
    def of(cls, pairs: pd.DataFrame, z16: np.ndarray) -> CodeIndex:
        """Sorted from codes ``pairs`` (``user_id``, ``item_id``; each pair once) and their
        float16-rounded ``z16 [len(pairs), d]``."""
        users = pairs["user_id"].to_numpy(np.int64)
        items = pairs["item_id"].to_numpy(np.int64)
        order = np.lexsort((items, users))
        z = np.asarray(z16)
        return cls(users[order], items[order], np.ascontiguousarray(z[order], dtype=np.float16))

    def __len__(self) -> int:
        return len(self.users)


def _order_key(sim: np.ndarray, edge: np.ndarray) -> np.ndarray:
    """An int64 that orders candidates as the fill ranks them: by similarity, then by the
    smaller neighbour id (a smaller edge position: edges are sorted by neighbour, and a
    user's neighbours are distinct)."""
    bits = (np.asarray(sim, dtype=np.float32) + np.float32(0)).view(np.int32)  # -0 is 0
    ordered = np.where(bits >= 0, bits, bits ^ 0x7FFFFFFF).astype(np.int64)  # float order
    return (ordered << 32) | (0xFFFFFFFF - edge.astype(np.int64))


class NeighbourFill:
    """The ``nbr`` rows of a set of targets, folded over codes one index at a time.

    Built once from the targets and their users' neighbours; :meth:`add_index` folds in the
    codes of one :class:`CodeIndex` (fresh, of the fill's FM version, each pair in at most
    one of the indexes folded in), keeping per target only the best neighbour so far and the
    running sums of its mean; :meth:`rows` gives the fill. It visits only the index rows of
    the targets' users and of their neighbours (binary searches in the user-sorted index)
    and reads the codes of the matches only, so a partition's fill over every partition's
    index costs its own targets' work, not the window's size. Memory is the targets' (a
    ``d`` float64 sum and a float16 code each) and one block of matches. The plain mean is
    needed only where every weight is 0, so only the codes of zero-weight matches are kept
    for it (rare: a neighbour at similarity <= 0). Sums of float16 codes in float64 do not
    depend on how the codes are split; the weighted sums can differ in their last float64
    bit, far below the float16 rounding of the mean.
    """

    def __init__(self, targets: pd.DataFrame, neighbors: pd.DataFrame, *, z_dim: int) -> None:
        tg = targets[["user_id", "item_id"]].astype(np.int64).drop_duplicates()
        tg = tg.sort_values(["user_id", "item_id"], ignore_index=True)
        edges = _explode_neighbors(neighbors, tg["user_id"].unique())
        self._t = _Targets.of(tg, edges)
        self._pairs = tg
        n = len(tg)
        self._own = np.zeros(n, dtype=bool)
        self._count = np.zeros(n, np.int64)
        self._wsum = np.zeros(n, np.float64)
        self._wz = np.zeros((n, z_dim), np.float64)
        self._unweighted: list[tuple[np.ndarray, np.ndarray]] = []  # (target, z) at w = 0
        self._best_key = np.full(n, np.iinfo(np.int64).min, np.int64)  # see _order_key
        self._best_sim = np.zeros(n, np.float32)
        self._best_nbr = np.zeros(n, np.int64)
        self._top = np.zeros((n, z_dim), np.float16)

    def __len__(self) -> int:
        return len(self._pairs)

    def add(self, pairs: pd.DataFrame, z16: np.ndarray) -> None:
        """Fold in codes ``pairs`` (``user_id``, ``item_id``) with ``z16 [len(pairs), d]``
        (float16-rounded float32)."""
        self.add_index(CodeIndex.of(pairs, z16))

    @property
    def near_users(self) -> np.ndarray:
        """The users whose codes can matter, ascending: the targets' users (their own codes
        drop a target) and their neighbours."""
        return np.union1d(self._t.users, self._t.neighbours.to_numpy())

    def add_index(self, codes: CodeIndex, among: np.ndarray | None = None) -> int:
        """Fold in the codes of ``codes`` that serve a target; returns how many of its rows
        were visited: those of the targets' users and of their neighbours. ``among``: the
        :attr:`near_users` whose codes ``codes`` can hold, ascending (one partition's, when
        ``codes`` holds one partition's users), so that the others are not searched for."""
        t = self._t
        near = self.near_users if among is None else np.asarray(among, np.int64)
        # The targets' users among ``near``: a search per near user, not a pass over every
        # target user for each index folded in.
        at = np.minimum(np.searchsorted(t.users, near), max(len(t.users) - 1, 0))
        own_users = near[t.users[at] == near] if len(t.users) else near[:0]
        lo = np.searchsorted(codes.users, own_users, side="left")
        hi = np.searchsorted(codes.users, own_users, side="right")
        own_rows = _ranges(lo, hi)
        own = t.position(codes.users[own_rows], codes.items[own_rows])
        self._own[own[own >= 0]] = True
        chosen = t.neighbours.get_indexer(near)
        for target, edge, row in t.matches(codes, chosen[chosen >= 0]):
            if not len(target):
                continue
            rows, code = np.unique(row, return_inverse=True)  # each code gathered once
            z16 = np.asarray(codes.z16[rows], dtype=np.float32)
            self._fold(target, edge, code, z16, z16.astype(np.float64))
        lo = np.searchsorted(codes.users, near, side="left")
        hi = np.searchsorted(codes.users, near, side="right")
        return int((hi - lo).sum())

    def _fold(
        self,
        target: np.ndarray,
        edge: np.ndarray,
        code: np.ndarray,
        z16: np.ndarray,
        z64: np.ndarray,
    ) -> None:
        """Fold one block of matches (target, edge, code row) into the targets' state.

        Only the block's targets are touched: the matches are renumbered over them, the
        weighted sums are a sparse (touched targets × codes) product, and the results are
        added into the touched rows. So a fold costs its matches, whatever the number of
        targets: a fill folds at least once per partition's codes, and a cost over all
        targets per fold would grow with the number of partitions."""
        from scipy.sparse import csr_matrix

        if not len(target):
            return
        touched, local = np.unique(target, return_inverse=True)
        k = len(touched)
        sim = self._t.e_s[edge]
        w = np.maximum(sim.astype(np.float64), 0.0)
        self._wz[touched] += csr_matrix((w, (local, code)), shape=(k, len(z64))) @ z64
        if not w.all():  # kept for the plain mean of targets whose every weight is 0
            zero = w == 0
            self._unweighted.append((target[zero], z16[code[zero]]))
        self._wsum[touched] += np.bincount(local, weights=w, minlength=k)
        self._count[touched] += np.bincount(local, minlength=k)
        # The best candidate: the block's best per target, kept where it beats the best so far.
        key = _order_key(sim, edge)
        block_best = np.full(k, np.iinfo(np.int64).min, np.int64)
        np.maximum.at(block_best, local, key)
        better = block_best > self._best_key[touched]
        self._best_key[touched[better]] = block_best[better]
        won = np.flatnonzero((key == block_best[local]) & better[local])  # one per target
        at = target[won]
        self._best_sim[at] = sim[won]
        self._best_nbr[at] = self._t.e_v[edge[won]]
        self._top[at] = z16[code[won]]

    def rows(self, *, as_of: int, fm_version: str) -> pd.DataFrame:
        """The ``nbr`` rows: one per target with a candidate and no own code, sorted by
        (user_id, item_id); see :func:`neighbour_fill`."""
        keep = np.flatnonzero((self._count > 0) & ~self._own)
        means = self._wz[keep] / np.maximum(self._wsum[keep], np.finfo(np.float64).tiny)[:, None]
        plain = self._wsum[keep] == 0  # every weight 0: the plain mean of the candidates
        if plain.any():
            target = np.concatenate([t for t, _ in self._unweighted])
            z = np.concatenate([z for _, z in self._unweighted])
            held, sums, counts = _group_sums(target, z)
            at = np.searchsorted(held, keep[plain])
            means[plain] = sums[at] / counts[at][:, None]
        g = len(keep)
        return pd.DataFrame(
            {
                USER_ID: self._pairs["user_id"].to_numpy(np.int64)[keep],
                ITEM_ID: self._pairs["item_id"].to_numpy(np.int64)[keep],
                Z_TOP1: vectors(self._top[keep].astype(np.float32)),
                SRC_USER: self._best_nbr[keep],
                SIMILARITY: self._best_sim[keep],
                Z_MEAN: vectors(f16_round(means)),
                N_NBRS: self._count[keep],
                FM_VERSION: np.full(g, fm_version, dtype=object),
                EVENT_TS: _event_ts(as_of, g),
            }
        )


def neighbour_fill(
    targets: pd.DataFrame,
    neighbors: pd.DataFrame,
    pairs: pd.DataFrame,
    z: np.ndarray,
    *,
    as_of: int,
    ttl_seconds: int,
    fm_version: str,
) -> pd.DataFrame:
    """``nbr`` rows for target (user, item) pairs from their neighbours' fresh pair codes.

    A pair code is usable when it is fresh at ``as_of`` (``as_of − ttl < computed_at <= as_of``)
    and has ``fm_version`` (latest code per pair, float16-rounded; see
    :func:`solaris.pipeline.aggregate.select_window`). For a target (u, i) the candidates are
    u's neighbours ``v`` (from ``neighbors``, the :func:`nearest_users` table) with a usable
    ``z[v, i]``:

    * ``z_top1``, ``src_user``, ``similarity``: the code of the most similar such neighbour
      (ties: smaller user id) — the most similar neighbour *that has the item*, not merely the
      most similar neighbour;
    * ``z_mean``: ``Σ w_v z[v,i] / Σ w_v`` with ``w_v = max(sim_v, 0)``; when every weight is 0
      the plain mean of the candidates; ``n_nbrs``: the number of candidates.

    Targets whose user has a usable code of their own for the item (they are served by the
    ``pair`` tier), and targets with no candidate, produce no row. Duplicate targets are
    collapsed. Both codes are float16-rounded (what the view serves).

    Columns: ``user_id``, ``item_id``, ``z_top1`` (float32 ``[d]`` per row), ``src_user``
    int64, ``similarity`` float32, ``z_mean`` (float32 ``[d]``), ``n_nbrs`` int64,
    ``fm_version``, ``event_ts`` (UTC ``as_of``); sorted by (user_id, item_id).
    """
    if not isinstance(targets, pd.DataFrame):
        raise NeighborsError(f"targets must be a DataFrame, got {type(targets).__name__}")
    missing = [c for c in ("user_id", "item_id") if c not in targets.columns]
    if missing:
        raise NeighborsError(f"targets is missing columns {missing}")
    for c in ("user_id", "item_id"):
        if not pd.api.types.is_integer_dtype(targets[c]):
            raise NeighborsError(f"targets.{c} must be an integer column, got {targets[c].dtype}")
    ttl_seconds = _as_int("ttl_seconds", ttl_seconds, positive=True)
    as_of = _as_int("as_of", as_of)
    fm_version = _check_version(fm_version)
    fresh, z16 = select_window(
        pairs, z, as_of=as_of, window_seconds=ttl_seconds, fm_version=fm_version
    )
    fill = NeighbourFill(targets, neighbors, z_dim=z16.shape[1])
    fill.add(fresh, z16)
    return fill.rows(as_of=as_of, fm_version=fm_version)
