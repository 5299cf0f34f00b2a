"""Warm task processes: the cycle's libraries imported once per worker, not once per task.

Airflow 3 runs every task in a process forked from a long-lived worker process (the
LocalExecutor's workers, forked from the scheduler; a Celery worker's pool processes, forked
from the worker). A task of the cycle needs numpy, pandas, pyarrow, torch and Feast, which
take seconds to import (Feast alone ~3.5 s here) and far longer than the task's own work. So
the worker imports them before it forks, and every task process starts with them loaded:

- LocalExecutor (``make airflow``): ``AIRFLOW__CORE__EXECUTOR=`` :class:`WarmLocalExecutor`,
  a LocalExecutor that calls :func:`preload` before it forks its workers;
- CeleryExecutor (``make airflow-celery``): ``AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS=``
  ``solaris.orchestration.warm.CELERY_CONFIG``, Airflow's own Celery settings with
  :func:`preload` connected to Celery's ``worker_init`` signal (sent in the worker's main
  process, before its pool forks).

Only imports are preloaded: a module import starts no thread that a fork would orphan, while
models and Feast registries are per namespace and change while the worker lives.
"""

from __future__ import annotations

import importlib
import logging
import time
from typing import Any

from airflow.executors.local_executor import LocalExecutor

# CELERY_CONFIG is built on first access (the module __getattr__ below).
__all__ = ["CELERY_CONFIG", "PRELOADED_MODULES", "WarmLocalExecutor", "preload"]  # noqa: F822

log = logging.getLogger(__name__)

# What the cycle's task bodies import (solaris.orchestration imports them lazily, so that
# parsing a DAG file stays cheap).
PRELOADED_MODULES = (
    "numpy",
    "pandas",
    "pyarrow.parquet",
    "pyarrow.compute",
    "torch",
    "feast",
    "feast.infra.offline_stores.dask",  # the file offline store: what opening a store imports
    "solaris.store.online",
    "solaris.store.feast_store",
    "solaris.pipeline.materialize",
    "solaris.pipeline.select",
    "solaris.pipeline.embed",
    "solaris.pipeline.enrich",
    "solaris.serving.client",
    "solaris.adapters",
)


def preload(modules: tuple[str, ...] = PRELOADED_MODULES) -> float:
    """Import ``modules``; returns the seconds it took. A module that fails to import is
    logged and skipped: the task that needs it will raise the error itself."""
    began = time.perf_counter()
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # the task will meet the same error, with its context
            log.warning("preload: cannot import %s: %s", name, exc)
    seconds = time.perf_counter() - began
    log.info("preloaded %d modules for the SOLARIS tasks in %.1f s", len(modules), seconds)
    return seconds


class WarmLocalExecutor(LocalExecutor):
    """Airflow's LocalExecutor whose worker processes fork with the cycle's libraries
    already imported (:func:`preload` runs once, in the scheduler, before they start)."""

    def start(self) -> None:
        preload()
        super().start()


def _celery_config() -> dict[str, Any]:
    from airflow.providers.celery.executors.default_celery import DEFAULT_CELERY_CONFIG
    from celery.signals import worker_init

    worker_init.connect(_preload_worker, weak=False)
    return dict(DEFAULT_CELERY_CONFIG)


def _preload_worker(**_: object) -> None:
    preload()


def __getattr__(name: str) -> Any:
    # Built on first access: the scheduler and the workers read it when they create the
    # Celery app; the LocalExecutor never needs the Celery provider.
    if name == "CELERY_CONFIG":
        return _celery_config()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
