"""Tiered coverage from real online reads: what the VM received, counted per tier.

The candidates DAG serves each request of its interval through ``SolarisFeatures.fetch`` at
the request's own time and adds it here; coverage is counted over labelled impressions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from solaris.serving.tiers import TIERS

if TYPE_CHECKING:
    from solaris.serving.tiers import TierFeatures

__all__ = ["ServedCoverage"]


@dataclass
class ServedCoverage:
    """Labelled impressions of served requests, by tier."""

    n_requests: int = 0
    n_impressions: int = 0
    # impressions by the tier that filled the main slot ("none" when no tier did)
    main_tier_counts: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys((*TIERS, "none"), 0)
    )
    # impressions with each tier present, whichever filled the main slot
    tier_present_counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TIERS, 0))

    def count(self, served: TierFeatures, labelled: np.ndarray) -> None:
        """Add one served request: ``served`` rows, ``labelled`` marks its impressions."""
        self.n_requests += 1
        self.n_impressions += int(labelled.sum())
        for tier, n in pd.Series(served.tier[labelled]).value_counts().items():
            self.main_tier_counts[str(tier)] += int(n)
        for k, tier in enumerate(TIERS):
            self.tier_present_counts[tier] += int(served.mask[labelled, k].sum())

    def coverage(self, tier: str) -> float | None:
        """Share of the labelled impressions with ``tier`` present; ``None`` without one (a
        share of nothing is not 0% nor 100%)."""
        if not self.n_impressions:
            return None
        return self.tier_present_counts.get(tier, 0) / self.n_impressions

    @property
    def any_tier_coverage(self) -> float | None:
        """Share of the labelled impressions some tier filled; ``None`` without one."""
        if not self.n_impressions:
            return None
        return 1.0 - self.main_tier_counts.get("none", 0) / self.n_impressions
