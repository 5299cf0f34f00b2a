"""The one SOLARIS settings object.

Values come, highest precedence first, from keyword overrides, environment variables
(``SOLARIS_`` prefix, ``__`` between nested names, e.g. ``SOLARIS_SELECTION__SHARE=0.1``),
a YAML file (``SolarisConfig.load(path)`` or ``SOLARIS_CONFIG=path``), then the defaults
below. The object is built once at the edge (CLI, DAG task) and passed down explicitly.

Bad settings fail when the object is built, naming the setting: unknown names at any level
(a typo'd ``SOLARIS_SELECTION__SHAR``, a YAML key or a keyword override), non-finite floats,
booleans where a number belongs (``partitions: true`` is not 1), invalid cron expressions
and cron expressions of other than five fields, a ``cycle.start`` without a UTC offset and
a ``store.redis`` connection string that cannot be used
(:class:`~solaris.connection.RedisTarget`). A bad value that came from a ``SOLARIS_``
variable names the variable; a file that is not a YAML mapping is a ``ConfigError`` naming
the file (and the line of a parse error).
Neither errors nor ``repr(cfg)`` show ``store.redis``, which may hold a password.
``SOLARIS_`` variables that are not settings (the YAML path, test and script knobs) are
listed in :data:`NON_SETTING_ENV`.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml
from croniter import croniter
from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)
from pydantic_settings.exceptions import SettingsError

from solaris.connection import ConnectionStringError, RedisTarget, redacted
from solaris.errors import ConfigError
from solaris.namespace import LIVE, NAME_PATTERN

__all__ = [
    "CRON_PRESETS",
    "ENV_NESTED_DELIMITER",
    "ENV_PREFIX",
    "IMPORT_PATH",
    "NON_SETTING_ENV",
    "CycleConfig",
    "DataConfig",
    "ModelConfig",
    "NearlineConfig",
    "RequestLogConfig",
    "SelectionConfig",
    "SolarisConfig",
    "StoreConfig",
    "TrainConfig",
    "describe_errors",
    "redacted_settings",
    "whole_seconds",
]

IMPORT_PATH = r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$"  # an adapter's "package.module:factory"
ENV_PREFIX = "SOLARIS_"
ENV_NESTED_DELIMITER = "__"


def env_variable(setting: str) -> str:
    """The environment variable of a dotted setting: ``selection.share`` →
    ``SOLARIS_SELECTION__SHARE``."""
    return ENV_PREFIX + setting.replace(".", ENV_NESTED_DELIMITER).upper()


# ``SOLARIS_`` environment variables that are not settings: the YAML path, and the knobs of
# the test harness, the Airflow scripts and the benchmarks. Any other ``SOLARIS_`` variable
# must name a setting, or building the configuration fails.
NON_SETTING_ENV = frozenset(
    {
        "SOLARIS_CONFIG",
        "SOLARIS_AIRFLOW_DB_URL",
        "SOLARIS_AIRFLOW_CHECK",
        "SOLARIS_AIRFLOW_BIN",
        "SOLARIS_BENCH_DUCKDB_PYTHON",
        "SOLARIS_BENCH_POSTGRES",
        "SOLARIS_CELERY_BROKER_URL",
        "SOLARIS_CELERY_CONCURRENCY",
        "SOLARIS_SERVE_SETTINGS",  # solaris serve -> its workers (solaris.serving.http)
        "SOLARIS_SERVE_TOKEN",  # solaris serve's bearer token (a secret: never a setting)
        "SOLARIS_TEST_BROKER",
        "SOLARIS_TEST_POSTGRES",
        "SOLARIS_TEST_REDIS",
        "SOLARIS_TEST_REDIS_REQUESTS",
    }
)

# Airflow's schedule presets, accepted besides cron expressions.
CRON_PRESETS = frozenset(
    {"@once", "@hourly", "@daily", "@weekly", "@monthly", "@yearly", "@annually"}
)

ImportPath = Annotated[str, Field(pattern=IMPORT_PATH)]
# Durations are bounded on both sides: a TTL of 1e-9 h (no code is ever fresh) or 1e308 h
# (seconds past int64, past any timestamp) loads as a float but breaks the cycle later.
Hours = Annotated[float, Field(ge=1 / 3600, le=87_600)]  # one second .. ten years
Minutes = Annotated[float, Field(ge=1 / 60, le=10_080)]  # one second .. a week
Days = Annotated[float, Field(ge=1 / 86_400, le=3_650)]  # one second .. ten years
Seconds = Annotated[float, Field(ge=0.001, le=86_400)]  # a millisecond .. a day
# A millisecond at least: the read path's socket timeouts and Redis's XAUTOCLAIM idle time
# honour nothing shorter (1e-9 ms loads as a positive float but is a timeout of nothing).
Milliseconds = Annotated[float, Field(ge=1, le=3_600_000)]  # a millisecond .. an hour
# The FM's task heads: at least one, each a short name without '.' (the FM's rule), no repeats.
TaskName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]


def _redis_target(value: object) -> RedisTarget:
    if isinstance(value, RedisTarget):
        return value
    if not isinstance(value, str):
        raise ConnectionStringError(
            f"a connection string 'host:port[,option=value...]', got {type(value).__name__}"
        )
    return RedisTarget.parse(value)  # ConnectionStringError never shows the password


# A Redis connection string, parsed into a RedisTarget when the settings are built; it is
# dumped (and documented) as the string. NoDecode: an environment value is the string
# itself, not JSON.
RedisConnection = Annotated[
    RedisTarget,
    NoDecode,
    PlainValidator(_redis_target),
    PlainSerializer(lambda target: target.connection_string, return_type=str),
    WithJsonSchema({"type": "string"}),
]


def whole_seconds(value: float, unit_seconds: float) -> int:
    """A duration setting in whole seconds: the one rule (rounded, never truncated: 4.35 h
    is 15,660 s), used by the sections' ``*_seconds`` properties."""
    return round(value * unit_seconds)


def _is_number(annotation: object) -> bool:
    """Whether a setting's annotation is ``int`` or ``float`` (or either, or unset)."""
    return annotation in (int, float) or any(_is_number(a) for a in get_args(annotation))


class Section(BaseModel):
    """A section of the settings: unknown keys, non-finite floats, booleans where a number
    belongs and mutation are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_for_a_number(cls, value: object, info: ValidationInfo) -> object:
        # pydantic takes True as 1 (and 1.0): `partitions: true` would mean one partition.
        name = info.field_name
        if isinstance(value, bool) and name and _is_number(cls.model_fields[name].annotation):
            raise ValueError(f"{value} is a boolean, not a number: give the number itself")
        return value


def _check_cron(value: str) -> str:
    """An Airflow schedule: a preset, or a standard five-field cron expression. croniter
    also takes a sixth field (seconds) and a seventh (year), which Airflow's cron timetable
    does not read as the user means: ``0 0 * * * *`` would not be "daily at midnight"."""
    if value.startswith("@"):
        if value not in CRON_PRESETS:
            raise ValueError(
                f"{value!r} is not a schedule preset (one of {', '.join(sorted(CRON_PRESETS))})"
            )
        return value
    fields = len(value.split())
    if fields != 5:
        raise ValueError(
            f"{value!r} has {fields} fields: a cron expression has five (minute hour "
            "day-of-month month day-of-week, e.g. '0 0 * * *'), no seconds or year field"
        )
    if not croniter.is_valid(value):
        raise ValueError(f"{value!r} is not a valid cron expression (e.g. '0 0 * * *')")
    return value


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "solaris"


class DataConfig(Section):
    """Where MovieLens-100K is obtained from and cached (never inside the repository)."""

    cache_dir: Path = Field(
        default_factory=_default_cache_dir,
        description="where MovieLens-100K is unpacked: $XDG_CACHE_HOME/solaris, else "
        "~/.cache/solaris",
    )
    recbole_version: str = Field(
        "1.2.1",
        description="the recbole wheel MovieLens-100K is taken from (its licence: never committed)",
    )


class RequestLogConfig(Section):
    """How ratings become ranking requests with retrieval candidates."""

    bucket_seconds: int = Field(60, gt=0, le=86_400, description="one request per user per bucket")
    retrieval_k: int = Field(200, gt=0, description="retrieval candidates per request")
    popularity_window_days: Days = Field(
        14.0, description="trailing window of the retrieval's item popularity"
    )
    cooccurrence_weight: float = Field(
        1.0, ge=0, description="weight of history co-occurrence against trailing popularity"
    )
    cooccurrence_history: int = Field(20, gt=0, description="recent items used for co-occurrence")
    recurrence_window_hours: Hours = Field(
        6.0, description="window of the demo's recurrence and retrieval-recall figures"
    )
    source: ImportPath | None = Field(
        None,
        description="the traffic source replays feed through serving: 'package.module:factory', "
        "factory(cfg) -> solaris.adapters.TrafficSource; required by replays and the cycle",
    )


class ModelConfig(Section):
    """Sizes of the FM, the autoencoder and the VM."""

    embed_dim: int = Field(
        16, gt=0, description="the example FM's id and side-feature embedding width"
    )
    history_len: int = Field(50, gt=0, description="FM sequence length (items strictly before t)")
    kg_entities_per_item: int = Field(
        32, gt=0, description="hashed KG entities per item the FM reads"
    )
    kg_buckets: int = Field(20_000, gt=0, description="hash buckets for KG entity ids")
    cross_layers: int = Field(2, ge=0, description="DCNv2 cross layers of the example FM")
    shared_dim: int = Field(128, gt=0, description="width of the FM's last shared layer h")
    z_dim: int = Field(32, gt=0, description="autoencoder code size d")
    vm_hidden: int = Field(64, gt=0, description="hidden width of the example VM")
    tasks: tuple[TaskName, ...] = Field(
        ("like", "love"),
        description="the example FM's task heads (like: rating >= 4, love: rating == 5): at "
        "least one, each named once",
    )
    foundation: ImportPath | None = Field(
        None,
        description="the FM adapter: 'package.module:factory', "
        "factory(cfg) -> solaris.adapters.FoundationModel; required by the cycle",
    )
    verifier: str = Field(
        "solaris.adapters:logged_scores",
        pattern=IMPORT_PATH,
        description="the verifier adapter: 'package.module:factory', "
        "factory(cfg) -> solaris.adapters.Verifier; the default ranks by the score serving logged",
    )
    trainer: ImportPath | None = Field(
        None,
        description="what retrains the VM behind the verifier: 'package.module:factory', "
        "factory(cfg) -> solaris.adapters.VerifierTrainer; None: the training DAG skips it",
    )

    @field_validator("tasks")
    @classmethod
    def _tasks_named_once_at_least_one(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("no task: the FM needs at least one task head (e.g. [like])")
        repeated = sorted({task for task in value if value.count(task) > 1})
        if repeated:
            raise ValueError(f"{', '.join(repeated)} named more than once (a task is one head)")
        return value


class TrainConfig(Section):
    """Time-split training with early stopping."""

    seed: int = Field(0, description="seed of every model's initialisation and shuffling")
    train_share: float = Field(0.8, gt=0, lt=1, description="oldest share of impressions: training")
    val_share: float = Field(
        0.1, gt=0, lt=1, description="next share: validation (early stopping); the rest is test"
    )
    vm_window_share: float = Field(
        0.3, gt=0, le=1, description="the VM sees only the last share of the training window"
    )
    batch_size: int = Field(1024, gt=0, description="training batch size")
    lr: float = Field(2e-3, gt=0, description="Adam learning rate")
    weight_decay: float = Field(1e-5, ge=0, description="Adam weight decay")
    max_epochs: int = Field(20, gt=0, description="most epochs of a training run")
    patience: int = Field(
        2, ge=0, description="epochs without a better validation log-loss before stopping"
    )
    ae_epochs: int = Field(30, gt=0, description="epochs of the autoencoder h -> z")
    vm_tier_coverage: float = Field(
        0.4, ge=0, le=1, description="feature-dropout keep rate for each tier during VM training"
    )

    @model_validator(mode="after")
    def _shares_leave_a_test_period(self) -> TrainConfig:
        if self.train_share + self.val_share >= 1:
            raise ValueError("train_share + val_share must leave a test period (< 1)")
        return self


class SelectionConfig(Section):
    """Verifier selection, cache freshness and the refresh cadence."""

    share: float = Field(0.2, gt=0, le=1, description="share of each request's candidates")
    ttl_hours: Hours = Field(
        6.0, description="freshness of a cached pair code (the pair and nbr views' read TTL)"
    )
    cadence_minutes: Minutes = Field(
        15.0, description="candidates DAG schedule interval (1 s to a week)"
    )

    @property
    def ttl_seconds(self) -> int:
        return whole_seconds(self.ttl_hours, 3600)

    @property
    def cadence_seconds(self) -> int:
        return whole_seconds(self.cadence_minutes, 60)


class NearlineConfig(Section):
    """The near-line path (``docs/nearline.md``): serving selects, ``solaris nearline`` embeds.

    With ``enabled``, every request serving logs puts the top ``selection.share`` of its
    candidates by the verifier's score that have no fresh code (and none pending) into the
    namespace's embed stream; the embedder writes their codes seconds later. The interval
    cycle skips what the near-line path took and keeps selecting the rest.
    """

    enabled: bool = Field(
        False, description="serving selects into the embed stream as it logs each request"
    )
    stream_maxlen: int = Field(
        100_000, gt=0, description="entries (requests) the embed stream keeps at most"
    )
    pending_seconds: Seconds = Field(
        120.0,
        description="how long a selected pair counts as pending (not selected again) before "
        "its code arrives",
    )
    refresh_after_requests: int = Field(
        1,
        ge=0,
        le=1_000,
        description="refresh on activity: a cached code is stale once the user has made this "
        "many requests since it was written; 0 is off",
    )
    refresh_share: float = Field(
        0.02,
        gt=0,
        le=1,
        description="refresh on activity: each request selects again its best stale codes, up "
        "to this share of its candidates (a budget beside selection.share)",
    )
    batch_pairs: int = Field(2_048, gt=0, description="most pairs of one embedder micro-batch")
    batch_ms: Milliseconds = Field(
        200.0, description="longest wait from a micro-batch's first entry to its forward pass"
    )
    claim_idle_ms: Milliseconds = Field(
        30_000.0,
        description="a consumer's unacknowledged entries idle this long are reclaimed by "
        "another (XAUTOCLAIM)",
    )
    group: str = Field(
        "embedders",
        pattern=r"^[A-Za-z0-9_.-]{1,64}$",
        description="the Redis Streams consumer group the embedders share",
    )


def _check_storage_uri(setting: str, value: str | None) -> str | None:
    """``value`` if it is a folder or a URL of a filesystem fsspec knows, without a login
    in it (credentials come from the filesystem's own configuration)."""
    if value is None or "://" not in value:
        return value
    from fsspec.registry import known_implementations, registry

    protocol, rest = value.split("://", 1)
    if "@" in rest.split("/", 1)[0]:
        raise ValueError(
            f"{setting}: credentials in the URL are refused ({protocol}://<login>@...); "
            "give them through the filesystem's own configuration"
        )
    if protocol not in known_implementations and protocol not in registry:
        raise ValueError(
            f"{setting}: fsspec knows no filesystem {protocol!r} "
            "(e.g. s3://bucket/prefix, gs://bucket/prefix, or a local folder)"
        )
    return value


class StoreConfig(Section):
    """Feast feature store on Redis: connection, registry, read TTLs and serving bounds."""

    # pydantic's own message for a bad StoreConfig(...) would quote the input: the password.
    model_config = ConfigDict(**Section.model_config, hide_input_in_errors=True)

    redis: RedisConnection | None = Field(
        None,
        repr=False,  # it may hold a password: never in repr(cfg), a log line or a traceback
        description="Feast Redis connection string 'host:port,db=N,password=...,ssl=true'; "
        "unset: use localhost:6379 if it answers, else start an embedded Redis (demo only)",
    )
    redis_type: Literal["redis", "redis_cluster"] = Field(
        "redis", description="redis_cluster: every host:port of `redis` is a start-up node"
    )
    repo_path: Path = Field(Path("feature_repo"), description="the Feast repository")
    registry: str = Field(
        "data/registry.db",
        description="file path (relative to repo_path) or a postgresql:// URL (SQL registry)",
    )
    offline_uri: str | None = Field(
        None,
        description="where Feast's offline rows live (the views' FileSources): default "
        "<repo_path>/data/offline; an s3:// URL for workers that share no disk (Feast's "
        "file offline store reads it; credentials from the AWS configuration)",
    )
    offline_s3_endpoint: str | None = Field(
        None,
        description="the S3-compatible endpoint of offline_uri (MinIO, a local test "
        "endpoint), given to Feast's FileSources; unset for AWS itself",
    )

    @field_validator("offline_uri")
    @classmethod
    def _offline_uri_is_s3_or_local(cls, value: str | None) -> str | None:
        if value is not None and "://" in value and not value.startswith("s3://"):
            raise ValueError(
                f"store.offline_uri: a {value.split('://', 1)[0]}:// URL; Feast's file "
                "offline store reads local folders and s3:// URLs only"
            )
        return _check_storage_uri("store.offline_uri", value)

    uagg_window_hours: Hours = Field(24.0, description="the user aggregate's window of codes")
    uagg_ttl_hours: Hours = Field(24.0, description="the uagg view's read TTL")
    iagg_ttl_hours: Hours = Field(24.0, description="the iagg view's read TTL")
    unn_ttl_hours: Hours = Field(
        48.0, description="the unn view's read TTL, and the window of the user embeddings"
    )
    n_neighbors: int = Field(100, gt=0, description="neighbours per user in the unn view")
    nbr_strategy: Literal["top1", "weighted"] = Field(
        "top1",
        description="the nbr tier's code: the most similar neighbour's (top1) or the "
        "similarity-weighted mean (weighted)",
    )
    fetch_timeout_ms: Milliseconds = Field(200.0, description="bound on one fetch, incl. Redis")
    max_candidates: int = Field(
        5_000, gt=0, description="most items one fetch accepts (more is a ValueError)"
    )
    max_concurrent_fetches: int = Field(
        64, gt=0, description="fetches in flight at once; beyond, a fetch is shed as busy"
    )
    breaker_failures: int = Field(
        3, gt=0, description="consecutive failed fetches that open the circuit breaker"
    )
    breaker_cooldown_ms: Milliseconds = Field(
        1_000.0, description="how long an open breaker answers zeros before a probe"
    )
    miss_stream_maxlen: int = Field(
        100_000, gt=0, description="entries the namespace's miss stream keeps at most"
    )
    request_log_maxlen: int = Field(
        1_000_000, gt=0, description="entries (requests) the request-log stream keeps at most"
    )

    @property
    def uagg_window_seconds(self) -> int:
        return whole_seconds(self.uagg_window_hours, 3600)

    @property
    def uagg_ttl_seconds(self) -> int:
        return whole_seconds(self.uagg_ttl_hours, 3600)

    @property
    def iagg_ttl_seconds(self) -> int:
        return whole_seconds(self.iagg_ttl_hours, 3600)

    @property
    def unn_ttl_seconds(self) -> int:
        return whole_seconds(self.unn_ttl_hours, 3600)

    @model_validator(mode="after")
    def _redis_fits_its_type(self) -> StoreConfig:
        # An unusable connection string fails here, naming store.redis, rather than at the
        # first connection; ConnectionStringError never shows the password.
        if self.redis is not None:
            try:
                self.redis.check(self.redis_type)
            except ValueError as exc:  # the error's location is the section: name the setting
                raise ValueError(f"store.redis: {exc}") from None
        return self


class CycleConfig(Section):
    """The Airflow cycle: schedules, sharding and the verifier's retraining.

    The candidates DAG's schedule interval is ``selection.cadence_minutes``; each
    namespace's cycle state (request logs, ledgers, shards, codes, verifier publications,
    training runs, run records) lives under ``<state_uri>/namespaces/<namespace>``
    (:mod:`solaris.namespace`), where ``state_uri`` is ``artifacts_dir`` unless set.
    """

    state_uri: str | None = Field(
        None,
        description="where the cycle keeps its state: a local folder, or an fsspec URL "
        "(s3://bucket/solaris, gs://..., az://...) when the workers do not share a disk; the "
        "filesystem's package (s3fs, gcsfs, adlfs) must be installed and its credentials "
        "come from its own configuration (AWS_* variables, instance roles), never from "
        "here; default artifacts_dir",
    )

    start: AwareDatetime = Field(
        datetime(1997, 9, 20, tzinfo=UTC),
        description="start_date of every DAG (ISO 8601 with a UTC offset), parsed once into a "
        "datetime; the MovieLens-100K log starts then",
    )
    partitions: int = Field(
        1,
        ge=1,
        le=16_384,
        description="partitions of the users (solaris.store.partitions: contiguous ranges of "
        "the Redis Cluster slot of each user's {u:<id>} tag); the embedding shards and the "
        "enrichment's per-user work are split by partition, so a task holds one partition's "
        "rows; a multiple of the cluster's node count keeps a partition's writes on one node; "
        "the namespace records it at first use (<namespace>:partitions) and serving, the "
        "near-line embedder and every task refuse another count; `solaris namespace "
        "repartition NAME --partitions N` changes it, re-splitting what is in flight (a reset "
        "of the namespace clears it)",
    )
    shard_rows: int = Field(2_000, gt=0, description="pairs per mapped embedding task")
    select_requests: int = Field(
        20_000,
        gt=0,
        description="logged requests per mapped selection task: quiet partitions share a "
        "task, a busier one has its own (a partition is never split)",
    )
    enrich_rows: int = Field(
        2_000_000,
        gt=0,
        description="codes of the aggregates' window per mapped enrichment task: quiet "
        "partitions share a task, a busier one has its own (a partition is never split)",
    )
    max_mapped_tasks: int = Field(
        256,
        ge=1,
        le=100_000,
        description="the most mapped tasks one stage of one run starts (selection groups, "
        "embedding shards, enrichment groups): when an interval's rows need more units of "
        "select_requests, shard_rows or enrich_rows, the units grow until the stage fits; "
        "under Airflow the plan refuses a value above [core] max_map_length (1,024 by "
        "default), which Airflow would refuse at run time",
    )
    embed_retries: int = Field(3, ge=0, description="retries of a failed embedding task")
    retry_delay_seconds: Seconds = Field(30.0, description="first retry delay (doubles)")
    gpu_pool: str = Field("gpu", description="Airflow pool of the embedding tasks")
    gpu_queue: str = Field(
        "gpu",
        description="executor queue of the embedding tasks (the Celery workers started with "
        "--queues gpu run them; LocalExecutor ignores queues)",
    )
    clustering_cron: str = Field(
        "0 0 * * *", description="clustering DAG schedule (cron or an Airflow preset)"
    )
    neighbours_every_interval: bool = Field(
        True,
        description="the enrichment DAG rebuilds the neighbour table from the last "
        "store.unn_ttl_hours of codes before each neighbour fill, so users whose first codes "
        "are minutes old have neighbours (a daily table misses them); False: the fill uses "
        "the clustering DAG's newest table",
    )
    neighbour_index_hours: float = Field(
        24.0,
        ge=0,
        le=87_600,
        description="with neighbours_every_interval, the user KNN index is rebuilt over every "
        "user this often (and its neighbour lists with it); in between, each interval adds "
        "the users it has not indexed yet and queries only them; 0: rebuilt every interval",
    )
    incremental_windows: bool = Field(
        True,
        description="the enrichment carries its windows' sums from one interval to the next "
        "(an interval reads its own codes, those leaving a window and those it supersedes); "
        "False: every interval recomputes them from the window's codes",
    )
    training_cron: str = Field(
        "30 0 * * *", description="training DAG schedule (cron or an Airflow preset)"
    )
    maintenance_cron: str = Field(
        "15 3 * * *",
        description="maintenance DAG schedule (cron or an Airflow preset): prunes the cycle's "
        "state, Feast's offline rows and Airflow's metadata older than retention_days",
    )
    retention_days: Days = Field(
        45.0,
        description="what the maintenance DAG keeps: per-interval state files, run records, "
        "Feast's offline rows (whole dates) and Airflow's metadata rows younger than this; "
        "at least training_window_days plus the longest window the cycle reads (checked)",
    )
    wait_previous_minutes: Minutes = Field(
        60.0,
        description="how long a candidates run waits for the previous interval's embeddings "
        "and enrichment before it fails",
    )
    training_window_days: Days = Field(
        30.0, description="labelled impressions the retrained VM learns from"
    )
    val_share: float = Field(0.2, gt=0, lt=1, description="latest share held out to compare")
    dags_folder: Path = Field(Path("dags"), description="the project's DAG files")
    airflow_home: Path | None = Field(
        None,
        description="AIRFLOW_HOME of the demo's in-process DAG runs (SQLite metadata DB "
        "there); default artifacts_dir/airflow",
    )
    demo_days: Days = Field(
        2.0, description="test-period days the demo replays through Airflow DAG runs"
    )
    demo_cadence_minutes: Minutes = Field(
        60.0,
        description="refresh cadence of the demo's Airflow window (coarser than production "
        "so that the window needs fewer DAG runs)",
    )

    @property
    def retention_seconds(self) -> int:
        return whole_seconds(self.retention_days, 86_400)

    @property
    def neighbour_index_seconds(self) -> int:
        return round(self.neighbour_index_hours * 3600)

    @property
    def training_window_seconds(self) -> int:
        return whole_seconds(self.training_window_days, 86_400)

    @property
    def wait_previous_seconds(self) -> int:
        return whole_seconds(self.wait_previous_minutes, 60)

    @property
    def demo_seconds(self) -> int:
        return whole_seconds(self.demo_days, 86_400)

    @property
    def demo_cadence_seconds(self) -> int:
        return whole_seconds(self.demo_cadence_minutes, 60)

    @field_validator("state_uri")
    @classmethod
    def _state_uri_has_a_filesystem(cls, value: str | None) -> str | None:
        return _check_storage_uri("cycle.state_uri", value)

    @field_validator("start", mode="before")
    @classmethod
    def _start_is_aware_iso(cls, value: object) -> object:
        if not isinstance(value, str):
            return value  # a datetime: AwareDatetime refuses a naive one
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(
                f"cycle.start {value!r} is not an ISO 8601 time (e.g. '1997-09-20T00:00:00+00:00')"
            ) from None
        if parsed.tzinfo is None:
            raise ValueError(
                f"cycle.start {value!r} has no UTC offset, so it would be read in the process's "
                f"local time zone: add one, e.g. '{value}+00:00'"
            )
        return parsed

    @field_validator("clustering_cron", "training_cron", "maintenance_cron")
    @classmethod
    def _valid_schedule(cls, value: str) -> str:
        return _check_cron(value)


class SolarisConfig(BaseSettings):
    """Every setting SOLARIS reads. Build once, pass down."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=ENV_NESTED_DELIMITER,
        extra="forbid",
        frozen=True,
        allow_inf_nan=False,
    )

    namespace: str = Field(
        LIVE,
        pattern=NAME_PATTERN,
        description="the world this process works in: Feast project, Redis streams and "
        "cycle-state folder are named by it (solaris.namespace); replays and the live cycle "
        "use different ones",
    )
    replay: bool = Field(
        False,
        description="this namespace replays history from requests.source through the serving "
        "path (the demo, backfills); False: the requests come from serving's request log",
    )

    data: DataConfig = Field(default_factory=DataConfig)
    requests: RequestLogConfig = Field(default_factory=RequestLogConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    selection: SelectionConfig = Field(default_factory=SelectionConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    cycle: CycleConfig = Field(default_factory=CycleConfig)
    nearline: NearlineConfig = Field(default_factory=NearlineConfig)
    artifacts_dir: Path = Field(
        Path("artifacts"),
        description="models, the demo's request log and summary, and the cycle's state "
        "unless cycle.state_uri says otherwise",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="where the FM runs: auto is CUDA when present"
    )

    @property
    def read_back_seconds(self) -> int:
        """How far back the cycle reads its own state and Feast's offline rows: the training
        window plus the longest window of codes or views behind one training row (what
        ``cycle.retention_days`` must keep)."""
        store = self.store
        windows = (
            self.selection.ttl_seconds,
            store.uagg_window_seconds + store.uagg_ttl_seconds,
            store.iagg_ttl_seconds,
            store.unn_ttl_seconds,
        )
        return self.cycle.training_window_seconds + max(windows)

    @model_validator(mode="after")
    def _retention_keeps_what_is_read(self) -> SolarisConfig:
        if self.cycle.retention_seconds < self.read_back_seconds:
            raise ValueError(
                f"cycle.retention_days {self.cycle.retention_days:g} keeps less than the cycle "
                f"reads back, {self.read_back_seconds / 86_400:g} days (cycle."
                "training_window_days plus the longest of selection.ttl_hours, store."
                "uagg_window_hours + uagg_ttl_hours, iagg_ttl_hours and unn_ttl_hours): raise "
                "it, or shorten those"
            )
        return self

    def __init__(self, **values: Any) -> None:
        # pydantic-settings drops SOLARIS_ variables whose top-level name it does not know
        # (a typo'd SOLARIS_DEVICES is ignored silently), so every one is checked here.
        errors = _unknown_env_settings(type(self), os.environ)
        try:
            if errors:
                raise ValidationError.from_exception_data(
                    self.model_config.get("title") or type(self).__name__, errors, hide_input=True
                )
            super().__init__(**values)
        except ValidationError as exc:
            environ = dict(os.environ)
            message = describe_errors(exc, origin=lambda loc: _env_variable(loc, values, environ))
        except SettingsError as exc:  # a SOLARIS_ variable pydantic-settings could not decode
            message = _describe_settings_error(exc, os.environ)
        else:
            return
        # The file `load` read, if any (a file that is not a YAML mapping names itself).
        path = self.model_config.get("yaml_file")
        raise ConfigError(f"{message} (file: {path})" if path else message)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _YamlFile(settings_cls))

    @classmethod
    def load(cls, path: str | Path | None = None, **overrides: object) -> SolarisConfig:
        """Settings from ``path`` (or ``$SOLARIS_CONFIG``), the environment and overrides."""
        path = path or os.environ.get("SOLARIS_CONFIG")
        if path is None:
            return cls(**overrides)
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"SOLARIS config file not found: {path}")

        class _FromFile(cls):  # type: ignore[valid-type, misc]
            model_config = SettingsConfigDict(
                **{**cls.model_config, "yaml_file": path, "title": cls.__name__}
            )

        # A plain SolarisConfig again: two loads of one file must be equal (and hash alike),
        # since the per-process caches of adapters and stores are keyed by the settings.
        try:
            return cls.model_validate(_FromFile(**overrides).model_dump())
        except ValidationError as exc:
            raise ConfigError(describe_errors(exc, source=path)) from None


class _YamlFile(YamlConfigSettingsSource):
    """The YAML settings source, with a :class:`ConfigError` for a file that does not
    parse or does not hold a mapping, instead of yaml's exception or a bare ``ValueError``
    from the merge that expects one."""

    def _read_file(self, file_path: Any) -> dict[str, Any]:
        try:
            data = super()._read_file(file_path)
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
            problem = exc.problem or exc.context or type(exc).__name__
            raise ConfigError(
                f"SOLARIS config file {file_path} is not valid YAML{at}: {problem}"
            ) from None
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            raise ConfigError(f"SOLARIS config file {file_path} is not valid YAML: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError(
                f"SOLARIS config file {file_path} holds a YAML {type(data).__name__}, not a "
                "mapping of settings (section: {setting: value})"
            )
        return data


# Settings whose values never appear in an error message: they may hold a password.
# Settings whose values may hold a login (a URL's user:password), never echoed in errors.
_SECRET_PARTS = frozenset(
    {"redis", "password", "connection", "registry", "state_uri", "offline_uri"}
)


Loc = tuple[int | str, ...]


def redacted_settings(cfg: SolarisConfig) -> dict[str, Any]:
    """``cfg`` as JSON data with ``store.redis`` :func:`~solaris.connection.redacted` and
    the password of a SQL registry URL replaced by ``***``: what a summary or a report
    records of the settings."""
    data: dict[str, Any] = json.loads(cfg.model_dump_json())
    data["store"]["redis"] = redacted(data["store"].get("redis"))
    data["store"]["registry"] = _URL_PASSWORD.sub(r"\1***@", data["store"]["registry"])
    return data


# ``scheme://user:password@``: the password of a URL (the SQL registry's).
_URL_PASSWORD = re.compile(r"(://[^:/@\s]*:)[^@\s]*@")


def describe_errors(
    exc: ValidationError,
    source: Path | None = None,
    origin: Callable[[Loc], str | None] | None = None,
) -> str:
    """pydantic's errors as one message: each bad setting by its dotted name, what is wrong,
    the value given (unless it may hold a password: ``store.redis``, or a section holding it)
    and, where ``origin`` names one for the setting's location, the variable it came from."""
    where = f" in {source}" if source else ""
    lines = [f"invalid SOLARIS configuration{where} ({exc.error_count()} error(s)):"]
    for error in exc.errors(include_url=False):
        name = ".".join(str(part) for part in error["loc"]) or "(settings)"
        shown = ""
        if (
            "input" in error
            and not _SECRET_PARTS & {str(p) for p in error["loc"]}
            and not _holds_secret(error["input"])
        ):
            given = repr(error["input"])
            shown = f" (got {given[:80]}{'…' if len(given) > 80 else ''})"
        # An unknown variable's message names it already.
        variable = origin(error["loc"]) if origin and error["type"] != "unknown_setting" else None
        came = f" (from {variable})" if variable else ""
        lines.append(f"  {name}: {error['msg']}{shown}{came}")
    return "\n".join(lines)


def _holds_secret(value: Any) -> bool:
    """Whether ``value`` is a mapping (or a list) with a setting that may hold a password."""
    if isinstance(value, Mapping):
        return any(str(key) in _SECRET_PARTS or _holds_secret(item) for key, item in value.items())
    if isinstance(value, list | tuple):
        return any(_holds_secret(item) for item in value)
    return False


def _env_variable(loc: Loc, overrides: Mapping[str, Any], environ: Mapping[str, str]) -> str | None:
    """The ``SOLARIS_`` variable of ``environ`` the value at ``loc`` came from, if any.

    Keyword overrides win over the environment, which wins over the file: a location an
    override gives (the whole path, or a prefix of it whose value is not a mapping) came from
    no variable. Otherwise it came from the variable naming the longest prefix of ``loc``
    (``SOLARIS_SELECTION__SHARE``, or ``SOLARIS_SELECTION`` holding JSON), matched
    case-insensitively as pydantic-settings reads them.
    """
    node: Any = overrides
    for part in loc:
        if not isinstance(node, Mapping):
            return None
        if part not in node:
            break
        node = node[part]
    else:
        return None
    names = {var.upper(): var for var in environ}
    for end in range(len(loc), 0, -1):
        wanted = ENV_PREFIX + ENV_NESTED_DELIMITER.join(str(p) for p in loc[:end]).upper()
        if wanted in names and wanted not in NON_SETTING_ENV:
            return names[wanted]
    return None


def _describe_settings_error(exc: SettingsError, environ: Mapping[str, str]) -> str:
    """pydantic-settings' error for a variable it could not decode (JSON of a section or a
    list), naming the variables of that setting; never their values (a section may hold a
    password)."""
    match = re.search(r'field "(\w+)"', str(exc))
    cause = f": {exc.__cause__}" if exc.__cause__ else ""
    if match is None:
        return f"invalid SOLARIS configuration: {exc}{cause}"
    field = ENV_PREFIX + match.group(1).upper()
    variables = sorted(
        var
        for var in environ
        if var.upper() == field or var.upper().startswith(field + ENV_NESTED_DELIMITER)
    )
    return (
        f"invalid SOLARIS configuration: {match.group(1)} from "
        f"{', '.join(variables) or field} is not valid JSON{cause}"
    )


def _section_of(annotation: Any) -> type[BaseModel] | None:
    """The model class behind a field's annotation (``X`` or ``X | None``), if any."""
    for candidate in (annotation, *get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _setting_names(model: type[BaseModel], prefix: str = "") -> list[str]:
    names = []
    for name, field in model.model_fields.items():
        names.append(prefix + name)
        section = _section_of(field.annotation)
        if section is not None:
            names.extend(_setting_names(section, f"{prefix}{name}."))
    return names


def _unknown_env_settings(
    model: type[BaseModel], environ: Mapping[str, str]
) -> list[InitErrorDetails]:
    """An error per ``SOLARIS_`` variable of ``environ`` that names no setting of ``model``.

    Names are matched case-insensitively, as pydantic-settings reads them; the variables of
    :data:`NON_SETTING_ENV` are skipped. Each error's location is the setting's path.
    """
    errors: list[InitErrorDetails] = []
    for var in sorted(environ):
        upper = var.upper()
        if not upper.startswith(ENV_PREFIX) or upper in NON_SETTING_ENV:
            continue
        parts = upper[len(ENV_PREFIX) :].lower().split(ENV_NESTED_DELIMITER)
        section: type[BaseModel] | None = model
        for i, part in enumerate(parts):
            field = section.model_fields.get(part) if section is not None else None
            if field is None:
                break
            section = _section_of(field.annotation) if i < len(parts) - 1 else None
        else:
            continue
        setting = ".".join(parts)
        close = difflib.get_close_matches(setting, _setting_names(model), n=1)
        if close:
            env = env_variable(close[0])
            hint = f"did you mean {env} ({close[0]})?"
        else:
            hint = (
                "no such setting (list a variable that is not one in "
                "solaris.config.NON_SETTING_ENV)"
            )
        errors.append(
            InitErrorDetails(
                type=PydanticCustomError(
                    "unknown_setting",
                    "unknown setting {var} ({setting}): {hint}",
                    {"var": var, "setting": setting, "hint": hint},
                ),
                loc=tuple(parts),
                input=var,
            )
        )
    return errors
