"""User clustering and the neighbour tier: user embeddings → cosine KNN → ``nbr`` rows.

Two steps of the enrichment pipeline (DESIGN §1, §4):

* the daily clustering job builds one embedding per user (:func:`user_embeddings`) and the
  user's top-k most similar users by cosine similarity (:func:`nearest_users`, the ``unn``
  view);
* the enrichment job fills the ``nbr`` view for (user, item) candidates the verifier did not
  select (:func:`neighbour_fill`): the code of the most similar neighbour that has a fresh code
  for that item, and the similarity-weighted mean over all neighbours that have one. The Redis
  store cannot follow neighbour ids at read time, hence the precomputation.

Like :mod:`solaris.pipeline.aggregate`, every code is used float16-rounded (the values the
``pair`` view serves), and everything is vectorised: merges, sorts and segment reductions.
Bad input raises :class:`NeighborsError` naming the argument and the first bad id or row; the
checks are vectorised too, and the row is looked up only once a check has failed.
"""

from __future__ import annotations

import numbers

import numpy as np
import pandas as pd
from sklearn.neighbors import NearestNeighbors

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

__all__ = ["NeighborsError", "nearest_users", "neighbour_fill", "user_embeddings"]


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


def nearest_users(user_ids: np.ndarray, emb: np.ndarray, k: int) -> pd.DataFrame:
    """The ``unn`` rows: each user's top-``k`` other users by cosine similarity of ``emb``.

    Search: ``sklearn.neighbors.NearestNeighbors(metric="cosine", algorithm="brute")``. Brute
    force is exact (training, serving and tests see the same neighbours, no recall knob to
    tune), the tree indexes do not support the cosine metric, and at our scale (users in the
    tens of thousands, ``d`` of a few dozen) it is a chunked matrix product, bounded in memory
    by sklearn's ``working_memory``. An approximate index (faiss) is the step for millions of
    users (DESIGN §7); the output contract would not change.

    Rules:
        * the user itself is never its own neighbour; ``k`` is capped at the number of other
          eligible users;
        * a user whose embedding has zero norm has no direction: it gets empty lists and is
          never anyone's neighbour;
        * neighbours are sorted by similarity descending, exact ties by ascending user id
          (which of several equally similar users makes the cut at rank ``k`` is sklearn's
          choice).

    Returns one row per input user, in input order: ``user_id`` int64, ``nbr_ids`` (1-D
    int64 array, ``list<int64>`` in Arrow/Feast), ``nbr_sims`` (1-D float32 array,
    ``cos ∈ [−1, 1]``).
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
            f"emb contains NaN or ±inf at row {row} (user_id {int(ids[row])}): {x[row].tolist()}"
        )
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k <= 0:
        raise NeighborsError(f"k must be a positive integer, got {k!r}")
    ids = ids.astype(np.int64)
    repeat = _first_repeat(ids)
    if repeat is not None:
        row, first = repeat
        raise NeighborsError(
            f"user_ids contains duplicates: {int(ids[row])} at row {row} repeats row {first}"
        )

    n = len(ids)
    nbr_ids = _cells(np.zeros((n, 0), dtype=np.int64))
    nbr_sims = _cells(np.zeros((n, 0), dtype=np.float32))

    x64 = x.astype(np.float64)
    ok = np.flatnonzero(np.linalg.norm(x64, axis=1) > 0)
    m = len(ok)
    k_eff = min(int(k), m - 1)
    if k_eff > 0:
        nn = NearestNeighbors(n_neighbors=k_eff + 1, metric="cosine", algorithm="brute")
        nn.fit(x64[ok])
        dist, idx = nn.kneighbors(x64[ok], return_distance=True)
        # Drop self. With duplicate directions self may tie at distance 0 and be left out of
        # the k+1 returned; then drop the farthest instead, so every row keeps exactly k_eff.
        is_self = idx == np.arange(m)[:, None]
        no_self = ~is_self.any(axis=1)
        is_self[no_self, -1] = True
        idx = idx[~is_self].reshape(m, k_eff)
        sim = np.clip(1.0 - dist[~is_self].reshape(m, k_eff), -1.0, 1.0)
        nbr = ids[ok][idx]
        # Deterministic order: similarity descending, then user id ascending.
        order = np.lexsort((nbr, -sim), axis=1)
        nbr = np.take_along_axis(nbr, order, axis=1)
        sim = np.take_along_axis(sim, order, axis=1).astype(np.float32)
        nbr_ids[ok] = _cells(nbr)
        nbr_sims[ok] = _cells(sim)
    return pd.DataFrame({"user_id": ids, "nbr_ids": nbr_ids, "nbr_sims": nbr_sims})


def _explode_neighbors(neighbors: pd.DataFrame, users: np.ndarray) -> pd.DataFrame:
    """Edges ``(user_id, nbr_user, similarity)`` of the users in ``users``, self-edges removed."""
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
    edges = pd.DataFrame(
        {
            "user_id": np.repeat(nb["user_id"].to_numpy(np.int64), lens),
            "nbr_user": flat_ids,
            "similarity": flat_sims,
        }
    )
    return edges[edges["user_id"] != edges["nbr_user"]]


_EXPANSION_ROWS = 1 << 22  # (code, in-edge) rows expanded at once by _candidates


def _candidates(tg: pd.DataFrame, edges: pd.DataFrame, usable: pd.DataFrame) -> pd.DataFrame:
    """Rows ``(user_id, item_id, nbr_user, similarity, _row)``: target ``(u, i)``, an edge
    ``u -> v`` and the usable code ``(v, i)`` at row ``_row``, for every such triple.

    Joined from the codes' side: each usable code ``(v, i)`` is expanded over the edges that
    point at ``v`` and the resulting ``(u, i)`` kept when it is a target. Expanding the
    targets over their ``k`` neighbours instead materialises targets × k rows (about 7·10^7
    rows and 6.5 GB for 10^6 candidates, about 80 times the matches); there are fewer codes
    than targets, and the expansion runs in blocks of ``_EXPANSION_ROWS`` rows, so memory
    stays bounded whatever the traffic. Pairs are keyed by dense user and item indices (ids
    may use all 63 bits), and membership is a hash lookup of those keys.
    """
    tg_u = tg["user_id"].to_numpy(np.int64)
    users = np.unique(tg_u)  # every edge starts at a target user
    items = np.unique(tg["item_id"].to_numpy(np.int64))  # every usable code's item is one
    n_items = max(len(items), 1)
    targets = pd.Index(
        np.searchsorted(users, tg_u) * n_items
        + np.searchsorted(items, tg["item_id"].to_numpy(np.int64))
    )

    order = np.argsort(edges["nbr_user"].to_numpy(np.int64), kind="stable")
    e_v = edges["nbr_user"].to_numpy(np.int64)[order]
    e_u = np.searchsorted(users, edges["user_id"].to_numpy(np.int64)[order])  # dense index
    e_s = edges["similarity"].to_numpy(np.float32)[order]
    c_v = usable["user_id"].to_numpy(np.int64)
    c_i = usable["item_id"].to_numpy(np.int64)
    c_key = np.searchsorted(items, c_i)
    c_row = usable["_row"].to_numpy(np.int64)
    lo = np.searchsorted(e_v, c_v, side="left")  # the edges pointing at each code's user
    count = np.searchsorted(e_v, c_v, side="right") - lo
    ends = np.cumsum(count)

    parts: list[tuple[np.ndarray, ...]] = []
    first = 0
    while first < len(c_v):
        base = ends[first - 1] if first else 0
        # The codes whose expansion fits the block (at least one code per block).
        last = max(int(np.searchsorted(ends, base + _EXPANSION_ROWS, side="right")), first + 1)
        code = np.repeat(np.arange(first, last), count[first:last])  # (E,)
        offset = np.arange(len(code)) - (ends[code] - count[code] - base)  # rank in its edges
        edge = lo[code] + offset  # (E,)
        hit = targets.get_indexer(e_u[edge] * n_items + c_key[code]) >= 0
        code, edge = code[hit], edge[hit]
        parts.append((users[e_u[edge]], c_i[code], e_v[edge], e_s[edge], c_row[code]))
        first = last
    columns = ("user_id", "item_id", "nbr_user", "similarity", "_row")
    if not parts:
        dtypes = (np.int64, np.int64, np.int64, np.float32, np.int64)
        return pd.DataFrame({c: np.zeros(0, t) for c, t in zip(columns, dtypes, strict=True)})
    return pd.DataFrame({c: np.concatenate([p[k] for p in parts]) for k, c in enumerate(columns)})


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
    fresh = fresh[["user_id", "item_id"]].assign(_row=np.arange(len(fresh)))

    tg = targets[["user_id", "item_id"]].astype(np.int64).drop_duplicates()
    # Targets already served by their own fresh pair code get no neighbour row.
    own = tg.merge(fresh, on=["user_id", "item_id"], how="left")["_row"].notna().to_numpy()
    tg = tg[~own]

    edges = _explode_neighbors(neighbors, tg["user_id"].unique())
    # Only codes of target items can match; dropping the rest first keeps the join small.
    usable = fresh[fresh["item_id"].isin(tg["item_id"].unique())]
    cand = _candidates(tg, edges, usable)
    cand = cand.sort_values(
        ["user_id", "item_id", "similarity", "nbr_user"],
        ascending=[True, True, False, True],
        kind="stable",
    ).reset_index(drop=True)

    n = len(cand)
    zc = z16[cand["_row"].to_numpy(np.int64)] if n else np.zeros((0, z16.shape[1]), np.float32)
    key_u = cand["user_id"].to_numpy(np.int64)
    key_i = cand["item_id"].to_numpy(np.int64)
    new_group = np.r_[True, (key_u[1:] != key_u[:-1]) | (key_i[1:] != key_i[:-1])] if n else []
    starts = np.flatnonzero(new_group)
    g = len(starts)
    sizes = np.diff(np.r_[starts, n]).astype(np.int64)

    if g:
        sim = cand["similarity"].to_numpy(np.float64)
        w = np.maximum(sim, 0.0)
        wsum = np.add.reduceat(w, starts)
        wz = np.add.reduceat(w[:, None] * zc.astype(np.float64), starts, axis=0)
        plain = np.add.reduceat(zc.astype(np.float64), starts, axis=0) / sizes[:, None]
        use_w = wsum > 0
        z_mean = np.where(use_w[:, None], wz / np.where(use_w, wsum, 1.0)[:, None], plain)
        top = cand.iloc[starts]
        z_top1, z_mean16 = zc[starts], f16_round(z_mean)
    else:
        top = cand.iloc[:0]
        z_top1 = z_mean16 = np.zeros((0, z16.shape[1]), np.float32)

    return pd.DataFrame(
        {
            USER_ID: top["user_id"].to_numpy(np.int64),
            ITEM_ID: top["item_id"].to_numpy(np.int64),
            Z_TOP1: vectors(z_top1),
            SRC_USER: top["nbr_user"].to_numpy(np.int64),
            SIMILARITY: top["similarity"].to_numpy(np.float32),
            Z_MEAN: vectors(z_mean16),
            N_NBRS: sizes,
            FM_VERSION: np.full(g, fm_version, dtype=object),
            EVENT_TS: _event_ts(as_of, g),
        }
    )
