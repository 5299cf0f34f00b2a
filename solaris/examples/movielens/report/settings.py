"""What the report sweeps (defaults sized for ~20 minutes on 2 CPU cores)."""

from __future__ import annotations

from pydantic import BaseModel, Field

__all__ = ["ReportSettings"]


class ReportSettings(BaseModel):
    """Grids and seeds of ``solaris report``; recorded in the report."""

    model_config = {"frozen": True}

    seeds: tuple[int, ...] = (0, 1, 2)
    # Distillation weights λ; on the VM's own task λ = inf (soft labels alone) is added.
    kd_grid: tuple[float, ...] = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0, 1000.0)
    coverages: tuple[float, ...] = (0.2, 0.4, 0.6, 0.8, 1.0)
    shares: tuple[float, ...] = (0.05, 0.1, 0.2, 0.3, 0.5)
    ttls_hours: tuple[float, ...] = (1.0, 3.0, 6.0, 12.0, 24.0, 48.0)
    cadences_minutes: tuple[float, ...] = (5.0, 15.0, 60.0, 360.0, 1440.0)
    activity_powers: tuple[float, ...] = (0.5, 1.0)
    base_share: float = 0.2
    base_ttl_hours: float = 6.0
    base_cadence_minutes: float = 15.0
    curve_task: str = "like"
    n_boot: int = Field(1000, gt=0)
