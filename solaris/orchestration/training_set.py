"""The training-set DAG's task (``solaris_training_set``): one manual run writes one training set.

Its task, :func:`write_task`, reads the run's conf and calls
:func:`solaris.serving.training_export.write_training_set`, as ``solaris training-set``
does. The conf::

    {"namespace": "live", "impressions": "s3://bucket/impressions/2026-12/",
     "out": "s3://bucket/training/2026-12/", "fm_version": null, "chunk_rows": 50000,
     "overwrite": false}

``impressions`` and ``out`` are required; ``namespace`` defaults to the settings' one,
``fm_version`` to the namespace's current codes, ``chunk_rows`` to
:data:`~solaris.serving.training_export.DEFAULT_CHUNK_ROWS`. Unknown keys and values of the
wrong type are :class:`~solaris.orchestration.resources.CycleInputError`\\ s naming the key,
raised before anything is read or written. The task returns the training set's record
(``_training_set.json``'s fields and the seconds), a small dict.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from solaris.config import SolarisConfig
from solaris.errors import shown
from solaris.namespace import NamespaceError, check_name
from solaris.orchestration.resources import CycleInputError

__all__ = ["CONF_KEYS", "conf_params", "write_task"]

log = logging.getLogger(__name__)

CONF_KEYS = frozenset({"namespace", "impressions", "out", "fm_version", "chunk_rows", "overwrite"})


def conf_params() -> dict[str, Any]:
    """The conf as Airflow ``Param``s (checked when a run is triggered); what a schema
    cannot say (a required key left null) is checked by :func:`write_task`."""
    from airflow.sdk import Param

    from solaris.namespace import NAME_PATTERN

    def uri(description: str) -> Param:
        return Param(
            None, type=["null", "string"], minLength=1, maxLength=4096, description=description
        )

    return {
        "namespace": Param(
            None,
            type=["null", "string"],
            pattern=NAME_PATTERN,
            description="the namespace whose features are read; default: the settings'",
        ),
        "impressions": uri("parquet file or folder: user_id, item_id, ts (required)"),
        "out": uri("folder or URL prefix to write to (required)"),
        "fm_version": Param(
            None,
            type=["null", "string"],
            description="the FM version the VM is trained for; default: the namespace's codes",
        ),
        "chunk_rows": Param(
            None,
            type=["null", "integer"],
            minimum=1,
            description="impressions per point-in-time join; default: 50,000",
        ),
        "overwrite": Param(
            False, type="boolean", description="replace the training set out already holds"
        ),
    }


def _string(conf: Mapping[str, object], key: str, *, required: bool) -> str | None:
    value = conf.get(key)
    if value is None:
        if required:
            raise CycleInputError(f"conf {key}: required (a parquet file, folder or URL)")
        return None
    if not isinstance(value, str) or not value:
        raise CycleInputError(f"conf {key}: expected a non-empty string, got {shown(value)}")
    return value


def _settings(conf: Mapping[str, object]) -> SolarisConfig:
    namespace = conf.get("namespace")
    deployment = SolarisConfig.load()
    if namespace is None:
        return deployment
    try:
        check_name(namespace)
    except NamespaceError as exc:
        raise CycleInputError(f"conf namespace: {exc}") from None
    return SolarisConfig.model_validate({**deployment.model_dump(), "namespace": namespace})


def write_task(params: Mapping[str, object] | None) -> dict[str, Any]:
    """The ``write_training_set`` task: the conf checked, the training set written."""
    conf = dict(params or {})
    unknown = sorted(set(conf) - CONF_KEYS)
    if unknown:
        raise CycleInputError(f"unknown conf keys {unknown}; this DAG takes {sorted(CONF_KEYS)}")
    impressions = _string(conf, "impressions", required=True)
    out = _string(conf, "out", required=True)
    fm_version = _string(conf, "fm_version", required=False)
    # The DAG file imports this module: what reads data is imported by the task only.
    from solaris.serving.training_export import DEFAULT_CHUNK_ROWS, write_training_set

    chunk_rows = conf.get("chunk_rows")
    chunk_rows = DEFAULT_CHUNK_ROWS if chunk_rows is None else chunk_rows
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, int) or chunk_rows < 1:
        raise CycleInputError(f"conf chunk_rows: expected an integer >= 1, got {shown(chunk_rows)}")
    overwrite = conf.get("overwrite")
    overwrite = False if overwrite is None else overwrite
    if not isinstance(overwrite, bool):
        raise CycleInputError(f"conf overwrite: expected true or false, got {shown(overwrite)}")
    assert impressions is not None and out is not None
    cfg = _settings(conf)
    written = write_training_set(
        cfg,
        impressions,
        out,
        fm_version=fm_version,
        chunk_rows=chunk_rows,
        overwrite=overwrite,
    )
    log.info(
        "wrote %d training rows of namespace %s in %d files to %s (%.1f s)",
        written.rows,
        written.namespace,
        len(written.files),
        out,
        written.seconds,
    )
    return {**written.record(), "seconds": round(written.seconds, 3)}
