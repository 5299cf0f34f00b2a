"""Tiered coverage from real online reads: replay the test period through Feast and Redis.

The in-memory replay decides which pairs are embedded and when they become usable. This
replay writes those embeddings to the feature store at the refresh cadence, rebuilds the
enrichment views every ``enrich_every_s`` (user and item aggregates; neighbour fill for
the candidates of the last TTL that the verifier did not embed; user neighbours once a
day), and serves every test-period request through ``SolarisFeatures.fetch`` at the
request's own time. Coverage per tier is counted over the labelled impressions, from what
the online reads returned.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from solaris.config import SolarisConfig
from solaris.pipeline.enrich import (
    PairHistory,
    item_aggregates,
    neighbour_rows,
    user_aggregates,
    user_neighbours,
)
from solaris.pipeline.materialize import materialize
from solaris.serving.tiers import TIERS

if TYPE_CHECKING:
    from feast import FeatureStore

    from solaris.serving.client import SolarisFeatures
    from solaris.serving.tiers import TierFeatures

DAY = 86_400


@dataclass
class OnlineReplayResult:
    n_requests: int
    n_impressions: int
    main_tier_counts: dict[str, int]  # impressions by the tier that filled the main slot
    tier_present_counts: dict[str, int]  # impressions with each tier present (any order)
    latencies_ms: np.ndarray
    rows_written: dict[str, int] = field(default_factory=dict)
    write_seconds: dict[str, float] = field(default_factory=dict)
    example: dict = field(default_factory=dict)

    def coverage(self, tier: str) -> float:
        return self.tier_present_counts.get(tier, 0) / max(self.n_impressions, 1)

    def count(self, served: TierFeatures, labelled: np.ndarray) -> None:
        """Add one served request: its labelled impressions by tier."""
        self.n_requests += 1
        self.n_impressions += int(labelled.sum())
        for tier, n in pd.Series(served.tier[labelled]).value_counts().items():
            self.main_tier_counts[str(tier)] += int(n)
        for k, tier in enumerate(TIERS):
            self.tier_present_counts[tier] += int(served.mask[labelled, k].sum())

    @classmethod
    def empty(cls) -> OnlineReplayResult:
        return cls(0, 0, dict.fromkeys((*TIERS, "none"), 0), dict.fromkeys(TIERS, 0), np.empty(0))

    @property
    def any_tier_coverage(self) -> float:
        none = self.main_tier_counts.get("none", 0)
        return 1.0 - none / max(self.n_impressions, 1)


def _write(
    store: FeatureStore,
    repo: Path,
    view: str,
    frame: pd.DataFrame,
    batch: str,
    result: OnlineReplayResult,
    chunk_rows: int,
) -> None:
    if len(frame) == 0:
        return
    res = materialize(store, repo, view, frame, batch_id=batch, chunk_rows=chunk_rows)
    result.rows_written[view] = result.rows_written.get(view, 0) + res.rows
    result.write_seconds[view] = result.write_seconds.get(view, 0.0) + res.online_seconds


def online_replay(
    cfg: SolarisConfig,
    store: FeatureStore,
    client: SolarisFeatures,
    *,
    candidates: pd.DataFrame,
    history: PairHistory,
    pair_rows: pd.DataFrame,
    eval_from: int,
    fm_version: str,
    enrich_every_s: int = 3600,
    progress: bool = True,
) -> OnlineReplayResult:
    """Serve every request at ``ts >= eval_from`` through the online store.

    ``history`` holds every pair code with its ``computed_at`` (when it became usable);
    ``pair_rows`` are the same codes as ``pair`` view rows (``materialize.pair_frame``).
    """
    repo = Path(cfg.store.repo_path)
    chunk = cfg.store.write_chunk_rows
    cadence = int(cfg.selection.cadence_minutes * 60)
    ttl = int(cfg.selection.ttl_hours * 3600)
    lookback = max(ttl, int(cfg.store.uagg_window_hours * 3600), enrich_every_s)
    result = OnlineReplayResult.empty()

    all_ts = candidates["ts"].to_numpy()  # sorted by ts (the candidates contract)
    test = candidates[all_ts >= eval_from]
    pair_rows = pair_rows.sort_values("computed_at", kind="stable")
    pair_ready = pair_rows["computed_at"].to_numpy()
    pair_done = int(np.searchsorted(pair_ready, eval_from - lookback))
    requests = test.groupby("request_id", sort=False)
    order = test.drop_duplicates("request_id")[["request_id", "user_id", "ts"]]
    latencies = []
    current_round = current_day = None
    neighbours = pd.DataFrame(columns=["user_id", "nbr_ids", "nbr_sims"])
    bar = tqdm(
        order.itertuples(index=False),
        total=len(order),
        desc="online replay",
        unit="request",
        disable=not progress,
        leave=False,
    )
    for request_id, user_id, ts in bar:
        interval_start = (ts // cadence) * cadence
        # Pair codes usable by now: computed at the end of an earlier interval.
        stop = int(np.searchsorted(pair_ready, interval_start, "right"))
        if stop > pair_done:
            _write(
                store,
                repo,
                "pair",
                pair_rows.iloc[pair_done:stop],
                f"replay-{interval_start}",
                result,
                chunk,
            )
            pair_done = stop
        round_start = (ts // enrich_every_s) * enrich_every_s
        if round_start != current_round:
            current_round = round_start
            past = history.until(round_start)
            day = (round_start // DAY) * DAY
            if day != current_day:
                current_day = day
                neighbours = user_neighbours(past, day, cfg, fm_version)
                _write(store, repo, "unn", neighbours, f"replay-{day}", result, chunk)
            _write(
                store,
                repo,
                "uagg",
                user_aggregates(past, round_start, cfg, fm_version),
                f"replay-{round_start}",
                result,
                chunk,
            )
            _write(
                store,
                repo,
                "iagg",
                item_aggregates(past, round_start, cfg, fm_version),
                f"replay-{round_start}",
                result,
                chunk,
            )
            # Candidates recur within a user's session for hours: fill the last TTL's worth.
            lo, hi = np.searchsorted(all_ts, [round_start - ttl, round_start], side="left")
            recent = candidates.iloc[lo:hi]
            if len(recent) and len(neighbours):
                fill = neighbour_rows(
                    recent[["user_id", "item_id"]], neighbours, past, round_start, cfg, fm_version
                )
                _write(store, repo, "nbr", fill, f"replay-{round_start}", result, chunk)

        rows = requests.get_group(request_id)
        start = time.perf_counter()
        served = client.fetch(int(user_id), rows["item_id"].to_numpy(), now=int(ts))
        latencies.append((time.perf_counter() - start) * 1000)
        labelled = rows["label"].notna().to_numpy()
        result.count(served, labelled)
        if not result.example and served.mask.any(axis=0).sum() >= 3:
            result.example = {
                "user_id": int(user_id),
                "ts": int(ts),
                "n_items": len(rows),
                "tiers": served.counts(),
                "latency_ms": latencies[-1],
            }
    result.latencies_ms = np.asarray(latencies)
    return result
