"""Tier assembly: the one function that turns feature-store rows into the VM's SOLARIS inputs.

Serving (:class:`solaris.serving.client.SolarisFeatures`, rows from the online store) and
training (:func:`solaris.serving.training_set.build_training_set`, rows from the
point-in-time ``get_historical_features``) both decode their rows into the same
:class:`~solaris.store.codec.ViewRows` (one per serving view) and call :func:`assemble_tiers`,
so a (user, item, time) gets the same features in both.

Rules, per row ``n`` and tier (all vectorised):

* **present** only if the view has a row, its ``fm_version`` equals the version the VM
  expects, and the row is **fresh**: ``now − ttl <= event time <= now``
  (:meth:`~solaris.store.codec.ViewRows.fresh`, the rule the online store's statuses apply
  too; both ends inclusive, as Feast's point-in-time join applies ``FeatureView.ttl``; a row
  computed after ``now`` is never used). The event time is the row's ``computed_at``, which
  the online store and the offline join both return.
* **nbr** takes ``z_top1`` (``nbr_strategy="top1"``) or ``z_mean`` (``"weighted"``).
* **uagg** is the user's mean code *without the current item* (:func:`mean_excluding`):
  ``(z_sum − z[u,i]) / (count − 1)`` when the current pair's code was counted in the sum,
  i.e. the pair row exists, has the expected version and
  ``window_start < pair.computed_at <= uagg.computed_at``; else ``z_sum / count``. The pair
  row does **not** have to be fresh under the pair TTL for this: a pair older than its
  serving TTL but inside the 24 h window is still in the sum and must still be removed
  (which is why the pair view's retention spans the window). The tier is present only if
  the effective count is > 0.
* **iagg** additionally needs ``count > 0``.
* ``tier[n]`` is the first present tier in :data:`TIERS` order, else ``"none"``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from solaris.errors import SolarisError
from solaris.store.codec import ViewRows, widen
from solaris.store.contract import (
    COMPUTED_AT,
    COUNT,
    FM_VERSION,
    IAGG,
    NBR,
    PAIR,
    SERVING_VIEWS,
    UAGG,
    WINDOW_START,
    Z_MEAN,
    Z_SUM,
    Z_TOP1,
    Z,
)

if TYPE_CHECKING:
    from solaris.config import SolarisConfig

__all__ = [
    "NONE",
    "TIERS",
    "TierFeatures",
    "TierInputError",
    "assemble_tiers",
    "empty_tiers",
    "mean_excluding",
    "tier_settings",
]

TIERS: tuple[str, ...] = tuple(spec.name for spec in SERVING_VIEWS)
NONE = "none"
_TIER_LABELS = np.array([*TIERS, NONE], dtype=object)

NbrStrategy = Literal["top1", "weighted"]
_NBR_FIELD = {"top1": Z_TOP1, "weighted": Z_MEAN}


class TierInputError(SolarisError, ValueError):
    """Bad input to assembling the serving tiers: views, times, TTLs or impressions."""


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
        raise TierInputError(f"need n >= 0 and z_dim > 0, got n={n}, z_dim={z_dim}")
    return TierFeatures(
        features=np.zeros((n, len(TIERS) * z_dim), dtype=np.float32),
        mask=np.zeros((n, len(TIERS)), dtype=bool),
        tier=np.full(n, NONE, dtype=object),
    )


def tier_settings(cfg: SolarisConfig) -> dict:
    """The keyword arguments of :func:`assemble_tiers` that come from configuration.

    Serving and training both take them from here, so they cannot drift apart: ``z_dim``
    and the read TTLs in seconds of the serving views (their contract's ``read_ttl``), and
    ``store.nbr_strategy``.
    """
    return {
        "z_dim": cfg.model.z_dim,
        "pair_ttl_s": PAIR.read_ttl(cfg),
        "nbr_ttl_s": NBR.read_ttl(cfg),
        "uagg_ttl_s": UAGG.read_ttl(cfg),
        "iagg_ttl_s": IAGG.read_ttl(cfg),
        "nbr_strategy": cfg.store.nbr_strategy,
    }


def mean_excluding(
    z_sum: np.ndarray,
    count: np.ndarray,
    z_pair: np.ndarray,
    pair_in_window: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The user-aggregate mean without the current pair: the formula training and serving share.

    For each row ``n``::

        in window:      mean = (z_sum − z_pair) / (count − 1)
        otherwise:      mean = z_sum / count
        valid = effective count (count − 1, or count) > 0;   invalid rows are zeros

    Args:
        z_sum: ``[N, d]`` the ``uagg`` sum (float32 sum of float16-rounded codes).
        count: ``[N]`` integer ``uagg`` count (0 for a missing row).
        z_pair: ``[N, d]`` the float16-decoded ``pair`` code of the current (user, item);
            ignored where ``pair_in_window`` is False.
        pair_in_window: ``[N]`` bool, True exactly when this pair's code was counted in the
            sum. (A pair recomputed after the aggregate was built is not in the window: its
            new code was not summed, and the old one cannot be removed; that is the price of
            storing only sum and count.)

    Returns ``(mean [N, d] float32, valid [N] bool)``. Arithmetic is float64, so the result
    equals the mean of the other items' float16-rounded codes up to the float32 rounding of
    the stored sum. ``count == 0`` with ``pair_in_window`` (an inconsistent input) is invalid,
    not an error, so one bad row cannot fail a serving request.
    """
    s = np.asarray(z_sum)
    c = np.asarray(count)
    p = np.asarray(z_pair)
    w = np.asarray(pair_in_window)
    if s.ndim != 2:
        raise TierInputError(f"z_sum must be 2-D [N, d], got shape {s.shape}")
    n = s.shape[0]
    if p.shape != s.shape:
        raise TierInputError(f"z_pair has shape {p.shape}, expected {s.shape} like z_sum")
    if c.shape != (n,) or w.shape != (n,):
        raise TierInputError(
            f"count and pair_in_window must have shape ({n},), got {c.shape} and {w.shape}"
        )
    if not np.issubdtype(c.dtype, np.integer):
        raise TierInputError(f"count must be integers, got dtype {c.dtype}")
    if w.dtype != np.bool_:
        raise TierInputError(f"pair_in_window must be bool, got dtype {w.dtype}")
    if (c < 0).any():
        raise TierInputError("count must be >= 0")
    return _mean_excluding(s, c.astype(np.int64), p, w)


def _mean_excluding(
    s: np.ndarray, c: np.ndarray, p: np.ndarray, w: np.ndarray, out: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`mean_excluding` without the argument checks (the request path): ``s`` may be
    one row ``[1, d]`` standing for every row; the mean goes into ``out`` when given."""
    eff = c - w
    valid = eff > 0
    num = s.astype(np.float64)  # [N, d], or [1, d]: one user's row for every candidate
    if w.all():  # the request path: every candidate's pair is in the user's window
        num = num - p
    elif w.any():
        num = num - np.where(w[:, None], p, 0)
    elif num.shape != p.shape:
        num = np.array(np.broadcast_to(num, p.shape))
    # One division for all rows where they share a count (the request path), computed in
    # float64 and rounded to float32 once, as below.
    divisor = eff[0] if eff.size and (eff == eff[0]).all() else np.maximum(eff, 1)[:, None]
    divisor = max(divisor, 1) if np.ndim(divisor) == 0 else divisor
    mean = np.divide(num, divisor, out=out, casting="same_kind", dtype=np.float64)
    if out is None:
        mean = mean.astype(np.float32)
    if not valid.all():
        mean[~valid] = 0.0
    return mean, valid


def _now_array(now: int | float | np.ndarray, n: int) -> np.ndarray | float:
    """``now`` as a scalar (it broadcasts) or a ``[n]`` array."""
    if isinstance(now, bool | np.bool_):
        raise TierInputError(f"now must be epoch seconds, got {now!r}")
    if isinstance(now, int | float | np.integer | np.floating):
        if not np.isfinite(now):
            raise TierInputError("now is NaN or inf")
        return now
    arr = np.asarray(now)
    if arr.ndim == 0:
        return _now_array(arr.item(), n)
    if arr.shape != (n,):
        raise TierInputError(f"now must be a scalar or have shape ({n},), got {arr.shape}")
    if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise TierInputError(f"now must be epoch seconds (numbers), got dtype {arr.dtype}")
    if np.issubdtype(arr.dtype, np.floating) and not np.isfinite(arr).all():
        raise TierInputError("now contains NaN or inf")
    return arr


def assemble_tiers(
    views: Mapping[str, ViewRows],
    now: int | float | np.ndarray,
    *,
    z_dim: int,
    fm_version: str,
    pair_ttl_s: float,
    nbr_ttl_s: float,
    uagg_ttl_s: float,
    iagg_ttl_s: float,
    nbr_strategy: NbrStrategy = "top1",
) -> TierFeatures:
    """Apply the presence, version, freshness and exclusion rules (module docstring).

    Args:
        views: view name → its :class:`~solaris.store.codec.ViewRows` for the ``N`` rows
            (``pair``, ``nbr``, ``uagg``, ``iagg``; extra views are ignored). ``uagg`` may
            hold one row, the requesting user's, which then stands for every row.
        now: epoch seconds, a scalar (serving) or one value per row (training: the
            impression time).
        z_dim: ``d``, values per vector.
        fm_version: the FM/autoencoder version the VM was trained with; any other is a miss.
        pair_ttl_s, nbr_ttl_s, uagg_ttl_s, iagg_ttl_s: read TTLs in seconds.
        nbr_strategy: ``"top1"`` (most similar neighbour's code) or ``"weighted"``
            (similarity-weighted mean of the neighbours' codes).

    Returns:
        :class:`TierFeatures` with ``N`` rows, in the input order.
    """
    if not isinstance(fm_version, str) or not fm_version:
        raise TierInputError(f"fm_version must be a non-empty string, got {fm_version!r}")
    ttls = {"pair": pair_ttl_s, "nbr": nbr_ttl_s, "uagg": uagg_ttl_s, "iagg": iagg_ttl_s}
    for name, ttl in ttls.items():
        if not ttl > 0:
            raise TierInputError(f"{name}_ttl_s must be > 0, got {ttl!r}")
    if nbr_strategy not in _NBR_FIELD:
        raise TierInputError(f"nbr_strategy must be 'top1' or 'weighted', got {nbr_strategy!r}")
    missing = [t for t in TIERS if t not in views]
    if missing:
        raise TierInputError(f"assemble_tiers: views {missing} are missing")
    lengths = {t: len(views[t]) for t in TIERS}
    n = lengths["pair"]
    if any(m != n and (m != 1 or t != UAGG.name) for t, m in lengths.items()):
        raise TierInputError(f"assemble_tiers: views have different lengths {lengths}")
    if n == 0:
        return empty_tiers(0, z_dim)
    t = _now_array(now, n)
    version = fm_version.encode()
    pair, nbr, uagg, iagg = (views[name] for name in TIERS)

    pair_known = pair.found & (pair.values[FM_VERSION] == version)
    pair_ok = pair_known & pair.fresh(t, pair_ttl_s)
    nbr_ok = (nbr.values[FM_VERSION] == version) & nbr.fresh(t, nbr_ttl_s)

    count = uagg.values[COUNT]
    # A window that starts after its end cannot say which codes it holds: excluding the
    # pair's own code would be guessed, so the row is not used (the store refuses to write
    # one; this guards rows written around it).
    uagg_row = (
        (count >= 0)
        & (uagg.values[WINDOW_START] <= uagg.values[COMPUTED_AT])
        & (uagg.values[FM_VERSION] == version)
        & uagg.fresh(t, uagg_ttl_s)
    )
    pair_z = widen(pair.values[Z])  # [N, d] float32: the pair block and the exclusion
    pair_ca = pair.values[COMPUTED_AT]
    in_window = (
        uagg_row
        & pair_known
        & (pair_ca > uagg.values[WINDOW_START])
        & (pair_ca <= uagg.values[COMPUTED_AT])
    )
    features = np.zeros((n, len(TIERS) * z_dim), dtype=np.float32)
    tz = features.reshape(n, len(TIERS), z_dim)  # [N, 4, d] view
    k_uagg = TIERS.index(UAGG.name)
    # The mean is zero exactly where the tier is missing (count 0 where the row is not used).
    _z_user, uagg_ok = _mean_excluding(
        uagg.values[Z_SUM], np.where(uagg_row, count, 0), pair_z, in_window, out=tz[:, k_uagg]
    )

    iagg_ok = (
        (iagg.values[COUNT] > 0) & (iagg.values[FM_VERSION] == version) & iagg.fresh(t, iagg_ttl_s)
    )

    present = {PAIR.name: pair_ok, NBR.name: nbr_ok, UAGG.name: uagg_ok, IAGG.name: iagg_ok}
    blocks = {
        PAIR.name: pair_z,
        NBR.name: widen(nbr.values[_NBR_FIELD[nbr_strategy]]),
        IAGG.name: iagg.values[Z_MEAN],
    }
    mask = np.empty((n, len(TIERS)), dtype=bool)
    first = np.full(n, len(TIERS))
    for k in reversed(range(len(TIERS))):
        ok = mask[:, k] = present[TIERS[k]]
        z = blocks.get(TIERS[k])  # the user's mean is in place already
        if z is not None and ok.all():
            tz[:, k] = z
        elif z is not None and ok.any():
            np.copyto(tz[:, k], z, where=ok[:, None])
        first[ok] = k
    return TierFeatures(features=features, mask=mask, tier=_TIER_LABELS[first])
