"""SOLARIS feature definitions: entities, views and the serving FeatureService.

Declarative: every view is built from :mod:`solaris.store.contract` (its fields, keys and
TTL rules) and the :class:`~solaris.config.SolarisConfig` it is given (the TTLs in hours and
the code size ``d``). The library calls :func:`definitions` with its own configuration
(``solaris.store.feast_store.apply_definitions``); the Feast CLI reads ``feast_cli.py``,
which calls it once with the configuration of the environment.

Vectors are ``Array(Float32)`` on Feast's surface (what ``get_online_features``,
``feast serve`` and ``get_historical_features`` return); the online store keeps pair and
neighbour codes as float16 (docs/online_store_format.md). Each view's tags carry the read TTL
and ``d`` to the online store; ``FeatureView.ttl`` is the view's retention, which also
bounds the offline point-in-time join.
"""

from __future__ import annotations

from datetime import timedelta

from feast import Entity, FeatureService, FeatureView, Field, FileSource, ValueType
from feast.types import Array, Float32, Int64, String

from solaris.config import SolarisConfig
from solaris.namespace import Namespace
from solaris.store import contract
from solaris.store.contract import Kind

_DTYPES = {
    Kind.VECTOR_F16: Array(Float32),
    Kind.VECTOR_F32: Array(Float32),
    Kind.EVENT_S: Int64,
    Kind.INT64: Int64,
    Kind.FLOAT32: Float32,
    Kind.STRING: String,
    Kind.INT64_LIST: Array(Int64),
    Kind.FLOAT32_LIST: Array(Float32),
}


def definitions(cfg: SolarisConfig) -> list[Entity | FeatureView | FeatureService]:
    """The repo's Feast objects under ``cfg``."""
    entities = {
        e.name: Entity(name=e.name, join_keys=[e.join_key], value_type=ValueType.INT64)
        for e in (contract.USER, contract.ITEM)
    }
    namespace = Namespace.of(cfg)
    views = {}
    for spec in contract.VIEWS.values():
        params = spec.params(cfg)
        views[spec.name] = FeatureView(
            name=spec.name,
            entities=[entities[e.name] for e in spec.entities],
            ttl=timedelta(seconds=params.retention_s),
            schema=[Field(name=f.name, dtype=_DTYPES[f.kind]) for f in spec.fields],
            source=FileSource(
                name=f"{spec.name}_source",
                path=namespace.offline_source(spec.name),
                timestamp_field=contract.EVENT_TS,
                s3_endpoint_override=cfg.store.offline_s3_endpoint,
            ),
            description=spec.description,
            tags=params.tags(),
        )
    serving = FeatureService(
        name=contract.FEATURE_SERVICE,
        features=[views[spec.name] for spec in contract.SERVING_VIEWS],
        description="every tier the VM reads, in one get_online_features call",
    )
    return [*entities.values(), *views.values(), serving]
