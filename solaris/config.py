"""The one SOLARIS settings object.

Values come, highest precedence first, from keyword overrides, environment variables
(``SOLARIS_`` prefix, ``__`` between nested names, e.g. ``SOLARIS_SELECTION__SHARE=0.1``),
a YAML file (``SolarisConfig.load(path)`` or ``SOLARIS_CONFIG=path``), then the defaults
below. The object is built once at the edge (CLI, DAG task) and passed down explicitly.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "solaris"


class DataConfig(BaseModel):
    """Where MovieLens-100K is obtained from and cached (never inside the repository)."""

    cache_dir: Path = Field(default_factory=_default_cache_dir)
    recbole_version: str = "1.2.1"


class RequestLogConfig(BaseModel):
    """How ratings become ranking requests with retrieval candidates."""

    bucket_seconds: int = Field(60, gt=0, description="one request per user per bucket")
    retrieval_k: int = Field(200, gt=0, description="retrieval candidates per request")
    popularity_window_days: float = Field(14.0, gt=0)
    cooccurrence_weight: float = Field(
        1.0, ge=0, description="weight of history co-occurrence against trailing popularity"
    )
    cooccurrence_history: int = Field(20, gt=0, description="recent items used for co-occurrence")
    recurrence_window_hours: float = Field(6.0, gt=0)


class ModelConfig(BaseModel):
    """Sizes of the FM, the autoencoder and the VM."""

    embed_dim: int = Field(16, gt=0)
    history_len: int = Field(50, gt=0, description="FM sequence length (items strictly before t)")
    kg_entities_per_item: int = Field(32, gt=0)
    kg_buckets: int = Field(20_000, gt=0, description="hash buckets for KG entity ids")
    cross_layers: int = Field(2, ge=0)
    shared_dim: int = Field(128, gt=0, description="width of the FM's last shared layer h")
    z_dim: int = Field(32, gt=0, description="autoencoder code size d")
    vm_hidden: int = Field(64, gt=0)
    tasks: tuple[str, ...] = ("like", "love")  # rating>=4, rating==5


class TrainConfig(BaseModel):
    """Time-split training with early stopping."""

    seed: int = 0
    train_share: float = Field(0.8, gt=0, lt=1)
    val_share: float = Field(0.1, gt=0, lt=1)
    vm_window_share: float = Field(
        0.3, gt=0, le=1, description="the VM sees only the last share of the training window"
    )
    batch_size: int = Field(1024, gt=0)
    lr: float = Field(2e-3, gt=0)
    weight_decay: float = Field(1e-5, ge=0)
    max_epochs: int = Field(20, gt=0)
    patience: int = Field(2, ge=0)
    ae_epochs: int = Field(30, gt=0)
    vm_tier_coverage: float = Field(
        0.4, ge=0, le=1, description="feature-dropout keep rate for each tier during VM training"
    )

    @model_validator(mode="after")
    def _shares_leave_a_test_period(self) -> TrainConfig:
        if self.train_share + self.val_share >= 1:
            raise ValueError("train_share + val_share must leave a test period (< 1)")
        return self


class SelectionConfig(BaseModel):
    """Verifier selection, cache freshness and the refresh cadence."""

    share: float = Field(0.2, gt=0, le=1, description="share of each request's candidates")
    ttl_hours: float = Field(6.0, gt=0)
    cadence_minutes: float = Field(
        15.0, ge=1 / 60, description="candidates DAG schedule interval (at least 1 s)"
    )


class StoreConfig(BaseModel):
    """Feast feature store on Redis: connection, registry, read TTLs and serving bounds."""

    redis: str | None = Field(
        None,
        description="Feast Redis connection string 'host:port,db=N,password=...,ssl=true'; "
        "unset: use localhost:6379 if it answers, else start an embedded Redis (demo only)",
    )
    redis_type: Literal["redis", "redis_cluster"] = Field(
        "redis", description="redis_cluster: every host:port of `redis` is a start-up node"
    )
    project: str = Field("solaris", pattern=r"^[a-z][a-z0-9_]*$")
    repo_path: Path = Path("feature_repo")
    registry: str = Field(
        "data/registry.db",
        description="file path (relative to repo_path) or a postgresql:// URL (SQL registry)",
    )
    uagg_window_hours: float = Field(24.0, gt=0)
    uagg_ttl_hours: float = Field(24.0, gt=0)
    iagg_ttl_hours: float = Field(24.0, gt=0)
    unn_ttl_hours: float = Field(48.0, gt=0)
    n_neighbors: int = Field(100, gt=0)
    nbr_strategy: Literal["top1", "weighted"] = "top1"
    fetch_timeout_ms: float = Field(200.0, gt=0, description="bound on one fetch, incl. Redis")
    max_candidates: int = Field(
        5_000, gt=0, description="most items one fetch accepts (more is a ValueError)"
    )
    max_concurrent_fetches: int = Field(
        64, gt=0, description="fetches in flight at once; beyond, a fetch is shed as busy"
    )
    breaker_failures: int = Field(
        3, gt=0, description="consecutive failed fetches that open the circuit breaker"
    )
    breaker_cooldown_ms: float = Field(
        1_000.0, gt=0, description="how long an open breaker answers zeros before a probe"
    )
    miss_stream: str = "solaris:misses"
    miss_stream_maxlen: int = Field(100_000, gt=0)


class CycleConfig(BaseModel):
    """The Airflow cycle: schedules, sharding and the verifier's retraining.

    The candidates DAG's schedule interval is ``selection.cadence_minutes``; the cycle's
    state (selection ledger, shards, run records) lives under ``artifacts_dir/cycle``.
    """

    start: str = Field(
        "1997-09-20T00:00:00+00:00",
        description="start_date of every DAG (ISO 8601); the MovieLens-100K log starts then",
    )
    shard_rows: int = Field(2_000, gt=0, description="pairs per mapped embedding task")
    embed_retries: int = Field(3, ge=0)
    retry_delay_seconds: float = Field(30.0, gt=0, description="first retry delay (doubles)")
    gpu_pool: str = Field("gpu", description="Airflow pool of the embedding tasks")
    clustering_cron: str = "0 0 * * *"
    training_cron: str = "30 0 * * *"
    training_window_days: float = Field(
        30.0, gt=0, description="labelled impressions the retrained VM learns from"
    )
    val_share: float = Field(0.2, gt=0, lt=1, description="latest share held out to compare")
    dags_folder: Path = Field(Path("dags"), description="the project's DAG files")
    airflow_home: Path | None = Field(
        None,
        description="AIRFLOW_HOME of the demo's in-process DAG runs (SQLite metadata DB "
        "there); default artifacts_dir/airflow",
    )
    demo_days: float = Field(
        2.0, gt=0, description="test-period days the demo replays through Airflow DAG runs"
    )
    demo_cadence_minutes: float = Field(
        60.0,
        ge=1 / 60,
        description="refresh cadence of the demo's Airflow window (coarser than production "
        "so that the window needs fewer DAG runs)",
    )
    measure_coverage: bool = Field(
        True,
        description="read each interval's labelled impressions back through SolarisFeatures "
        "at their own times (replays and backfills; production reads its serving logs)",
    )


class SolarisConfig(BaseSettings):
    """Every setting SOLARIS reads. Build once, pass down."""

    model_config = SettingsConfigDict(
        env_prefix="SOLARIS_", env_nested_delimiter="__", extra="forbid", frozen=True
    )

    data: DataConfig = Field(default_factory=DataConfig)
    requests: RequestLogConfig = Field(default_factory=RequestLogConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    selection: SelectionConfig = Field(default_factory=SelectionConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    cycle: CycleConfig = Field(default_factory=CycleConfig)
    artifacts_dir: Path = Path("artifacts")
    device: Literal["auto", "cpu", "cuda"] = "auto"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, YamlConfigSettingsSource(settings_cls))

    @classmethod
    def load(cls, path: str | Path | None = None, **overrides: object) -> SolarisConfig:
        """Settings from ``path`` (or ``$SOLARIS_CONFIG``), the environment and overrides."""
        path = path or os.environ.get("SOLARIS_CONFIG")
        if path is None:
            return cls(**overrides)
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"SOLARIS config file not found: {path}")

        class _FromFile(cls):  # type: ignore[valid-type, misc]
            model_config = SettingsConfigDict(**{**cls.model_config, "yaml_file": path})

        return _FromFile(**overrides)
