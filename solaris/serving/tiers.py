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

import functools
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from solaris.errors import SolarisError
from solaris.store.codec import RecordRows, ViewRows
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
    ViewParams,
    Z,
    epoch_seconds_array,
)

if TYPE_CHECKING:
    from solaris.config import SolarisConfig

__all__ = [
    "NONE",
    "TIERS",
    "TierAssembly",
    "TierFeatures",
    "TierInputError",
    "assemble_tiers",
    "empty_tiers",
    "load_assembly",
    "mean_excluding",
    "tier_settings",
]

TIERS: tuple[str, ...] = tuple(spec.name for spec in SERVING_VIEWS)
NONE = "none"
_TIER_LABELS = np.array([*TIERS, NONE], dtype=object)
_SLOTS = np.array([TIERS.index(spec.name) for spec in (PAIR, NBR, UAGG, IAGG)], np.int64)
_US = 1_000_000


def _codes(pair_z: np.ndarray, nbr_z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The pair and nbr codes as the compiled assembly takes them: float16 (as stored) as
    their uint16 bits, since numba has no float16 on the CPU; otherwise both as float32."""
    if pair_z.dtype == np.float16 and nbr_z.dtype == np.float16:
        return pair_z.view(np.uint16), nbr_z.view(np.uint16)
    return np.asarray(pair_z, np.float32), np.asarray(nbr_z, np.float32)


def _bytes(strings: np.ndarray) -> np.ndarray:
    """``[N]`` byte strings (numpy ``S<w>``, any strides) as their ``[N, w]`` uint8 bytes,
    a view."""
    if strings.dtype.kind != "S":  # rows built by hand: bytes or str objects
        strings = np.asarray(strings, "S")
    return strings.view(_bytes_of(strings.dtype.itemsize))


@functools.cache
def _bytes_of(width: int) -> np.dtype:
    return np.dtype((np.uint8, (width,)))


@functools.lru_cache(maxsize=64)
def _kernel_constants(
    fm_version: str, pair_ttl_s: float, nbr_ttl_s: float, uagg_ttl_s: float, iagg_ttl_s: float
) -> tuple[np.ndarray, np.ndarray]:
    """The expected version's bytes and the read TTLs in microseconds (pair, nbr, uagg,
    iagg), as the compiled loop takes them: the same for every request of a client."""
    version = np.frombuffer(fm_version.encode(), np.uint8)
    ttls = np.array([pair_ttl_s, nbr_ttl_s, uagg_ttl_s, iagg_ttl_s], np.float64) * _US
    ttls.flags.writeable = False
    return version, ttls


def _records(rows: ViewRows, tail: int) -> RecordRows | None:
    return rows if isinstance(rows, RecordRows) and rows.tail == tail else None


def _records_of(
    pair: ViewRows, nbr: ViewRows, uagg: ViewRows, iagg: ViewRows, tail: int
) -> tuple[RecordRows, RecordRows, RecordRows, RecordRows] | None:
    """The four views as :class:`RecordRows` whose string tail is ``tail`` bytes (the
    expected ``fm_version``'s), or ``None``."""
    p, n, u, i = (_records(v, tail) for v in (pair, nbr, uagg, iagg))
    return None if p is None or n is None or u is None or i is None else (p, n, u, i)


def _layout(
    pair: RecordRows, nbr: RecordRows, uagg: RecordRows, iagg: RecordRows
) -> tuple[Any, ...]:
    """What fixes the field layout of the four views' records: their specs, settings and
    record dtypes."""
    return (
        pair.spec,
        nbr.spec,
        uagg.spec,
        iagg.spec,
        pair.params,
        nbr.params,
        uagg.params,
        iagg.params,
        pair.records.dtype,
        nbr.records.dtype,
        uagg.records.dtype,
        iagg.records.dtype,
    )


def _ints(values: np.ndarray) -> np.ndarray:
    return np.asarray(values, np.int64)


def _flags(values: np.ndarray) -> np.ndarray:
    return np.asarray(values, np.bool_)


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


def load_assembly(z_dim: int, fm_version: str, nbr_strategy: NbrStrategy = "top1") -> None:
    """Load the compiled loops of :func:`assemble_tiers` now, so that no request waits for
    them: numba compiles each on a machine's first use (seconds) and caches it on disk. The
    request path's loop is compiled per record layout, which ``z_dim``, the length of
    ``fm_version`` and ``nbr_strategy`` fix; it is made here on one blank row of each view."""
    params = ViewParams(z_dim, 1, 1)
    tail = len(fm_version.encode())
    rows = {spec.name: RecordRows.blank(spec, params, 1, tail) for spec in SERVING_VIEWS}
    assemble_tiers(
        rows,
        0,
        z_dim=z_dim,
        fm_version=fm_version,
        pair_ttl_s=1,
        nbr_ttl_s=1,
        uagg_ttl_s=1,
        iagg_ttl_s=1,
        nbr_strategy=nbr_strategy,
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
    eff = c.astype(np.int64) - w
    valid = eff > 0
    num = s.astype(np.float64) - np.where(w[:, None], p, 0)
    # float64, rounded to float32 once: the compiled assembly computes the same
    mean = (num / np.maximum(eff, 1)[:, None]).astype(np.float32)
    mean[~valid] = 0.0
    return mean, valid


def _now_array(now: int | float | np.ndarray, n: int) -> np.ndarray:
    """``now`` as ``[1]`` float64 (one time: every row) or ``[n]`` (one per row), by the one
    rule of a request time (:func:`~solaris.store.contract.epoch_seconds_array`)."""
    one = type(now) in (int, float) or (
        isinstance(now, numbers.Real) and not isinstance(now, bool | np.bool_)
    )
    try:
        return epoch_seconds_array(now, 1 if one else n, "now")  # type: ignore[no-any-return]
    except ValueError as exc:
        raise TierInputError(str(exc)) from None


class TierAssembly:
    """:func:`assemble_tiers` with its settings checked and prepared once: for a caller that
    assembles many requests with the same settings (a serving client). Calling it is
    ``assemble_tiers(views, now, **settings)``, the same rules on the same compiled loops.

    Raises:
        TierInputError: a bad setting (at construction) or bad views or times (per call).
    """

    def __init__(
        self,
        *,
        z_dim: int,
        fm_version: str,
        pair_ttl_s: float,
        nbr_ttl_s: float,
        uagg_ttl_s: float,
        iagg_ttl_s: float,
        nbr_strategy: NbrStrategy = "top1",
    ) -> None:
        if not isinstance(fm_version, str) or not fm_version:
            raise TierInputError(f"fm_version must be a non-empty string, got {fm_version!r}")
        ttls = {"pair": pair_ttl_s, "nbr": nbr_ttl_s, "uagg": uagg_ttl_s, "iagg": iagg_ttl_s}
        for name, ttl in ttls.items():
            if not ttl > 0:
                raise TierInputError(f"{name}_ttl_s must be > 0, got {ttl!r}")
        if nbr_strategy not in _NBR_FIELD:
            raise TierInputError(f"nbr_strategy must be 'top1' or 'weighted', got {nbr_strategy!r}")
        self.z_dim = z_dim
        self._nbr_field = _NBR_FIELD[nbr_strategy]
        self._version, self._ttls_us = _kernel_constants(
            fm_version, pair_ttl_s, nbr_ttl_s, uagg_ttl_s, iagg_ttl_s
        )
        # The request path's last layout (`_layout`: the views' specs, settings and record
        # dtypes, compared as one tuple), its field dtypes and the loop compiled for them.
        # One attribute, so threads never pair a loop with another layout's fields.
        self._compiled: tuple[tuple[Any, ...], tuple[np.dtype, ...], Any] = ((), (), None)

    def __call__(
        self, views: Mapping[str, ViewRows], now: int | float | np.ndarray
    ) -> TierFeatures:
        missing = [t for t in TIERS if t not in views]
        if missing:
            raise TierInputError(f"assemble_tiers: views {missing} are missing")
        pair, nbr, uagg, iagg = (views[name] for name in TIERS)
        n = len(pair)
        if len(nbr) != n or len(iagg) != n or len(uagg) not in (n, 1):
            lengths = {t: len(views[t]) for t in TIERS}
            raise TierInputError(f"assemble_tiers: views have different lengths {lengths}")
        if n == 0:
            return empty_tiers(0, self.z_dim)
        t = _now_array(now, n)
        version = self._version
        known, layouts, kernel = self._compiled
        if (  # the request path, the layout of the last request: nothing to look up
            known
            and type(pair) is RecordRows
            and type(nbr) is RecordRows
            and type(uagg) is RecordRows
            and type(iagg) is RecordRows
            and _layout(pair, nbr, uagg, iagg) == known
        ):
            features, mask, first = kernel(
                t,
                self._ttls_us,
                _SLOTS,
                pair.records.view(layouts[0]),
                nbr.records.view(layouts[1]),
                uagg.records.view(layouts[2]),
                iagg.records.view(layouts[3]),
                version,
            )
            return TierFeatures(features=features, mask=mask, tier=_TIER_LABELS[first])
        from solaris.serving import tier_kernel  # numba: imported on the first assembly

        records = _records_of(pair, nbr, uagg, iagg, len(version))
        if records is not None:
            # The request path: every record present, one fm_version length, the expected
            # one's (other lengths are misses, assembled below without compiling anything).
            pair_rec, nbr_rec, uagg_rec, iagg_rec = records
            fields = (
                pair_rec.fields(code=Z, version=FM_VERSION),
                nbr_rec.fields(code=self._nbr_field, version=FM_VERSION),
                uagg_rec.fields(
                    count=COUNT, window_start=WINDOW_START, code=Z_SUM, version=FM_VERSION
                ),
                iagg_rec.fields(count=COUNT, code=Z_MEAN, version=FM_VERSION),
            )
            layouts = tuple(f.dtype for f in fields)
            kernel = tier_kernel.records_kernel(*layouts)
            self._compiled = (_layout(*records), layouts, kernel)
            features, mask, first = kernel(t, self._ttls_us, _SLOTS, *fields, version)
            return TierFeatures(features=features, mask=mask, tier=_TIER_LABELS[first])
        pair_z, nbr_z = _codes(pair.values[Z], nbr.values[self._nbr_field])
        features, mask, first = tier_kernel.assemble_rows(
            t,
            self._ttls_us,
            _SLOTS,
            _flags(pair.found),
            _ints(pair.event_us),
            _bytes(pair.values[FM_VERSION]),
            _ints(pair.values[COMPUTED_AT]),
            pair_z,
            _flags(nbr.found),
            _ints(nbr.event_us),
            _bytes(nbr.values[FM_VERSION]),
            nbr_z,
            _flags(uagg.found),
            _ints(uagg.event_us),
            _bytes(uagg.values[FM_VERSION]),
            _ints(uagg.values[COUNT]),
            _ints(uagg.values[WINDOW_START]),
            _ints(uagg.values[COMPUTED_AT]),
            np.asarray(uagg.values[Z_SUM], np.float32),
            _flags(iagg.found),
            _ints(iagg.event_us),
            _bytes(iagg.values[FM_VERSION]),
            _ints(iagg.values[COUNT]),
            np.asarray(iagg.values[Z_MEAN], np.float32),
            version,
        )
        return TierFeatures(features=features, mask=mask, tier=_TIER_LABELS[first])


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
    return TierAssembly(
        z_dim=z_dim,
        fm_version=fm_version,
        pair_ttl_s=pair_ttl_s,
        nbr_ttl_s=nbr_ttl_s,
        uagg_ttl_s=uagg_ttl_s,
        iagg_ttl_s=iagg_ttl_s,
        nbr_strategy=nbr_strategy,
    )(views, now)
