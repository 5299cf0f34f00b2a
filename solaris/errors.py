"""The root of SOLARIS's exceptions: catch :class:`SolarisError` to catch any of them.

Every error the project raises on purpose derives from :class:`SolarisError` and keeps the
built-in base it had (``ValueError`` for bad input, ``RuntimeError`` for a failed step), so
``except ValueError`` in existing callers still works::

    SolarisError
    ├── ConfigError            (ValueError)    solaris.config: a bad setting, file or variable
    ├── ConnectionStringError  (ValueError)    solaris.store.connection: a bad Redis string
    ├── SchemaError            (ValueError)    solaris.data.schemas: a table breaks its contract
    ├── SelectionError         (ValueError)    solaris.selection: bad selection input
    ├── NeighborsError         (ValueError)    solaris.pipeline.neighbors: bad neighbour input
    ├── PartitionError         (ValueError)    solaris.store.partitions: a bad partition count
    ├── CycleInputError        (RuntimeError)  solaris.orchestration.resources: DAG conf, inputs
    │   └── LiveNamespaceError                  a reset or replay aimed at live state
    ├── CodesError             (RuntimeError)  solaris.pipeline.codes: autoencoder artifacts
    ├── CheckpointError        (ValueError)    solaris.models.training: a checkpoint refused
    ├── ArtifactPathError      (ValueError)    solaris.files: a path leaving the artifacts root
    ├── AdapterError           (RuntimeError)  solaris.adapters: a user's model or traffic
    ├── InvalidWriteError      (ValueError)    solaris.store.contract: a bad online write
    ├── ViewDefinitionError    (ValueError)    solaris.store.online: a view the store rejects
    ├── FeatureRequestError    (ValueError)    solaris.store.online: a bad online read
    ├── FetchArgumentError     (ValueError)    solaris.serving.client: bad fetch arguments
    ├── FeatureStoreError      (RuntimeError)  solaris.store.feast_store: Feast/Redis failures
    ├── StreamError            (RuntimeError)  solaris.serving.streams: a stream key of another type
    ├── AirflowRunError        (RuntimeError)  solaris.local.airflow: a local DAG run failed
    ├── ServicesError          (RuntimeError)  solaris.local.scheduler: Airflow services, runs
    └── MovieLensFormatError, DataFetchError   solaris.examples.movielens: the example's data

Each class is defined beside the code that raises it; this module holds only the root and
the configuration error (raised by :meth:`solaris.config.SolarisConfig.load`).
"""

from __future__ import annotations

__all__ = ["ConfigError", "SolarisError"]


class SolarisError(Exception):
    """Any error SOLARIS raises on purpose."""


class ConfigError(SolarisError, ValueError):
    """The configuration is invalid: the message names each bad setting and where it came
    from (file, environment variable or override)."""
