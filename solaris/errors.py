"""The root of SOLARIS's exceptions: catch :class:`SolarisError` to catch any of them.

Every error the project raises on purpose derives from :class:`SolarisError` and keeps the
built-in base it had (``ValueError`` for bad input, ``RuntimeError`` for a failed step,
``TypeError`` for a wrong type, ``KeyError`` for a name that is not there), so
``except ValueError`` in existing callers still works::

    SolarisError
    ├── ConfigError            (ValueError)    solaris.config: a bad setting, file or variable
    ├── NamespaceError         (ValueError)    solaris.namespace: a bad namespace name
    ├── ConnectionStringError  (ValueError)    solaris.connection: a bad Redis string
    ├── TimeInputError         (ValueError)    solaris.times: a time a person wrote, refused
    ├── SchemaError            (ValueError)    solaris.data.schemas: a table breaks its contract
    ├── SyntheticSpecError     (ValueError)    solaris.data.synthetic: a spec the generator refuses
    ├── SelectionError         (ValueError)    solaris.selection: bad selection input
    ├── NeighborsError         (ValueError)    solaris.pipeline.neighbors: bad neighbour input
    ├── AggregateError         (ValueError)    solaris.pipeline.aggregate: bad aggregate input
    ├── PartitionError         (ValueError)    solaris.store.partitions: a bad partition count
    │   ├── PartitionCountError                 another count than the namespace's
    │   └── RepartitionError                    solaris.orchestration.repartition: a re-split
    ├── CycleInputError        (RuntimeError)  solaris.orchestration.resources: DAG conf, inputs
    │   ├── LiveNamespaceError                  a reset or replay aimed at live state
    │   └── PlanError                           mapped tasks Airflow would refuse
    ├── LayoutError            (ValueError)    solaris.orchestration.layout: interval, marker
    ├── HandoffError           (ValueError)    solaris.orchestration.handoff: a task's unit
    ├── CodesError             (RuntimeError)  solaris.manifest: autoencoder artifacts
    ├── FmVersionError         (ValueError)    solaris.manifest: an fm_version not a short token
    ├── ModelVersionError      (LookupError)   solaris.model_versions: no such model version
    ├── ModelPinError          (RuntimeError)  solaris.model_versions: a live namespace's pin
    ├── ModelInputError        (ValueError)    solaris.models: a model's argument or input
    ├── DeviceError            (RuntimeError)  solaris.models.device: no such torch device
    ├── CheckpointError        (ValueError)    solaris.models.checkpoints: a checkpoint refused
    ├── EvaluationError        (ValueError)    solaris.evaluation.metrics: metric, replay input
    ├── ArtifactPathError      (ValueError)    solaris.files: a path leaving the artifacts root
    ├── ArgumentTypeError      (TypeError)     solaris.files: an argument of the wrong type
    ├── AdapterError           (RuntimeError)  solaris.adapters: a user's model or traffic
    ├── ContractError          (ValueError)    solaris.store.contract: a view or time refused
    ├── ViewLookupError        (KeyError)      solaris.store.contract: no view or field so named
    ├── InvalidWriteError      (ValueError)    solaris.store.contract: a bad online write
    ├── ViewDefinitionError    (ValueError)    solaris.store.online: a view the store rejects
    ├── FeatureRequestError    (ValueError)    solaris.store.reads: a bad online read
    ├── FeatureStoreError      (RuntimeError)  solaris.store.feast_store: Feast/Redis failures
    ├── LocalRedisError        (RuntimeError)  solaris.store.local_redis: no local Redis
    ├── FetchArgumentError     (ValueError)    solaris.serving.client: bad fetch arguments
    ├── TierInputError         (ValueError)    solaris.serving.tiers: bad tier-assembly input
    ├── TrainingSetError       (ValueError)    solaris.serving.training_export: an out refused
    ├── RequestError           (ValueError)    solaris.serving.http: a request refused (400)
    │   └── UnsupportedMediaType                solaris.serving.http: a body's media type (415)
    ├── StreamError            (RuntimeError)  solaris.serving.streams: a stream key of another type
    ├── StreamEntryError       (ValueError)    solaris.serving.streams: a bad stream entry
    ├── ServingMetricsError    (ValueError)    solaris.serving.metrics: a bad metrics argument
    ├── MetricsPublishError    (RuntimeError)  solaris.serving.metrics: a second publish stream
    ├── FilterError            (ValueError)    solaris.dashboard.filters: a page's query parameter
    ├── AirflowRunError        (RuntimeError)  solaris.local.airflow: a local DAG run failed
    ├── ServicesError          (RuntimeError)  solaris.local.scheduler: Airflow services, runs
    ├── DagsFolderError        (FileNotFoundError)  solaris.local.demo: no DAGs folder
    └── MovieLensFormatError, DataFetchError   solaris.examples.movielens: the example's data

Each class is defined beside the code that raises it; this module holds only the root and
the configuration error (raised by :meth:`solaris.config.SolarisConfig.load`). A test
(``tests/unit/test_errors.py``) fails on any ``raise`` of a built-in exception class in
``solaris/`` outside the example; it allows only ``NotImplementedError``, ``AttributeError``
from a ``__getattr__``, and ``ValueError`` or ``AssertionError`` in the pydantic validators
of :mod:`solaris.config` and the helpers they call (pydantic turns only those into its
validation errors).
"""

from __future__ import annotations

__all__ = ["ConfigError", "SolarisError", "shown"]


class SolarisError(Exception):
    """Any error SOLARIS raises on purpose."""


class ConfigError(SolarisError, ValueError):
    """The configuration is invalid: the message names each bad setting and where it came
    from (file, environment variable or override)."""


def shown(value: object, limit: int = 60) -> str:
    """``value`` as an error message quotes it: its repr, cut to ``limit`` characters (a
    conf or an event may hold a whole list, or 5,000 digits)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."
