"""What the cycle's tasks load: the request log, the models, the feature store.

Each task loads what it needs itself (an Airflow task runs in a fresh process on any
worker), from the paths in :class:`~solaris.orchestration.layout.CycleLayout`.
"""

from __future__ import annotations

import functools
import json
import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from solaris.config import SolarisConfig
from solaris.data.schemas import SchemaError, validate_candidates
from solaris.orchestration.layout import CycleLayout, Interval

if TYPE_CHECKING:
    from feast import FeatureStore

    from solaris.models.features import FeatureContext
    from solaris.models.vm import VerticalModel


class CycleInputError(RuntimeError):
    """An input of the cycle (request log, models, Redis) is missing or unusable."""


def _require(path: Path, what: str) -> Path:
    if not path.exists():
        raise CycleInputError(
            f"{what} not found at {path}: run `solaris demo` (or `make demo`) once to build "
            "the request log and the models, or point SOLARIS_ARTIFACTS_DIR at them"
        )
    return path


def read_requests(layout: CycleLayout, start: int, end: int) -> pd.DataFrame:
    """Candidate rows of the request log with ``start <= ts < end`` (validated)."""
    path = _require(layout.request_log, "request log")
    try:
        dataset = ds.dataset(path, format="parquet")
        table = dataset.to_table(filter=(ds.field("ts") >= start) & (ds.field("ts") < end))
    except Exception as exc:  # pyarrow raises several types; name the file either way
        raise SchemaError(str(path), None, f"cannot read parquet: {exc}") from exc
    return validate_candidates(table, str(path)).to_pandas()


def models_split(layout: CycleLayout) -> dict:
    """``split.json`` beside the checkpoints: the time split and the model versions."""
    path = _require(layout.models_dir / "split.json", "trained models")
    return json.loads(path.read_text())


def fm_version(layout: CycleLayout) -> str:
    return str(models_split(layout)["fm_version"])


# A worker process runs one task, but ``dag.test()`` (the demo, the tests) runs a whole
# window of DAG runs in one process: these caches keep it from reloading MovieLens and
# re-applying the Feast definitions for every task. The key is the settings they read.
@functools.lru_cache(maxsize=4)
def _movielens(data_json: str):
    from solaris.config import DataConfig
    from solaris.data.fetch import fetch_movielens
    from solaris.data.movielens import MovieLens

    return MovieLens.load(fetch_movielens(DataConfig.model_validate_json(data_json)))


@functools.lru_cache(maxsize=4)
def _feature_context(data_json: str, model_json: str) -> FeatureContext:
    from solaris.config import ModelConfig
    from solaris.models.features import FeatureContext

    model = ModelConfig.model_validate_json(model_json)
    return FeatureContext.from_config(_movielens(data_json), model)


def feature_context(cfg: SolarisConfig) -> FeatureContext:
    return _feature_context(cfg.data.model_dump_json(), cfg.model.model_dump_json())


def ratings(cfg: SolarisConfig) -> pd.DataFrame:
    return _movielens(cfg.data.model_dump_json()).ratings


@dataclass(frozen=True)
class Verifier:
    vm: VerticalModel
    version: str
    path: Path


def current_verifier(layout: CycleLayout, *, as_of: int) -> Verifier:
    """The VM in force at ``as_of``: the newest the training DAG published at or before it,
    else the one trained with the FM."""
    from solaris.models.training import load_checkpoint
    from solaris.models.vm import VerticalModel

    path = layout.models_dir / "vm.pt"
    publication = layout.verifier_in_force(as_of)
    if publication is not None:
        path = Path(json.loads(publication.read_text())["path"])
    vm, version = load_checkpoint(_require(path, "verifier checkpoint"), VerticalModel)
    return Verifier(vm, version, path)


def cycle_redis(cfg: SolarisConfig) -> str:
    """The Feast Redis connection string the tasks share. An embedded Redis would die with
    the task that started it, so the cycle needs a running one."""
    from solaris.store.connection import answers

    connection = cfg.store.redis or "localhost:6379"
    if not answers(connection, redis_type=cfg.store.redis_type):
        hint = "" if cfg.store.redis else " (SOLARIS_STORE__REDIS is unset)"
        raise CycleInputError(f"Redis at {connection} does not answer{hint}")
    return connection


def feature_store(cfg: SolarisConfig, redis: str) -> FeatureStore:
    """The project's FeatureStore with its definitions applied (idempotent)."""
    return _feature_store(cfg.model_dump_json(), redis)


@functools.lru_cache(maxsize=4)
def _feature_store(cfg_json: str, redis: str) -> FeatureStore:
    from solaris.store.feast_store import apply_definitions, open_feature_store

    cfg = SolarisConfig.model_validate_json(cfg_json)
    store = open_feature_store(cfg, redis)
    apply_definitions(store, cfg)
    return store


def interval_of(cfg: SolarisConfig, start: int | None, end: int) -> Interval:
    """The run's interval; a zero-length data interval (a cron-triggered run, as the daily
    DAGs have) means the cadence interval that ends at ``end``."""
    cadence = round(cfg.selection.cadence_minutes * 60)
    if start is None or start >= end:
        start = end - cadence
    return Interval(int(start), int(end))


def _epoch(value: object, name: str) -> int:
    """Epoch seconds from an int, an ISO 8601 string or a datetime (a run's conf or context)."""
    if isinstance(value, bool):
        raise ValueError(f"{name} must be epoch seconds or ISO 8601, got {value!r}")
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, datetime):
        return int(value.timestamp())
    if isinstance(value, str):
        try:
            return (
                int(value)
                if value.lstrip("-").isdigit()
                else int(datetime.fromisoformat(value).timestamp())
            )
        except ValueError as exc:
            raise ValueError(f"{name} must be epoch seconds or ISO 8601, got {value!r}") from exc
    # pendulum and Airflow's own datetime types
    if hasattr(value, "timestamp"):
        return int(value.timestamp())
    raise ValueError(f"{name} must be epoch seconds or ISO 8601, got {value!r}")


def run_interval(
    cfg: SolarisConfig,
    params: Mapping[str, object] | None,
    data_interval_start: object,
    data_interval_end: object,
) -> Interval:
    """The interval a run works on: ``interval_start``/``interval_end`` from the run's conf
    (manual runs, tests, the demo) else its data interval. Never the wall clock."""
    params = params or {}
    end = params.get("interval_end")
    start = params.get("interval_start")
    if end is None:
        if data_interval_end is None:
            raise CycleInputError("the run has neither interval_end nor a data interval")
        end, start = data_interval_end, data_interval_start
    end_s = _epoch(end, "interval_end")
    start_s = None if start is None else _epoch(start, "interval_start")
    return interval_of(cfg, start_s, end_s)


def flatten_intervals(extras: Sequence[Mapping[str, object]]) -> list[dict[str, object]]:
    """The ``interval_start``/``interval_end`` of each asset-event extra; an extra for several
    intervals lists them under ``intervals``."""
    flat = []
    for extra in extras:
        for item in extra.get("intervals") or [extra]:  # type: ignore[union-attr]
            if item.get("interval_end") is not None:
                flat.append(
                    {"interval_start": item["interval_start"], "interval_end": item["interval_end"]}
                )
    return flat


def intervals_from(
    events: Sequence[Mapping[str, object]], params: Mapping[str, object] | None
) -> list[Interval]:
    """The intervals a downstream run covers: from the extras of the asset events that
    triggered it (the scheduler may merge several into one run), else from its conf."""
    params = params or {}
    sources: Sequence[Mapping[str, object]] = events
    if params.get("intervals"):
        sources = params["intervals"]  # type: ignore[assignment]
    elif params.get("interval_end") is not None:
        sources = [params]
    found = set()
    for extra in sources:
        if extra.get("interval_end") is None:
            continue  # an event without an interval (e.g. a manual asset event)
        found.add(
            Interval(
                _epoch(extra["interval_start"], "interval_start"),
                _epoch(extra["interval_end"], "interval_end"),
            )
        )
    if not found:
        raise CycleInputError(
            "no interval to work on: the run was not triggered by a candidates asset event "
            "and its conf has no interval_start/interval_end (or intervals)"
        )
    return sorted(found)


def write_parquet(frame: pd.DataFrame, path: Path) -> Path:
    """A pandas frame as parquet, atomically (a hidden temp file, then ``os.replace``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
    try:
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def read_parquet(path: Path, columns: Sequence[str] | None = None) -> pd.DataFrame:
    try:
        return pq.read_table(path, columns=list(columns) if columns else None).to_pandas()
    except Exception as exc:
        raise CycleInputError(f"cannot read the cycle file {path}: {exc}") from exc


def on_cadence_grid(interval: Interval, cadence_s: int, *, snap: bool) -> Interval:
    """``interval`` as one interval of the cadence grid (epoch-aligned, ``cadence_s`` long).

    Selections of overlapping intervals would select the same requests twice, so the
    candidates DAG works on grid intervals only. With ``snap`` (a run's own data interval,
    e.g. a manual run's ``[run_after - cadence, run_after)``) the interval becomes the last
    whole grid interval ending at or before its end; an interval someone named explicitly
    (conf, asset event) must already be on the grid.
    """
    if interval.start % cadence_s == 0 and interval.end - interval.start == cadence_s:
        return interval
    if not snap:
        end = interval.end // cadence_s * cadence_s
        raise CycleInputError(
            f"interval [{interval.start}, {interval.end}) is not on the {cadence_s} s cadence "
            f"grid: name an interval whose start is a multiple of {cadence_s} and whose "
            f"length is {cadence_s}, e.g. [{end - cadence_s}, {end})"
        )
    end = interval.end // cadence_s * cadence_s
    return Interval(end - cadence_s, end)
