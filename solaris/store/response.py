"""The online store's response: the decoded rows, with Feast's proto built only on demand.

:class:`SolarisOnlineResponse` is a ``feast.OnlineResponse``. It keeps each view's rows as
numpy arrays (:class:`~solaris.store.codec.ViewRows`) and the freshness rule applied to them,
and builds ``GetOnlineFeaturesResponse`` only when ``.proto`` is read (``feast serve`` does;
building it costs milliseconds for a few hundred rows). ``to_dict``, ``to_df`` and
``to_arrow`` are made from the arrays directly. :meth:`SolarisOnlineResponse.rows` gives the
SOLARIS serving client the raw rows of a view, stale ones included: the user-aggregate
exclusion needs a pair code even when it is too old to be served.

Statuses, per row and view, with ``now`` the request time (``request_ts`` in the entity
rows, else the wall clock):

* ``PRESENT``: a row with ``now − read_ttl <= event time <= now``;
* ``OUTSIDE_MAX_AGE``: a row older than that (its value is null);
* ``NOT_FOUND``: no row, or one computed after ``now`` (null).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from feast.online_response import TIMESTAMP_POSTFIX, OnlineResponse
from feast.protos.feast.serving.ServingService_pb2 import FieldStatus, GetOnlineFeaturesResponse
from feast.protos.feast.types.Value_pb2 import FloatList, Int64List
from feast.protos.feast.types.Value_pb2 import Value as ValueProto
from feast.value_type import ValueType
from google.protobuf.timestamp_pb2 import Timestamp

from solaris.store.codec import ViewRows
from solaris.store.contract import Kind, ViewLookupError, ViewParams, ViewSpec

__all__ = ["SolarisOnlineResponse", "ViewAnswer", "row_status"]

_US = 1_000_000
PRESENT, NOT_FOUND, OUTSIDE_MAX_AGE = (
    FieldStatus.PRESENT,
    FieldStatus.NOT_FOUND,
    FieldStatus.OUTSIDE_MAX_AGE,
)
_VALUE_TYPE = {
    Kind.VECTOR_F16: ValueType.FLOAT_LIST,
    Kind.VECTOR_F32: ValueType.FLOAT_LIST,
    Kind.EVENT_S: ValueType.INT64,
    Kind.INT64: ValueType.INT64,
    Kind.FLOAT32: ValueType.FLOAT,
    Kind.STRING: ValueType.STRING,
    Kind.INT64_LIST: ValueType.INT64_LIST,
    Kind.FLOAT32_LIST: ValueType.FLOAT_LIST,
}


def row_status(rows: ViewRows, read_ttl_s: int, now_s: np.ndarray) -> np.ndarray:
    """``[N]`` Feast ``FieldStatus`` of each row under the freshness rule (module docstring)."""
    status = np.full(len(rows), NOT_FOUND, np.int32)
    status[rows.current(now_s)] = OUTSIDE_MAX_AGE
    status[rows.fresh(now_s, read_ttl_s)] = PRESENT
    return status


@dataclass(frozen=True)
class ViewAnswer:
    """One view's part of a response: which features, under which name, and the rows."""

    spec: ViewSpec
    params: ViewParams
    prefix: str  # the view's name in the response (a projection may alias it)
    features: tuple[str, ...]
    rows: ViewRows


class SolarisOnlineResponse(OnlineResponse):
    """A ``feast.OnlineResponse`` over decoded rows (see the module docstring)."""

    def __init__(
        self,
        entities: Mapping[str, np.ndarray],
        answers: Sequence[ViewAnswer],
        now_s: np.ndarray,
        *,
        full_feature_names: bool,
    ) -> None:
        # The base class would parse a ready proto; this one builds it lazily.
        self._entities = dict(entities)
        self._answers = list(answers)
        self._now_s = now_s
        self._full = full_feature_names
        self._statuses: list[np.ndarray] | None = None
        self._proto: GetOnlineFeaturesResponse | None = None

    @property
    def _feature_types(self) -> dict[str, ValueType]:  # read by Feast's base methods
        return {
            self._name(a, f): _VALUE_TYPE[a.spec.field(f).kind]
            for a in self._answers
            for f in a.features
        }

    # -- SOLARIS access ---------------------------------------------------------------------

    def rows(self, view: str) -> ViewRows:
        """The raw rows of ``view`` (its name in the response), stale ones included."""
        for answer in self._answers:
            if answer.prefix == view:
                return answer.rows
        raise ViewLookupError(f"view {view!r} is not in this response")

    @property
    def request_time(self) -> np.ndarray:
        """``[N]`` the request time of each row, epoch seconds."""
        return self._now_s

    def statuses(self) -> list[np.ndarray]:
        """Per view, the ``[N]`` FieldStatus of each row (every feature of a row shares it)."""
        if self._statuses is None:
            self._statuses = [
                row_status(a.rows, a.params.read_ttl_s, self._now_s) for a in self._answers
            ]
        return self._statuses

    # -- Feast's surface ---------------------------------------------------------------------

    def _name(self, answer: ViewAnswer, feature: str) -> str:
        return f"{answer.prefix}__{feature}" if self._full else feature

    @property
    def proto(self) -> GetOnlineFeaturesResponse:  # type: ignore[override]
        if self._proto is None:
            self._proto = self._build_proto()
        return self._proto

    @proto.setter
    def proto(self, value: GetOnlineFeaturesResponse) -> None:
        self._proto = value

    def to_dict(self, include_event_timestamps: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {k: v.tolist() for k, v in self._entities.items()}
        for answer, status in zip(self._answers, self.statuses(), strict=True):
            present = status == PRESENT
            seconds = (answer.rows.event_us // _US).tolist()
            for feature in answer.features:
                name = self._name(answer, feature)
                out[name] = _python_values(answer, feature, present)
                if include_event_timestamps:
                    out[name + TIMESTAMP_POSTFIX] = [
                        s if ok else 0 for s, ok in zip(seconds, answer.rows.found, strict=True)
                    ]
        return out

    def to_df(self, include_event_timestamps: bool = False) -> pd.DataFrame:
        return pd.DataFrame(self.to_dict(include_event_timestamps))

    def to_arrow(self, include_event_timestamps: bool = False) -> pa.Table:
        return pa.Table.from_pydict(self.to_dict(include_event_timestamps))

    def _build_proto(self) -> GetOnlineFeaturesResponse:
        response = GetOnlineFeaturesResponse()
        names = response.metadata.feature_names.val
        empty_ts = Timestamp()
        for key, values in self._entities.items():
            names.append(key)
            n = len(values)
            response.results.append(
                GetOnlineFeaturesResponse.FeatureVector(
                    values=[ValueProto(int64_val=v) for v in values.tolist()],
                    statuses=[PRESENT] * n,
                    event_timestamps=[empty_ts] * n,
                )
            )
        for answer, status in zip(self._answers, self.statuses(), strict=True):
            present = status == PRESENT
            stamps = []
            for us, found in zip(answer.rows.event_us.tolist(), answer.rows.found, strict=True):
                ts = Timestamp()
                if found:
                    ts.FromMicroseconds(us)
                stamps.append(ts)
            for feature in answer.features:
                names.append(self._name(answer, feature))
                kind = answer.spec.field(feature).kind
                values = [
                    _value_proto(kind, v) if v is not None else ValueProto()
                    for v in _python_values(answer, feature, present)
                ]
                response.results.append(
                    GetOnlineFeaturesResponse.FeatureVector(
                        values=values, statuses=status.tolist(), event_timestamps=stamps
                    )
                )
        return response


def _python_values(answer: ViewAnswer, feature: str, present: np.ndarray) -> list[Any]:
    """The feature's values as Python objects, ``None`` where the row is not present."""
    kind = answer.spec.field(feature).kind
    column = answer.rows.values[feature]
    if kind is Kind.STRING:
        values = [v.decode("utf-8", "replace") for v in column.tolist()]
    elif kind in (Kind.INT64_LIST, Kind.FLOAT32_LIST):
        values = [v.tolist() if v is not None else None for v in column]
    else:
        values = column.tolist()
    return [v if ok else None for v, ok in zip(values, present.tolist(), strict=True)]


def _value_proto(kind: Kind, value: Any) -> ValueProto:
    if kind.is_vector or kind is Kind.FLOAT32_LIST:
        return ValueProto(float_list_val=FloatList(val=value))
    if kind is Kind.INT64_LIST:
        return ValueProto(int64_list_val=Int64List(val=value))
    if kind in (Kind.INT64, Kind.EVENT_S):
        return ValueProto(int64_val=value)
    if kind is Kind.FLOAT32:
        return ValueProto(float_val=value)
    return ValueProto(string_val=value)
