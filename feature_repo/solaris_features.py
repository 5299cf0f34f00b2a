"""SOLARIS feature definitions: entities, views and the serving FeatureService.

Declarative only. Read TTLs come from SolarisConfig (env / YAML) so that the offline
point-in-time joins use the same freshness as the serving client, which enforces them
itself from event timestamps (Feast's online read does not apply ``FeatureView.ttl``).
Names are short because every Redis hash repeats them. Every view but ``unn`` carries its
own ``computed_at`` (epoch seconds, equal to the event timestamp) as a feature, so that
training rows from ``get_historical_features`` and served rows apply the same freshness and
version rules to the same values.
"""

from datetime import timedelta

from feast import Entity, FeatureService, FeatureView, Field, FileSource, ValueType
from feast.types import Array, Bytes, Float32, Int64, String

from solaris.config import SolarisConfig

_cfg = SolarisConfig.load()
# The serving client applies the pair read TTL (selection.ttl_hours) itself. The view's TTL
# only bounds the offline point-in-time join, and it must reach back over the whole user
# aggregate window: removing the current item from the 24 h sum needs that pair's code even
# when it is too old to be served as the pair tier.
_pair_ttl = timedelta(hours=max(_cfg.selection.ttl_hours, _cfg.store.uagg_window_hours))

user = Entity(name="user", join_keys=["user_id"], value_type=ValueType.INT64)
item = Entity(name="item", join_keys=["item_id"], value_type=ValueType.INT64)


def _source(view: str) -> FileSource:
    return FileSource(
        name=f"{view}_source", path=f"data/offline/{view}", timestamp_field="event_ts"
    )


pair = FeatureView(
    name="pair",
    entities=[user, item],
    ttl=_pair_ttl,
    schema=[
        Field(name="z", dtype=Bytes),
        Field(name="fm_version", dtype=String),
        Field(name="computed_at", dtype=Int64),
    ],
    source=_source("pair"),
    description="FM last-shared-layer code z[u,i] (float16 bytes) of a verifier-selected pair",
)

nbr = FeatureView(
    name="nbr",
    entities=[user, item],
    ttl=_pair_ttl,
    schema=[
        Field(name="z_top1", dtype=Bytes),
        Field(name="src_user", dtype=Int64),
        Field(name="similarity", dtype=Float32),
        Field(name="z_mean", dtype=Bytes),
        Field(name="n_nbrs", dtype=Int64),
        Field(name="fm_version", dtype=String),
        Field(name="computed_at", dtype=Int64),
    ],
    source=_source("nbr"),
    description="z imputed from similar users: most similar neighbour with the pair, and the "
    "similarity-weighted mean over neighbours (float16 bytes)",
)

uagg = FeatureView(
    name="uagg",
    entities=[user],
    ttl=timedelta(hours=_cfg.store.uagg_ttl_hours),
    schema=[
        Field(name="z_sum", dtype=Bytes),
        Field(name="count", dtype=Int64),
        Field(name="window_start", dtype=Int64),
        Field(name="fm_version", dtype=String),
        Field(name="computed_at", dtype=Int64),
    ],
    source=_source("uagg"),
    description="sum (float32 bytes) and count of the user's pair codes in the window ending "
    "at the event timestamp, so the current item can be excluded at read time",
)

iagg = FeatureView(
    name="iagg",
    entities=[item],
    ttl=timedelta(hours=_cfg.store.iagg_ttl_hours),
    schema=[
        Field(name="z_mean", dtype=Bytes),
        Field(name="count", dtype=Int64),
        Field(name="fm_version", dtype=String),
        Field(name="computed_at", dtype=Int64),
    ],
    source=_source("iagg"),
    description="mean pair code of the item over users (float32 bytes): item-to-item fallback",
)

unn = FeatureView(
    name="unn",
    entities=[user],
    ttl=timedelta(hours=_cfg.store.unn_ttl_hours),
    schema=[
        Field(name="nbr_ids", dtype=Array(Int64)),
        Field(name="nbr_sims", dtype=Array(Float32)),
    ],
    source=_source("unn"),
    description="the user's nearest users by cosine similarity of user embeddings",
)

solaris_serving = FeatureService(
    name="solaris_serving",
    features=[pair, nbr, uagg, iagg],
    description="everything the VM reads in one get_online_features call",
)
