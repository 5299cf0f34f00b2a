"""Namespaces: the worlds SOLARIS runs in, which never share state.

A replay of history (the demo, ``solaris replay``, a backfill of old intervals) and the live
cycle on wall-clock time must never read or overwrite each other's rows: a live run that
drained a replay's misses, or wrote 2026-stamped codes over 1998 ones, would corrupt both.
So every piece of state a cycle keeps is named by its namespace, and nothing else:

=====================  ==================================================================
Feast project          ``<name>`` (every Redis key of the online store is ``<name>:...``)
miss stream            ``<name>:misses``
request-log stream     ``<name>:requests``
embed stream           ``<name>:embed`` (the near-line path, ``solaris nearline``)
serving metrics        ``<name>:serving_metrics``
live traffic marker    ``<name>:live`` (serving logged a request on live traffic)
partition count        ``<name>:partitions`` (``cycle.partitions``, recorded at first use)
re-split in progress   ``<name>:repartition`` (``solaris namespace repartition``)
cycle state            ``<state root>/namespaces/<name>/`` (ledgers, codes, run records)
offline feature rows   ``<offline root>/<name>/<view>/``
=====================  ==================================================================

The namespace is ``SolarisConfig.namespace`` (default ``live``); a DAG run can name another
in its conf (``{"namespace": "replay_1998", ...}``), and the asset events it emits carry it
to the downstream runs. Models (``<artifacts_dir>/models``) are inputs shared by all, kept
in versions that are never rewritten; each namespace reads the version pinned for it
(``<artifacts_dir>/models/pins/<name>.json``, :mod:`solaris.model_versions`), changed only by
a promote.

The state root is ``cycle.state_uri``, a local folder or an fsspec URL (object storage,
for workers that share no disk); by default it is ``artifacts_dir``. The offline root is
``store.offline_uri`` (a folder or an ``s3://`` URL, which the views' FileSources name), by
default ``<repo_path>/data/offline``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from solaris.errors import SolarisError
from solaris.files import StatePath, state_path
from solaris.model_versions import models_folder

if TYPE_CHECKING:
    from solaris.config import SolarisConfig
    from solaris.store.partitions import Partitioning

__all__ = [
    "LIVE",
    "NAME_PATTERN",
    "OFFLINE_FOLDER",
    "Namespace",
    "NamespaceError",
    "check_name",
]

# A Feast project name, and a prefix that cannot run into another namespace's keys.
NAME_PATTERN = r"^[a-z][a-z0-9_]{0,39}$"
_NAME = re.compile(NAME_PATTERN)
# The default namespace (SolarisConfig.namespace): the live cycle on wall-clock time.
LIVE = "live"
# The offline root inside the feature repo when store.offline_uri is unset.
OFFLINE_FOLDER = "data/offline"


class NamespaceError(SolarisError, ValueError):
    """A namespace name that breaks the naming rule (NAME_PATTERN)."""


def check_name(name: object) -> str:
    """``name`` if it is a namespace name (:data:`NAME_PATTERN`); a :class:`NamespaceError`
    saying the rule otherwise. The one check: the settings, the DAG conf's ``Param`` and the
    CLI's options use the pattern or this function."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise NamespaceError(
            f"{name!r} is not a namespace name: lower-case letters, digits and '_', starting "
            f"with a letter, at most 40 ({NAME_PATTERN})"
        )
    return name


@dataclass(frozen=True)
class Namespace:
    """The names and folders of one namespace (see the module docstring)."""

    name: str
    artifacts_dir: Path
    repo_path: Path
    state_uri: str | None = None
    offline_uri: str | None = None

    def __post_init__(self) -> None:
        check_name(self.name)

    @classmethod
    def of(cls, cfg: SolarisConfig) -> Namespace:
        return cls(
            cfg.namespace,
            Path(cfg.artifacts_dir),
            Path(cfg.store.repo_path),
            cfg.cycle.state_uri,
            cfg.store.offline_uri,
        )

    @property
    def project(self) -> str:
        """The Feast project: the online store's keys are ``<project>:<view>:...``."""
        return self.name

    @property
    def key_prefix(self) -> str:
        """Every Redis key of the namespace starts with it."""
        return f"{self.name}:"

    @property
    def miss_stream(self) -> str:
        return f"{self.name}:misses"

    @property
    def request_stream(self) -> str:
        return f"{self.name}:requests"

    def request_stream_of(self, partition: int, partitions: Partitioning) -> str:
        """Partition ``partition``'s request-log stream: :attr:`request_stream` with one
        partition, else ``<name>:requests:{u:<anchor>}``, in the partition's Redis Cluster
        slots (:meth:`~solaris.store.partitions.Partitioning.anchor`), so serving's appends
        and the partition's drain go to the node of its users' keys."""
        if partitions.count == 1:
            return self.request_stream
        return f"{self.request_stream}:{{u:{partitions.anchor(partition)}}}"

    def request_streams(self, partitions: Partitioning) -> list[str]:
        """Every partition's request-log stream, in partition order."""
        return [self.request_stream_of(k, partitions) for k in range(partitions.count)]

    @property
    def embed_stream(self) -> str:
        """The near-line path's stream of pairs serving selected
        (:mod:`solaris.serving.nearline`), read by ``solaris nearline``."""
        return f"{self.name}:embed"

    @property
    def nearline_status(self) -> str:
        """A hash of each near-line embedder's last status (JSON per consumer), for the page."""
        return f"{self.name}:nearline_status"

    @property
    def live_key(self) -> str:
        """Set (no expiry) by the first request a serving process logs on live traffic
        (``replay: false``): Redis holds live state of this namespace even before a cycle
        run records one (:func:`solaris.orchestration.resources.live_state`). A reset of
        the namespace deletes it with the rest."""
        return f"{self.name}:live"

    @property
    def partitions_key(self) -> str:
        """The namespace's partition count (``cycle.partitions``), recorded by the first
        process that uses the namespace and checked by every other
        (:func:`solaris.store.partitions.record_partition_count`). A reset of the namespace
        deletes it with the rest."""
        return f"{self.name}:partitions"

    @property
    def repartition_key(self) -> str:
        """Set while ``solaris namespace repartition`` re-splits the namespace into another
        partition count (JSON ``{"from": P, "to": N}``), deleted once it is done: every
        process checking the count is refused meanwhile, and a rerun of the command after a
        crash finishes the same re-split (:mod:`solaris.orchestration.repartition`)."""
        return f"{self.name}:repartition"

    @property
    def serving_metrics_stream(self) -> str:
        """Serving's metric windows (:mod:`solaris.serving.metrics`), read by the candidates
        DAG into its run record."""
        return f"{self.name}:serving_metrics"

    @property
    def state_root(self) -> StatePath:
        """Every namespace's state lies below it: ``state_uri``, else ``artifacts_dir``."""
        return state_path(self.state_uri or self.artifacts_dir)

    @property
    def cycle_root(self) -> StatePath:
        return self.state_root / "namespaces" / self.name

    @property
    def _offline_base(self) -> str:
        """``store.offline_uri``, else the repo's offline folder (relative to the repo)."""
        return (self.offline_uri or OFFLINE_FOLDER).rstrip("/")

    @property
    def offline_root(self) -> StatePath:
        """Feast's offline parquet of this namespace, one folder per view below it."""
        base = self._offline_base
        if "://" in base or Path(base).is_absolute():
            return state_path(base) / self.name
        return self.repo_path / base / self.name  # relative to the repo, as Feast reads it

    def offline_source(self, view: str) -> str:
        """The path the FileSource of ``view`` names: relative to the feature repo by
        default (the repo can move), below ``offline_uri`` when that is set."""
        return f"{self._offline_base}/{self.name}/{view}"

    @property
    def models_root(self) -> Path:
        """The models folder every namespace shares: its versions and their pins
        (:mod:`solaris.model_versions`)."""
        return self.artifacts_dir / "models"

    @property
    def models_dir(self) -> Path:
        """The trained models this namespace reads: the version pinned for it (the older
        flat layout without a pin), resolved here for every reader
        (:func:`~solaris.model_versions.models_folder`, whose errors it raises)."""
        return models_folder(self.models_root, self.name)

    def describe(self) -> str:
        """One line for logs and the demo's output."""
        return (
            f"namespace {self.name}: Feast project {self.project}, streams "
            f"{self.miss_stream} and {self.request_stream}, state in {self.cycle_root}"
        )
