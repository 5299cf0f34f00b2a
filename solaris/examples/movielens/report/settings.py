"""What the report sweeps (defaults sized for under 30 minutes on 2 CPU cores)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from solaris.examples.movielens.requests import HOUR

__all__ = ["ReportSettings"]


class ReportSettings(BaseModel):
    """Grids and seeds of ``solaris report``; recorded in the report."""

    model_config = {"frozen": True}

    # Every seed runs in each of ``windows`` rolling-origin windows: consecutive test periods
    # of ``test_share`` of the impressions, the last ending with the log, each with its own
    # validation period before it and its own models (a run = one seed in one window).
    seeds: tuple[int, ...] = (0, 1)
    windows: int = Field(default=3, ge=1)
    test_share: float = Field(default=0.1, gt=0, lt=0.5)
    # Runs go in this many processes at once (1: in this process).
    processes: int = Field(default=2, ge=1)
    # The report's VM knows the user: their causal rating statistics and a learned mean of
    # the embeddings of their last ``vm_history`` items. Chosen before any figure was seen.
    vm_history: int = Field(default=20, gt=0)
    # The VM's tasks: one the FM trained on, and two it never saw (the second one is not
    # monotone in liking).
    own_task: str = "like"
    unseen_tasks: tuple[str, ...] = ("dislike", "neutral")
    # Every VM figure is the mean of n_inits initialisations. Distillation weights λ (0 = the
    # plain VM): the weight with the lowest mean validation log-loss wins.
    kd_grid: tuple[float, ...] = (0.0, 10.0, 100.0, 1000.0, 3000.0)
    n_inits: int = Field(default=3, ge=1)
    # Random-masking coverages; 0.2 → 0.5 and 0.6 → 1.0 are the paper's Table 2 steps.
    coverages: tuple[float, ...] = (0.2, 0.5, 0.6, 0.8, 1.0)
    shares: tuple[float, ...] = (0.05, 0.2, 0.5)
    # Shares whose real misses are also fitted by a VM (Table 2); the others are replays only.
    curve_shares: tuple[float, ...] = (0.05, 0.2)
    ttls_hours: tuple[float, ...] = (1.0, 3.0, 6.0, 12.0, 24.0, 48.0)
    cadences_minutes: tuple[float, ...] = (5.0, 15.0, 60.0, 360.0, 1440.0)
    # The near-line path beside the cadences: codes usable this long after the request (the
    # bound bench.nearline checks; it measures about 0.3 s p95), in the cadence table and as
    # Table 2's near-line rows at the base share.
    nearline_seconds: int = Field(default=30, gt=0)
    # Refresh on activity on the near-line path: Table 2's near-line rows again, with a code
    # stale after this many of the user's requests (nearline.refresh_after_requests) and each
    # request refreshing its best stale codes up to each share (nearline.refresh_share).
    refresh_after_requests: int = Field(default=1, ge=1)
    refresh_shares: tuple[float, ...] = (0.02, 0.05)
    activity_powers: tuple[float, ...] = (0.5, 1.0)
    # The TTL, cadence, activity-aware TTL and near-line sweeps, and Table 2's near-line
    # rows, run in the latest ``sweep_windows`` windows only: they describe the replay's
    # cost curves, which the windows barely move, and cost a quarter of a run.
    sweep_windows: int = Field(default=1, ge=1)
    # Aggregate snapshot cadences shown beside the cycle's own (coverage only).
    snapshot_minutes: tuple[float, ...] = (60.0,)
    base_share: float = 0.2
    base_ttl_hours: float = 6.0
    base_cadence_minutes: float = 15.0
    curve_task: str = "like"
    n_boot: int = Field(default=1000, gt=0)

    @property
    def base_ttl_seconds(self) -> int:
        return int(self.base_ttl_hours * HOUR)

    @property
    def base_cadence_seconds(self) -> int:
        return int(self.base_cadence_minutes * 60)
