"""Warm task processes: what the workers import before they fork, and how they are told to.

The executors themselves run in the Airflow integration tests (``make airflow``'s launcher,
the Celery workers); here, the pieces: :func:`preload` and the Celery settings object.
"""

from __future__ import annotations

import logging
import sys

import pytest

from solaris.orchestration import warm


def test_preload_imports_each_module_and_skips_one_that_fails(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sys.modules.pop("colorsys", None)
    with caplog.at_level(logging.INFO, logger=warm.__name__):
        seconds = warm.preload(("colorsys", "solaris_no_such_module"))

    assert "colorsys" in sys.modules
    assert seconds >= 0
    assert "cannot import solaris_no_such_module" in caplog.text
    assert "preloaded 2 modules" in caplog.text


def test_preloaded_modules_are_what_the_cycle_tasks_import() -> None:
    assert {"torch", "feast", "pandas", "pyarrow.parquet"} <= set(warm.PRELOADED_MODULES)
    assert all(not m.startswith("airflow") for m in warm.PRELOADED_MODULES)


def test_the_celery_config_is_airflows_with_preload_on_worker_init() -> None:
    from airflow.providers.celery.executors.default_celery import DEFAULT_CELERY_CONFIG
    from celery.signals import worker_init

    config = warm.CELERY_CONFIG

    assert config == DEFAULT_CELERY_CONFIG
    assert warm._preload_worker in [receiver for _, receiver in worker_init.receivers]


def test_the_warm_local_executor_is_airflows_local_executor() -> None:
    from airflow.executors.local_executor import LocalExecutor

    assert issubclass(warm.WarmLocalExecutor, LocalExecutor)
    assert warm.WarmLocalExecutor.start is not LocalExecutor.start


def test_an_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NO_SUCH"):
        _ = warm.NO_SUCH
