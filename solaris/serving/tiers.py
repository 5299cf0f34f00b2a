"""Tier assembly: the one function that turns feature-store rows into the VM's SOLARIS inputs.

Serving (:class:`solaris.serving.client.SolarisFeatures`, rows from ``get_online_features``)
and training (:func:`solaris.serving.training_set.build_training_set`, rows from the
point-in-time ``get_historical_features``) both call :func:`assemble_tiers` on the same
columns, so a (user, item, time) gets the same features in both.

Input ``columns`` maps *full* feature names (``<view>__<feature>``) to equal-length sequences
(lists, numpy arrays or pandas Series); a missing value may be ``None``, ``NaN`` or ``pd.NA``.
The columns read are :func:`required_columns`:

========  ==============================================================================
pair      ``pair__z`` (float16 bytes, ``d`` values), ``pair__fm_version``,
          ``pair__computed_at``
nbr       ``nbr__z_top1`` (``nbr_strategy="top1"``) or ``nbr__z_mean`` (``"weighted"``),
          float16 bytes; ``nbr__fm_version``, ``nbr__computed_at``
uagg      ``uagg__z_sum`` (float32 bytes), ``uagg__count``, ``uagg__window_start``,
          ``uagg__fm_version``, ``uagg__computed_at``
iagg      ``iagg__z_mean`` (float32 bytes), ``iagg__count``, ``iagg__fm_version``,
          ``iagg__computed_at``
========  ==============================================================================

Rules, per row ``n`` and tier (all vectorised; decoding goes through the byte codecs of
:mod:`solaris.pipeline.aggregate`):

* **present** only if every column above is non-null, the vector has exactly the expected
  byte length, ``fm_version`` equals the version the VM expects, and the row is **fresh**:
  ``now − ttl <= computed_at <= now`` (both ends inclusive, as Feast's point-in-time join
  applies ``FeatureView.ttl``; a row computed after ``now`` is never used). Freshness is read
  from the ``computed_at`` *feature* (epoch seconds, written equal to the event timestamp),
  because it is the one value both the online and the offline read return.
* **uagg** is the user's mean code *without the current item* (:func:`mean_excluding`):
  ``(z_sum − z[u,i]) / (count − 1)`` when the current pair's code was counted in the sum,
  i.e. the pair value decodes, has the expected version and
  ``window_start < pair.computed_at <= uagg.computed_at``; else ``z_sum / count``. The pair
  value does **not** have to be fresh under the pair TTL for this: a pair older than its
  serving TTL but inside the 24 h window is still in the sum and must still be removed.
  The tier is present only if the effective count is > 0.
* **iagg** additionally needs ``count > 0``.
* ``tier[n]`` is the first present tier in :data:`TIERS` order, else ``"none"``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np
import pandas as pd

from solaris.pipeline.aggregate import mean_excluding, unpack_f16, unpack_f32

if TYPE_CHECKING:
    from solaris.config import SolarisConfig

__all__ = [
    "NONE",
    "TIERS",
    "TierFeatures",
    "assemble_tiers",
    "empty_tiers",
    "required_columns",
    "tier_settings",
]

TIERS: tuple[str, ...] = ("pair", "nbr", "uagg", "iagg")
NONE = "none"
_TIER_LABELS = np.array([*TIERS, NONE], dtype=object)

NbrStrategy = Literal["top1", "weighted"]
_NBR_COLUMN = {"top1": "nbr__z_top1", "weighted": "nbr__z_mean"}


@dataclass
class TierFeatures:
    """SOLARIS inputs for ``N`` (user, item) rows.

    Attributes:
        features: ``[N, 4·d]`` float32, one block of ``d`` per tier in :data:`TIERS` order;
            a block is zeros where that tier is missing.
        mask: ``[N, 4]`` bool, presence of each tier (same order).
        tier: ``[N]`` object array of str, the first present tier, else ``"none"``.
    """

    features: np.ndarray
    mask: np.ndarray
    tier: np.ndarray

    def __len__(self) -> int:
        return int(self.features.shape[0])

    @property
    def z_dim(self) -> int:
        """``d``, the size of one tier block."""
        return int(self.features.shape[1]) // len(TIERS)

    @property
    def tier_z(self) -> np.ndarray:
        """``features`` as a ``[N, 4, d]`` view (no copy): ``tier_z[:, k]`` is tier ``k``."""
        return self.features.reshape(len(self), len(TIERS), self.z_dim)

    def counts(self) -> dict[str, int]:
        """Rows per main tier, every tier and ``"none"`` listed (zeros included)."""
        return {name: int(np.count_nonzero(self.tier == name)) for name in _TIER_LABELS}


def empty_tiers(n: int, z_dim: int) -> TierFeatures:
    """``n`` rows with every tier missing: zero features, empty masks, tier ``"none"``."""
    if n < 0 or z_dim <= 0:
        raise ValueError(f"need n >= 0 and z_dim > 0, got n={n}, z_dim={z_dim}")
    return TierFeatures(
        features=np.zeros((n, len(TIERS) * z_dim), dtype=np.float32),
        mask=np.zeros((n, len(TIERS)), dtype=bool),
        tier=np.full(n, NONE, dtype=object),
    )


def required_columns(nbr_strategy: NbrStrategy = "top1") -> tuple[str, ...]:
    """The full feature names :func:`assemble_tiers` reads."""
    if nbr_strategy not in _NBR_COLUMN:
        raise ValueError(f"nbr_strategy must be 'top1' or 'weighted', got {nbr_strategy!r}")
    return (
        "pair__z",
        "pair__fm_version",
        "pair__computed_at",
        _NBR_COLUMN[nbr_strategy],
        "nbr__fm_version",
        "nbr__computed_at",
        "uagg__z_sum",
        "uagg__count",
        "uagg__window_start",
        "uagg__fm_version",
        "uagg__computed_at",
        "iagg__z_mean",
        "iagg__count",
        "iagg__fm_version",
        "iagg__computed_at",
    )


def tier_settings(cfg: SolarisConfig) -> dict:
    """The keyword arguments of :func:`assemble_tiers` that come from configuration.

    Serving and training both take them from here, so they cannot drift apart: ``z_dim``
    (``model.z_dim``), the read TTLs in seconds (``selection.ttl_hours`` for pair and nbr,
    ``store.uagg_ttl_hours``, ``store.iagg_ttl_hours``) and ``store.nbr_strategy``.
    """
    return {
        "z_dim": cfg.model.z_dim,
        "pair_ttl_s": cfg.selection.ttl_hours * 3600.0,
        "uagg_ttl_s": cfg.store.uagg_ttl_hours * 3600.0,
        "iagg_ttl_s": cfg.store.iagg_ttl_hours * 3600.0,
        "nbr_strategy": cfg.store.nbr_strategy,
    }


# --------------------------------------------------------------------------------------------
# Column decoding (null-tolerant, vectorised)
# --------------------------------------------------------------------------------------------


def _values(col: Sequence) -> Sequence:
    """A sequence the byte codecs accept (they take any sized sequence of bytes/None)."""
    if isinstance(col, pd.Series):
        return col.to_numpy(dtype=object)
    return col


def _ints(col: Sequence) -> tuple[np.ndarray, np.ndarray]:
    """``(int64 values, present)``; None/NaN/NA and non-numbers are not present.

    Epoch seconds and counts are far below 2**53, so the float64 step is exact.
    """
    num = pd.to_numeric(pd.Series(_values(col), dtype=object), errors="coerce")
    arr = num.to_numpy(dtype=np.float64, na_value=np.nan)
    present = np.isfinite(arr)
    out = np.where(present, arr, 0).astype(np.int64)
    return out, present


def _version_ok(col: Sequence, fm_version: str) -> np.ndarray:
    """Rows whose version string equals ``fm_version`` (null never does)."""
    s = pd.Series(_values(col), dtype=object)
    eq = s.where(s.notna(), None).to_numpy(dtype=object) == fm_version
    return np.asarray(eq, dtype=bool)


def _fresh(computed: np.ndarray, present: np.ndarray, now: np.ndarray, ttl_s: float):
    """``now − ttl <= computed_at <= now`` where ``computed_at`` is present."""
    return present & (computed >= now - ttl_s) & (computed <= now)


def _now_array(now: int | np.ndarray, n: int) -> np.ndarray:
    arr = np.asarray(now)
    if arr.ndim == 0:
        arr = np.full(n, arr)
    if arr.shape != (n,):
        raise ValueError(f"now must be a scalar or have shape ({n},), got {arr.shape}")
    if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise ValueError(f"now must be epoch seconds (numbers), got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.floating) and not np.isfinite(arr).all():
        raise ValueError("now contains NaN or inf")
    return arr.astype(np.float64)


def _column_length(columns: Mapping[str, Sequence], names: Sequence[str]) -> int:
    missing = [c for c in names if c not in columns]
    if missing:
        raise ValueError(f"assemble_tiers: columns {missing} are missing")
    lengths = {c: len(columns[c]) for c in names}
    if len(set(lengths.values())) > 1:
        raise ValueError(f"assemble_tiers: columns have different lengths {lengths}")
    return next(iter(lengths.values()))


# --------------------------------------------------------------------------------------------
# Assembly
# --------------------------------------------------------------------------------------------


def assemble_tiers(
    columns: Mapping[str, Sequence],
    now: int | np.ndarray,
    *,
    z_dim: int,
    fm_version: str,
    pair_ttl_s: float,
    uagg_ttl_s: float,
    iagg_ttl_s: float,
    nbr_strategy: NbrStrategy = "top1",
) -> TierFeatures:
    """Apply the presence, version, freshness and exclusion rules (module docstring).

    Args:
        columns: full feature name → sequence of ``N`` values (see :func:`required_columns`;
            extra columns are ignored).
        now: epoch seconds, a scalar (serving) or one value per row (training: the
            impression time).
        z_dim: ``d``, values per vector.
        fm_version: the FM/autoencoder version the VM was trained with; any other is a miss.
        pair_ttl_s: read TTL of ``pair`` and ``nbr`` in seconds.
        uagg_ttl_s, iagg_ttl_s: read TTLs of the aggregates in seconds.
        nbr_strategy: ``"top1"`` (most similar neighbour's code) or ``"weighted"``
            (similarity-weighted mean of the neighbours' codes).

    Returns:
        :class:`TierFeatures` with ``N`` rows, in the input order.
    """
    if not isinstance(fm_version, str) or not fm_version:
        raise ValueError(f"fm_version must be a non-empty string, got {fm_version!r}")
    for name, ttl in (("pair", pair_ttl_s), ("uagg", uagg_ttl_s), ("iagg", iagg_ttl_s)):
        if not ttl > 0:
            raise ValueError(f"{name}_ttl_s must be > 0, got {ttl!r}")
    names = required_columns(nbr_strategy)
    n = _column_length(columns, names)
    out = empty_tiers(n, z_dim)
    if n == 0:
        return out
    t = _now_array(now, n)
    tz = out.tier_z  # [N, 4, d] view into out.features

    # pair ---------------------------------------------------------------------------------
    z_pair, pair_bytes_ok = unpack_f16(_values(columns["pair__z"]), z_dim)
    pair_ca, pair_ca_ok = _ints(columns["pair__computed_at"])
    pair_known = pair_bytes_ok & pair_ca_ok & _version_ok(columns["pair__fm_version"], fm_version)
    pair_ok = pair_known & _fresh(pair_ca, pair_ca_ok, t, pair_ttl_s)

    # nbr ----------------------------------------------------------------------------------
    z_nbr, nbr_bytes_ok = unpack_f16(_values(columns[_NBR_COLUMN[nbr_strategy]]), z_dim)
    nbr_ca, nbr_ca_ok = _ints(columns["nbr__computed_at"])
    nbr_ok = (
        nbr_bytes_ok
        & _version_ok(columns["nbr__fm_version"], fm_version)
        & _fresh(nbr_ca, nbr_ca_ok, t, pair_ttl_s)
    )

    # uagg: mean of the user's codes without the current item --------------------------------
    z_sum, sum_ok = unpack_f32(_values(columns["uagg__z_sum"]), z_dim)
    count, count_ok = _ints(columns["uagg__count"])
    wstart, wstart_ok = _ints(columns["uagg__window_start"])
    uagg_ca, uagg_ca_ok = _ints(columns["uagg__computed_at"])
    uagg_row = (
        sum_ok
        & count_ok
        & (count >= 0)
        & wstart_ok
        & _version_ok(columns["uagg__fm_version"], fm_version)
        & _fresh(uagg_ca, uagg_ca_ok, t, uagg_ttl_s)
    )
    in_window = uagg_row & pair_known & (pair_ca > wstart) & (pair_ca <= uagg_ca)
    z_user, user_valid = mean_excluding(z_sum, np.where(uagg_row, count, 0), z_pair, in_window)
    uagg_ok = uagg_row & user_valid

    # iagg ---------------------------------------------------------------------------------
    z_item, item_bytes_ok = unpack_f32(_values(columns["iagg__z_mean"]), z_dim)
    icount, icount_ok = _ints(columns["iagg__count"])
    iagg_ca, iagg_ca_ok = _ints(columns["iagg__computed_at"])
    iagg_ok = (
        item_bytes_ok
        & icount_ok
        & (icount > 0)
        & _version_ok(columns["iagg__fm_version"], fm_version)
        & _fresh(iagg_ca, iagg_ca_ok, t, iagg_ttl_s)
    )

    for k, (z, ok) in enumerate(
        ((z_pair, pair_ok), (z_nbr, nbr_ok), (z_user, uagg_ok), (z_item, iagg_ok))
    ):
        tz[:, k] = np.where(ok[:, None], z, 0.0)
        out.mask[:, k] = ok
    first = np.where(out.mask.any(axis=1), out.mask.argmax(axis=1), len(TIERS))
    out.tier = _TIER_LABELS[first]
    return out
