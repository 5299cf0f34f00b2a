"""The SOLARIS storage contract: every feature view, declared once.

A view is a name, the entity whose id names its Redis key (``partition``), the entity whose id
names a field inside that key (``member``), its fields with their storage kinds, and which
TTLs apply. Everything that stores or reads a view derives from this module: the Feast
definitions in ``feature_repo/``, the online store's records (:mod:`solaris.store.codec`), the
offline parquet schema, the pipeline's writers and the serving assembly. The Redis layout
is specified in ``docs/online_store_format.md``.

Two TTLs per view:

* ``read_ttl``: how old a row may be and still be served (``now − read_ttl <= event <= now``);
* ``retention``: how long a row is kept, online (Redis expiry and pruning) and for the offline
  point-in-time join (``FeatureView.ttl``). It is at least ``read_ttl``. For ``pair`` it also
  spans the oldest pair a served user aggregate can hold: an aggregate is served up to its
  read TTL after its window end, and its window reaches ``uagg_window_hours`` further back,
  and removing the current item from that sum needs the pair's code even when it is too old
  to be served as the pair tier (24 h + 24 h by default).

This module imports neither Feast nor Redis.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from solaris.errors import SolarisError
from solaris.times import MAX_EPOCH_S  # the store records times in this range

if TYPE_CHECKING:
    from solaris.config import SolarisConfig

__all__ = [
    "COMPUTED_AT",
    "COUNT",
    "EVENT_TS",
    "FEATURE_SERVICE",
    "FM_VERSION",
    "IAGG",
    "ITEM",
    "ITEM_ID",
    "LAYOUT_VERSION",
    "MAX_EPOCH_S",
    "NBR",
    "NBR_IDS",
    "NBR_SIMS",
    "N_NBRS",
    "PAIR",
    "REQUEST_ID",
    "REQUEST_TS",
    "SCORE",
    "SERVING_VIEWS",
    "SIMILARITY",
    "SRC_USER",
    "UAGG",
    "UNN",
    "USER",
    "USER_ID",
    "VIEWS",
    "WINDOW_START",
    "Z_MEAN",
    "Z_SUM",
    "Z_TOP1",
    "ContractError",
    "EntitySpec",
    "FieldSpec",
    "InvalidWriteError",
    "Kind",
    "ViewLookupError",
    "ViewParams",
    "ViewSpec",
    "Z",
    "epoch_seconds",
    "epoch_seconds_array",
    "view",
]

LAYOUT_VERSION = 1
"""Version of the Redis layout (docs/online_store_format.md); carried in every view's tags."""

# Join keys, the offline event-time column and the request-time entity column.
USER_ID = "user_id"
ITEM_ID = "item_id"
EVENT_TS = "event_ts"
REQUEST_TS = "request_ts"
"""Optional column of ``entity_rows`` in ``get_online_features``: the request time in epoch
seconds, against which freshness is judged (default: the wall clock)."""
# The request log's own columns (serving logs them; the cycle and the adapters read them).
REQUEST_ID = "request_id"
SCORE = "score"

# Feature names.
Z = "z"
FM_VERSION = "fm_version"
COMPUTED_AT = "computed_at"
Z_TOP1 = "z_top1"
SRC_USER = "src_user"
SIMILARITY = "similarity"
Z_MEAN = "z_mean"
N_NBRS = "n_nbrs"
Z_SUM = "z_sum"
COUNT = "count"
WINDOW_START = "window_start"
NBR_IDS = "nbr_ids"
NBR_SIMS = "nbr_sims"

FEATURE_SERVICE = "solaris_serving"
"""The FeatureService that serves every tier in one ``get_online_features`` call."""


class InvalidWriteError(SolarisError, ValueError):
    """Rows that may not be written: unknown view, missing column, bad value. The message
    names the view, the column and the first offending row; nothing was written."""


class ContractError(SolarisError, ValueError):
    """A value that breaks the store contract: a view declared wrong, or a time that is not
    epoch seconds."""


class ViewLookupError(SolarisError, KeyError):
    """A view or field asked for by a name that is not there."""


class Kind(StrEnum):
    """How a feature is stored. Vectors are ``d`` wide (``model.z_dim``)."""

    VECTOR_F16 = "vector_f16"  # float16 online; float16-rounded float32 offline
    VECTOR_F32 = "vector_f32"
    EVENT_S = "event_s"  # the row's event time in epoch seconds: derived, not stored again
    INT64 = "int64"
    FLOAT32 = "float32"
    STRING = "string"  # UTF-8
    INT64_LIST = "int64_list"
    FLOAT32_LIST = "float32_list"

    @property
    def is_vector(self) -> bool:
        return self in (Kind.VECTOR_F16, Kind.VECTOR_F32)

    @property
    def is_fixed(self) -> bool:
        """Fixed-width in a record (vectors have ``d`` elements)."""
        return self not in (Kind.STRING, Kind.INT64_LIST, Kind.FLOAT32_LIST)


# Specs are singletons compared and hashed by identity (eq=False): they key caches on the
# request path, where hashing every field would cost more than the lookup saves.
@dataclass(frozen=True, eq=False)
class FieldSpec:
    """One feature of a view.

    Attributes:
        name, kind, description: the feature.
        minimum, maximum: the smallest and largest value a write may hold (numbers and
            lists of numbers): ``0`` for ids, ``1`` for counts (a row stands for at least
            one code), about ``±1`` for cosine similarities.
        same_length_as: for a list field, the list field whose length each row must equal.
        at_most_event_s: the value may not be later than the row's event time in seconds
            (a window's start, which must not pass the window's end).
        never_key: for a list of ids, the row's join key whose id the list may not hold (a
            user is never its own neighbour).
    """

    name: str
    kind: Kind
    description: str
    minimum: float | None = None
    maximum: float | None = None
    same_length_as: str | None = None
    at_most_event_s: bool = False
    never_key: str | None = None


# A cosine similarity, with room for float32 rounding of unit vectors' inner products.
_COSINE: dict[str, Any] = {"minimum": -1.001, "maximum": 1.001}


@dataclass(frozen=True, eq=False)
class EntitySpec:
    """A Feast entity: its name, its (int64) join key and its Redis hash-tag letter."""

    name: str
    join_key: str
    tag: str


USER = EntitySpec("user", USER_ID, "u")
ITEM = EntitySpec("item", ITEM_ID, "i")


@dataclass(frozen=True)
class ViewParams:
    """The settings of one view that come from configuration, in seconds."""

    z_dim: int
    read_ttl_s: int
    retention_s: int

    def tags(self) -> dict[str, str]:
        """The FeatureView tags that carry these settings to the online store."""
        return {
            "solaris.layout": str(LAYOUT_VERSION),
            "solaris.z_dim": str(self.z_dim),
            "solaris.read_ttl_s": str(self.read_ttl_s),
        }

    @classmethod
    def from_tags(cls, tags: Mapping[str, str], retention_s: int, view: str) -> ViewParams:
        """Back from :meth:`tags` (and ``FeatureView.ttl`` for the retention).

        :class:`InvalidWriteError` names the view and the tag when a tag is missing or is
        not a positive integer, or when the retention (the view's ttl) is not positive or
        shorter than the read TTL (keys would expire while their rows are still served).
        """
        if tags.get("solaris.layout") != str(LAYOUT_VERSION):
            raise InvalidWriteError(
                f"view {view!r} was not defined for SOLARIS layout {LAYOUT_VERSION} "
                f"(tag solaris.layout={tags.get('solaris.layout')!r}): build it with "
                "feature_repo/solaris_features.py and run feast apply"
            )
        z_dim, read_ttl_s = (_positive_tag(tags, name, view) for name in _INT_TAGS)
        if isinstance(retention_s, bool) or not isinstance(retention_s, numbers.Integral):
            raise InvalidWriteError(
                f"view {view!r}: ttl must be whole seconds, got {retention_s!r}"
            )
        if retention_s <= 0:
            raise InvalidWriteError(
                f"view {view!r}: ttl (its retention) must be > 0, got {retention_s} s"
            )
        if read_ttl_s > retention_s:
            raise InvalidWriteError(
                f"view {view!r}: tag solaris.read_ttl_s={read_ttl_s} exceeds the view's ttl "
                f"(retention) {retention_s} s: keys would expire while their rows are served"
            )
        return cls(z_dim=z_dim, read_ttl_s=read_ttl_s, retention_s=int(retention_s))


_INT_TAGS = ("solaris.z_dim", "solaris.read_ttl_s")


def _positive_tag(tags: Mapping[str, str], name: str, view: str) -> int:
    raw = tags.get(name)
    try:
        value = int(raw)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        value = None
    if value is None or value <= 0:
        raise InvalidWriteError(f"view {view!r}: tag {name}={raw!r} must be a positive integer")
    return value


@dataclass(frozen=True, eq=False)
class ViewSpec:
    """A feature view: key structure, fields and TTL rules.

    Attributes:
        name: the view's name (also its Redis key segment; short, every key repeats it).
        partition: the entity whose id names the Redis key; ``None``: one key for the view.
        member: the entity whose id names the field inside a hash; ``None``: the key is a
            plain string holding one record.
        fields: the features, in schema order.
        read_ttl: configuration → read TTL in seconds.
        retention: configuration → retention in seconds (>= read TTL).
        description: what the view holds.
    """

    name: str
    partition: EntitySpec | None
    member: EntitySpec | None
    fields: tuple[FieldSpec, ...]
    read_ttl: Callable[[SolarisConfig], int]
    retention: Callable[[SolarisConfig], int]
    description: str

    def __post_init__(self) -> None:
        variable = [f for f in self.fields if not f.kind.is_fixed]
        if self.partition is None and self.member is None:
            raise ContractError(f"view {self.name}: needs a partition or a member entity")
        names = [f.name for f in self.fields]
        if len(set(names)) != len(names):
            raise ContractError(f"view {self.name}: duplicate field names {names}")
        if variable and variable[-1] is not self.fields[-1]:
            raise ContractError(f"view {self.name}: the last field must be variable-width")

    @property
    def entities(self) -> tuple[EntitySpec, ...]:
        return tuple(e for e in (self.partition, self.member) if e is not None)

    @property
    def join_keys(self) -> tuple[str, ...]:
        return tuple(e.join_key for e in self.entities)

    @property
    def field_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    def field(self, name: str) -> FieldSpec:
        for f in self.fields:
            if f.name == name:
                return f
        raise ViewLookupError(f"view {self.name} has no field {name!r}")

    def params(self, cfg: SolarisConfig) -> ViewParams:
        read_ttl, retention = self.read_ttl(cfg), self.retention(cfg)
        return ViewParams(cfg.model.z_dim, read_ttl, max(read_ttl, retention))


def _pair_ttl(cfg: SolarisConfig) -> int:
    return cfg.selection.ttl_seconds


PAIR = ViewSpec(
    name="pair",
    partition=USER,
    member=ITEM,
    fields=(
        FieldSpec(Z, Kind.VECTOR_F16, "FM last-shared-layer code z[u,i] of a selected pair"),
        FieldSpec(COMPUTED_AT, Kind.EVENT_S, "when z was computed, epoch s"),
        FieldSpec(FM_VERSION, Kind.STRING, "FM/autoencoder version that produced z"),
    ),
    read_ttl=_pair_ttl,
    retention=lambda cfg: max(
        _pair_ttl(cfg), cfg.store.uagg_window_seconds + cfg.store.uagg_ttl_seconds
    ),
    description="FM code z[u,i] of a verifier-selected pair (float16 online)",
)

NBR = ViewSpec(
    name="nbr",
    partition=USER,
    member=ITEM,
    fields=(
        FieldSpec(Z_TOP1, Kind.VECTOR_F16, "code of the most similar neighbour with the item"),
        FieldSpec(Z_MEAN, Kind.VECTOR_F16, "similarity-weighted mean of the neighbours' codes"),
        FieldSpec(SRC_USER, Kind.INT64, "the neighbour z_top1 comes from", minimum=0),
        FieldSpec(SIMILARITY, Kind.FLOAT32, "cosine similarity of that neighbour", **_COSINE),
        FieldSpec(N_NBRS, Kind.INT64, "neighbours averaged in z_mean", minimum=1),
        FieldSpec(COMPUTED_AT, Kind.EVENT_S, "when the row was built, epoch s"),
        FieldSpec(FM_VERSION, Kind.STRING, "FM/autoencoder version of the codes"),
    ),
    read_ttl=_pair_ttl,
    retention=_pair_ttl,
    description="z imputed from similar users for candidates the verifier did not select",
)

UAGG = ViewSpec(
    name="uagg",
    partition=USER,
    member=None,
    fields=(
        FieldSpec(Z_SUM, Kind.VECTOR_F32, "sum of the user's float16-rounded pair codes"),
        FieldSpec(COUNT, Kind.INT64, "codes in the sum", minimum=1),
        FieldSpec(
            WINDOW_START,
            Kind.INT64,
            "window start, epoch s (exclusive)",
            minimum=0,
            at_most_event_s=True,
        ),
        FieldSpec(COMPUTED_AT, Kind.EVENT_S, "window end, epoch s (inclusive)"),
        FieldSpec(FM_VERSION, Kind.STRING, "FM/autoencoder version of the codes"),
    ),
    read_ttl=lambda cfg: cfg.store.uagg_ttl_seconds,
    retention=lambda cfg: cfg.store.uagg_ttl_seconds,
    description="sum and count of the user's pair codes in the window, so that the current "
    "item can be excluded at read time",
)

IAGG = ViewSpec(
    name="iagg",
    partition=None,
    member=ITEM,
    fields=(
        FieldSpec(Z_MEAN, Kind.VECTOR_F32, "mean of the item's pair codes over users"),
        FieldSpec(COUNT, Kind.INT64, "users averaged", minimum=1),
        FieldSpec(COMPUTED_AT, Kind.EVENT_S, "window end, epoch s"),
        FieldSpec(FM_VERSION, Kind.STRING, "FM/autoencoder version of the codes"),
    ),
    read_ttl=lambda cfg: cfg.store.iagg_ttl_seconds,
    retention=lambda cfg: cfg.store.iagg_ttl_seconds,
    description="mean pair code of the item over users: the item-to-item fallback",
)

UNN = ViewSpec(
    name="unn",
    partition=USER,
    member=None,
    fields=(
        FieldSpec(
            NBR_IDS,
            Kind.INT64_LIST,
            "the user's nearest users (never the user itself)",
            minimum=0,
            never_key=USER_ID,
        ),
        FieldSpec(
            NBR_SIMS,
            Kind.FLOAT32_LIST,
            "their cosine similarities",
            same_length_as=NBR_IDS,
            **_COSINE,
        ),
    ),
    read_ttl=lambda cfg: cfg.store.unn_ttl_seconds,
    retention=lambda cfg: cfg.store.unn_ttl_seconds,
    description="the user's nearest users by cosine similarity of user embeddings",
)

VIEWS: dict[str, ViewSpec] = {v.name: v for v in (PAIR, NBR, UAGG, IAGG, UNN)}
SERVING_VIEWS: tuple[ViewSpec, ...] = (PAIR, NBR, UAGG, IAGG)
"""The views of :data:`FEATURE_SERVICE`, in tier order."""


def epoch_seconds(value: object, name: str) -> int | float:
    """``value`` when it is a time in epoch seconds (a finite real number in
    ``[0, MAX_EPOCH_S)``); ``ValueError`` naming ``name`` otherwise (a bool, NaN, a time in
    milliseconds, 1e20)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ContractError(f"{name} must be epoch seconds, got {value!r}")
    if not (math.isfinite(value) and 0 <= value < MAX_EPOCH_S):
        raise ContractError(
            f"{name} must be epoch seconds in [0, {MAX_EPOCH_S:.0e}) (not milliseconds), "
            f"got {value!r}"
        )
    return value


def epoch_seconds_array(values: object, n: int, name: str, *, rows: str = "row") -> Any:
    """``values`` as ``[n]`` float64 epoch seconds: one time (every row) or one per row,
    each by :func:`epoch_seconds`' rule; ``ContractError`` naming ``name`` (and the first bad
    row) otherwise; ``rows`` is what a row is called in the message. The one rule of a
    request time for every layer: the client's ``now``, Feast's ``request_ts``, the tier
    assembly's ``now``."""
    import numpy as np

    if (type(values) is int or type(values) is float) and 0 <= values < MAX_EPOCH_S:
        return np.full(n, values, np.float64)  # one Python number in range: the usual case
    if isinstance(values, numbers.Real) and not isinstance(values, bool | np.bool_):
        return np.full(n, float(epoch_seconds(values, name)))
    arr = np.asarray(values)
    if arr.dtype == np.bool_ or not (
        np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
    ):
        shown = repr(values)
        shown = shown if len(shown) <= 80 else f"{shown[:77]}..."
        raise ContractError(f"{name} must be epoch seconds (numbers), got {shown}")
    if arr.ndim == 0:
        return epoch_seconds_array(arr.item(), n, name, rows=rows)
    if arr.shape != (n,):
        raise ContractError(
            f"{name} must be one time or one per {rows} ({n}), got shape {arr.shape}"
        )
    out = arr.astype(np.float64)
    bad = ~(np.isfinite(out) & (out >= 0) & (out < MAX_EPOCH_S))
    if bad.any():
        k = int(np.argmax(bad))
        raise ContractError(
            f"{name} must be epoch seconds in [0, {MAX_EPOCH_S:.0e}) (not milliseconds), "
            f"got {float(out[k])!r} at row {k}"
        )
    return out


def view(name: object) -> ViewSpec:
    """The spec of view ``name``; :class:`InvalidWriteError` for anything else."""
    if isinstance(name, str) and name in VIEWS:
        return VIEWS[name]
    raise InvalidWriteError(
        f"unknown view {name!r}: the SOLARIS views are {', '.join(sorted(VIEWS))}"
    )
