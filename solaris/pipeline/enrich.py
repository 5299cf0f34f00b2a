"""Enrichment views from the pair-embedding history: uagg, iagg and unn rows, and each
partition's codes for the neighbour fill (nbr rows:
:class:`solaris.pipeline.neighbors.NeighbourFill`, over every partition's codes).

Each function is one enrichment step (one task body in the enrichment and clustering DAGs):
a pure function of the pair history as of ``as_of``, returning rows ready for
``materialize`` (join keys, features and ``event_ts`` = ``as_of``; the views' ``computed_at``
is that time).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from solaris.config import SolarisConfig
from solaris.data.schemas import pair_codes
from solaris.pipeline.aggregate import (
    ItemPartials,
    item_aggregate,
    item_partial_sums,
    select_window,
    user_aggregate,
)
from solaris.pipeline.neighbors import CodeIndex, nearest_users, user_embeddings

__all__ = [
    "PairHistory",
    "fill_codes",
    "item_aggregates",
    "item_partials",
    "user_aggregates",
    "user_embedding_table",
    "user_neighbours",
]


@dataclass(frozen=True)
class PairHistory:
    """Pair codes computed so far: ``pairs`` (user_id, item_id, computed_at epoch s,
    fm_version) and the aligned ``z`` ``[N, d]``."""

    pairs: pd.DataFrame
    z: np.ndarray

    @classmethod
    def from_table(cls, table: pa.Table) -> PairHistory:
        """From a (validated) pair-embeddings table."""
        z, computed_at = pair_codes(table)
        pairs = pd.DataFrame(
            {
                "user_id": table["user_id"].to_numpy(),
                "item_id": table["item_id"].to_numpy(),
                "computed_at": computed_at,
                "fm_version": table["fm_version"].to_pandas(),
            }
        )
        return cls(pairs, z)

    def until(self, as_of: int) -> PairHistory:
        """Only the codes computed at or before ``as_of`` (what existed then)."""
        keep = self.pairs["computed_at"].to_numpy() <= as_of
        return PairHistory(self.pairs[keep].reset_index(drop=True), self.z[keep])


def _aggregate(
    aggregate, history: PairHistory, as_of: int, cfg: SolarisConfig, fm_version: str
) -> pd.DataFrame:
    window = cfg.store.uagg_window_seconds
    return aggregate(
        history.pairs, history.z, as_of=as_of, window_seconds=window, fm_version=fm_version
    )


def user_aggregates(
    history: PairHistory, as_of: int, cfg: SolarisConfig, fm_version: str
) -> pd.DataFrame:
    """``uagg`` rows: the 24 h sum and count of each user's codes."""
    return _aggregate(user_aggregate, history, as_of, cfg, fm_version)


def item_aggregates(
    history: PairHistory, as_of: int, cfg: SolarisConfig, fm_version: str
) -> pd.DataFrame:
    """``iagg`` rows: each item's mean code over users in the 24 h window."""
    return _aggregate(item_aggregate, history, as_of, cfg, fm_version)


def item_partials(
    history: PairHistory, as_of: int, cfg: SolarisConfig, fm_version: str
) -> ItemPartials:
    """One partition's share of ``iagg``: per item, the sum and count of its users' codes in
    the 24 h window (:func:`~solaris.pipeline.aggregate.reduce_item_partials` adds them up)."""
    window = cfg.store.uagg_window_seconds
    return item_partial_sums(
        history.pairs, history.z, as_of=as_of, window_seconds=window, fm_version=fm_version
    )


def fill_codes(history: PairHistory, as_of: int, ttl_seconds: int, fm_version: str) -> CodeIndex:
    """The codes the neighbour fill may use at ``as_of``: fresh within the TTL, of
    ``fm_version``, the latest per pair (:func:`~solaris.pipeline.aggregate.select_window`),
    sorted by user for the fill's lookups."""
    rows, z16 = select_window(
        history.pairs, history.z, as_of=as_of, window_seconds=ttl_seconds, fm_version=fm_version
    )
    return CodeIndex.of(rows, z16)


def user_embedding_table(
    history: PairHistory, as_of: int, cfg: SolarisConfig, fm_version: str
) -> pa.Table:
    """The users' embeddings over the neighbour window (what :func:`user_neighbours`
    indexes) as a table: ``user_id`` int64 ascending, ``emb`` fixed-size list of float32."""
    window = cfg.store.unn_ttl_seconds
    users, emb = user_embeddings(
        history.pairs, history.z, as_of=as_of, window_seconds=window, fm_version=fm_version
    )
    flat = pa.array(np.ascontiguousarray(emb, dtype=np.float32).reshape(-1))
    return pa.table(
        {
            "user_id": pa.array(users, pa.int64()),
            "emb": pa.FixedSizeListArray.from_arrays(flat, int(cfg.model.z_dim)),
        }
    )


def user_neighbours(
    history: PairHistory, as_of: int, cfg: SolarisConfig, fm_version: str
) -> pd.DataFrame:
    """``unn`` rows: cosine KNN over user embeddings (the clustering step)."""
    window = cfg.store.unn_ttl_seconds
    users, emb = user_embeddings(
        history.pairs, history.z, as_of=as_of, window_seconds=window, fm_version=fm_version
    )
    if len(users) < 2:
        return pd.DataFrame(columns=["user_id", "nbr_ids", "nbr_sims", "event_ts"])
    rows = nearest_users(users, emb, cfg.store.n_neighbors)
    return rows.assign(event_ts=pd.Timestamp(int(as_of), unit="s", tz="UTC"))
