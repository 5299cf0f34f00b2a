"""Where the Airflow cycle keeps its state, and the small file formats it uses.

Everything lives under the namespace's folder, ``<state root>/namespaces/<name>``
(:mod:`solaris.namespace`: the state root is ``cycle.state_uri``, a local folder or an
fsspec URL, by default ``artifacts_dir``; one folder a kind, one file an interval, named by
epoch seconds so that names sort by time)::

    request_log/<start>-<end>.parquet  the requests serving logged in that interval (drained)
    drained/<start>-<end>/<p>.json     the rows a partition's drain stored before it deleted them
    selections/<start>-<end>.parquet   the verifier's selection of one interval (the ledger)
    misses/<start>-<end>.parquet       miss-stream entries drained by that interval's run
    shards/<start>-<end>/<generation>/shard-K.parquet    one embeddings run's split of the ledger
    pair_embeddings/<start>-<end>/<generation>/shard-K.parquet  the codes its tasks computed
    pair_embeddings/<start>-<end>/_SUCCESS   the generation in force (written once all are in)
    neighbours/<as_of>.parquet         the clustering DAG's user-neighbour table
    training/<as_of>/                  the training DAG's set, candidate VM and metrics
    verifier/<as_of>.json              each VM the training DAG published, in force from as_of
    runs/<dag_id>/<key>.json           one record per DAG run, read by the SOLARIS UI page

Every file appears atomically (:mod:`solaris.files`: a rename on a local disk, one PUT on
an object store), so a retried or killed task never leaves half a file for the next one to
read, and no step needs a rename of a folder or a shared disk. An embeddings run writes an
interval's shards and codes into folders of its own generation and publishes them by
rewriting the interval's marker to name that generation, once every shard is in: readers
take an interval's codes only through its marker, so they read one generation's codes,
never a mix, and a rerun never hides the finished codes before their replacement is
complete. This module imports nothing heavy: the Airflow plugin reads run records through
it.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from solaris.errors import SolarisError
from solaris.files import ArgumentTypeError, StatePath, atomic_write_json, state_path
from solaris.namespace import Namespace

__all__ = [
    "INTERVAL_END",
    "INTERVAL_KEYS",
    "INTERVAL_START",
    "RUN_INPUT_FIGURES",
    "RUN_METRIC_FIGURES",
    "RUN_METRIC_GROUPS",
    "CycleLayout",
    "Interval",
    "LayoutError",
    "PublishedCodes",
    "describe_run",
    "read_all_run_records",
    "read_run_records",
    "run_metrics",
    "shard_coverage",
    "write_run_record",
]

log = logging.getLogger(__name__)

_INTERVAL = re.compile(r"^(\d+)-(\d+)$")
# An interval's keys in JSON (a run's conf, an asset event, a record, a task's unit).
INTERVAL_START = "interval_start"
INTERVAL_END = "interval_end"
INTERVAL_KEYS = (INTERVAL_START, INTERVAL_END)


class LayoutError(SolarisError, ValueError):
    """A malformed interval, generation or completion marker of the cycle's layout."""


@dataclass(frozen=True, order=True)
class Interval:
    """One scheduling interval ``[start, end)`` in epoch seconds."""

    start: int
    end: int

    def __post_init__(self) -> None:
        if not (isinstance(self.start, int) and isinstance(self.end, int)):
            raise ArgumentTypeError(f"interval bounds must be int epoch seconds, got {self!r}")
        if self.end <= self.start:
            raise LayoutError(f"interval end {self.end} must be after its start {self.start}")

    @property
    def key(self) -> str:
        return f"{self.start:011d}-{self.end:011d}"

    @classmethod
    def from_key(cls, key: str) -> Interval:
        match = _INTERVAL.fullmatch(key)
        if not match:
            raise LayoutError(f"not an interval key: {key!r}")
        return cls(int(match[1]), int(match[2]))

    def as_dict(self) -> dict[str, int]:
        """The interval as JSON data: the one spelling of its keys (:data:`INTERVAL_KEYS`)."""
        return {INTERVAL_START: self.start, INTERVAL_END: self.end}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Interval:
        """The interval :meth:`as_dict` wrote (a ``KeyError`` naming a missing bound)."""
        return cls(data[INTERVAL_START], data[INTERVAL_END])


@dataclass(frozen=True)
class PublishedCodes:
    """The codes in force for one interval: the generation its marker names (None for codes
    written before generations existed), their folder, and every shard file, in order.

    ``partitions`` is the partition count the plan split the pairs by and ``coverage`` the
    partitions ``(first, last)`` each shard holds (None: codes from before partitions, any
    shard may hold any user)."""

    generation: str | None
    folder: StatePath
    files: tuple[StatePath, ...]
    partitions: int | None = None
    coverage: tuple[tuple[int, int], ...] | None = None
    rows: tuple[int, ...] | None = None

    def files_of(self, partition: int, count: int) -> tuple[tuple[StatePath, ...], bool]:
        """The shard files holding partition ``partition`` of ``count``, and whether any of
        them holds other partitions' pairs too (the reader then keeps its own rows). Codes
        split by another partition count are all read, and filtered."""
        if self.coverage is None or self.partitions != count:
            return self.files, count > 1
        picked = [
            (path, first != last)
            for path, (first, last) in zip(self.files, self.coverage, strict=True)
            if first <= partition <= last
        ]
        return tuple(p for p, _ in picked), any(mixed for _, mixed in picked)


@dataclass(frozen=True)
class CycleLayout:
    """Paths of one namespace's cycle state, and of the models it reads."""

    namespace: Namespace

    @functools.cached_property
    def root(self) -> StatePath:
        """The namespace's cycle root, made once per layout (a path every other path of the
        layout is joined to: readers of a window ask for hundreds)."""
        return self.namespace.cycle_root

    @property
    def models_dir(self) -> Path:
        return self.namespace.models_dir

    def request_log(self, interval: Interval, partition: int | None = None) -> StatePath:
        """The requests serving logged in ``interval``, drained from the request stream:
        one file (one partition), or partition ``partition``'s file in the interval's
        folder (several)."""
        return self._per_interval("request_log", interval, partition)

    def selections(self, interval: Interval, partition: int | None = None) -> StatePath:
        """The verifier's selection (ledger) of ``interval``: one file, or partition
        ``partition``'s file in the interval's folder."""
        return self._per_interval("selections", interval, partition)

    def drained(self, interval: Interval, partition: int) -> StatePath:
        """The record of partition ``partition``'s drain of ``interval`` (JSON: the rows its
        ``request_log`` file held when its stream entries were deleted): a retry finding the
        file lost or short stops instead of selecting without those requests."""
        return self.root / "drained" / interval.key / f"{partition:05d}.json"

    def nearline(self, interval: Interval, partition: int | None = None) -> StatePath:
        """The pairs serving selected near-line in ``interval`` (``solaris nearline`` embeds
        them): a ledger the cycle skips but never embeds, laid out as :meth:`selections`."""
        return self._per_interval("nearline", interval, partition)

    def _per_interval(self, kind: str, interval: Interval, partition: int | None) -> StatePath:
        if partition is None:
            return self.root / kind / f"{interval.key}.parquet"
        return self.root / kind / interval.key / f"{partition:05d}.parquet"

    def interval_files(
        self, kind: str, interval: Interval, partition: int | None = None
    ) -> tuple[tuple[StatePath, ...], bool]:
        """The ``request_log`` or ``selections`` files of ``interval`` that hold partition
        ``partition`` (every file: None), and whether they hold other partitions' rows too
        (one file of the whole interval: the reader keeps its own rows)."""
        whole = self._per_interval(kind, interval, None)
        if whole.is_file():
            return (whole,), partition is not None
        folder = whole.parent / interval.key
        if partition is not None:
            mine = self._per_interval(kind, interval, partition)
            return ((mine,) if mine.is_file() else ()), False
        if not folder.is_dir():
            return (), False
        return tuple(sorted(folder.glob("[0-9]*.parquet"))), False

    def has_interval(self, kind: str, interval: Interval) -> bool:
        """Whether ``interval`` has its ``request_log`` or ``selections`` (a file or a
        folder of partitions' files)."""
        whole = self._per_interval(kind, interval, None)
        return whole.is_file() or (whole.parent / interval.key).is_dir()

    def misses(self, interval: Interval) -> StatePath:
        return self.root / "misses" / f"{interval.key}.parquet"

    def shards_dir(self, interval: Interval, generation: str) -> StatePath:
        """The ledger split of ``interval`` by embeddings run ``generation``."""
        return self.root / "shards" / interval.key / _checked(generation)

    def embeddings_dir(self, interval: Interval, generation: str) -> StatePath:
        """The codes of ``interval`` computed by embeddings run ``generation``."""
        return self.root / "pair_embeddings" / interval.key / _checked(generation)

    def shard(self, interval: Interval, index: int, generation: str) -> StatePath:
        return self.shards_dir(interval, generation) / f"shard-{index:04d}.parquet"

    def embeddings(self, interval: Interval, index: int, generation: str) -> StatePath:
        return self.embeddings_dir(interval, generation) / f"shard-{index:04d}.parquet"

    def plan(self, interval: Interval, generation: str) -> StatePath:
        """Embeddings run ``generation``'s plan of ``interval`` (its shard count), written
        after its shards: a generation without one is unfinished or being removed, and is
        never published."""
        return self.embeddings_dir(interval, generation) / "_PLAN.json"

    def embeddings_done(self, interval: Interval) -> StatePath:
        """The interval's marker, ``{"generation": ..., "shards": ...}``: written (one
        atomic write) by the embeddings run once every shard of its generation is in, and
        rewritten by a rerun's. Readers take an interval's codes only through it
        (:meth:`published_codes`), never a half-embedded interval or a mix of two runs."""
        return self.root / "pair_embeddings" / interval.key / "_SUCCESS"

    def published_codes(self, interval: Interval) -> PublishedCodes | None:
        """The codes in force for ``interval``, as its marker names them (None: no marker).

        An empty marker is one SOLARIS wrote before generations existed: its codes are the
        ``shard-*.parquet`` files of the interval's folder itself. Raises ``ValueError``
        naming the marker when it cannot be read.
        """
        marker = self.embeddings_done(interval)
        try:
            text = marker.read_text()
        except FileNotFoundError:
            return None
        if not text.strip():
            folder = marker.parent
            return PublishedCodes(None, folder, tuple(sorted(folder.glob("shard-*.parquet"))))
        try:
            payload = json.loads(text)
            generation, shards = _checked(payload["generation"]), payload["shards"]
            if not isinstance(shards, int) or isinstance(shards, bool) or shards < 0:
                raise LayoutError(f"shards {shards!r} is not a count")
            partitions, coverage = shard_coverage(payload, shards)
            rows = payload.get("rows")
            if rows is not None and (
                not isinstance(rows, list)
                or len(rows) != shards
                or not all(isinstance(n, int) and n >= 0 for n in rows)
            ):
                raise LayoutError(f"rows {rows!r} are not {shards} shard sizes")
        except (ValueError, KeyError, TypeError) as exc:
            raise LayoutError(f"{marker}: not a completion marker ({exc})") from exc
        files = tuple(self.embeddings(interval, k, generation) for k in range(shards))
        folder = self.embeddings_dir(interval, generation)
        sizes = None if rows is None else tuple(rows)
        return PublishedCodes(generation, folder, files, partitions, coverage, sizes)

    def published_generation(self, interval: Interval) -> str | None:
        """The generation whose codes are in force for ``interval`` (None: none, or codes
        written before generations existed)."""
        codes = self.published_codes(interval)
        return None if codes is None else codes.generation

    def codes_dir(self, interval: Interval) -> StatePath | None:
        """The folder of the codes in force for ``interval`` (None: not embedded yet)."""
        codes = self.published_codes(interval)
        return None if codes is None else codes.folder

    def generations(self, interval: Interval) -> list[str]:
        """Every generation with a folder of shards or codes for ``interval``."""
        found: set[str] = set()
        for kind in ("shards", "pair_embeddings"):
            folder = self.root / kind / interval.key
            if folder.is_dir():
                found.update(
                    entry.name
                    for entry in folder.iterdir()
                    if _GENERATION.fullmatch(entry.name) and entry.is_dir()
                )
        return sorted(found)

    def staged_generations(self, interval: Interval) -> list[str]:
        """The generations of embeddings runs that planned ``interval`` (their plan is in)
        and are not its published codes: what a publish may swap in."""
        published = self.published_generation(interval)
        return [
            g
            for g in self.generations(interval)
            if g != published and self.plan(interval, g).is_file()
        ]

    def item_partials(self, as_of: int, partition: int) -> StatePath:
        """Partition ``partition``'s ``iagg`` partial sums as of ``as_of`` (the enrichment's
        mapped aggregates tasks write them, its reduction reads them)."""
        return self.root / "iagg_partials" / f"{as_of:011d}" / f"{partition:05d}.parquet"

    def user_embeddings(self, as_of: int, partition: int) -> StatePath:
        """Partition ``partition``'s user embeddings as of ``as_of`` (the neighbour index
        is built from every partition's)."""
        return self.root / "user_embeddings" / f"{as_of:011d}" / f"{partition:05d}.parquet"

    def fill_codes(self, as_of: int, partition: int) -> StatePath:
        """Partition ``partition``'s codes fresh at ``as_of``, sorted by user, for every
        partition's neighbour fill (:func:`~solaris.data.schemas.write_fill_codes`: the
        enrichment's mapped aggregates tasks write them, the fill tasks look codes up in
        them)."""
        return self.root / "fill_codes" / f"{as_of:011d}" / f"{partition:05d}.arrow"

    def window_state(self, as_of: int, partition: int) -> StatePath:
        """Partition ``partition``'s window sums as of ``as_of``
        (:mod:`~solaris.orchestration.window_state`: the next interval advances them)."""
        return self.root / "window_state" / f"{as_of:011d}" / f"{partition:05d}.npz"

    def window_codes(self, end: int, partition: int) -> StatePath:
        """Interval ``end``'s codes of partition ``partition``, one per pair, sorted by
        (user, item) (:func:`~solaris.data.schemas.write_fill_codes`' format)."""
        return self.root / "window_codes" / f"{end:011d}" / f"{partition:05d}.arrow"

    def neighbour_index(self, as_of: int) -> StatePath:
        """The user KNN index built as of ``as_of`` over every partition's users
        (:class:`~solaris.pipeline.neighbors.UserIndex`, one blob), queried per partition."""
        return self.root / "neighbour_index" / f"{as_of:011d}.npz"

    def neighbour_index_built(self, as_of: int) -> StatePath:
        """When the index kept as of ``as_of`` was built over every user, and how many
        users it holds (JSON beside the blob: between builds each interval adds users)."""
        return self.root / "neighbour_index" / f"{as_of:011d}.json"

    def neighbour_lists(self, built_at: int, partition: int) -> StatePath:
        """Partition ``partition``'s neighbour lists from the index built at ``built_at``
        (its users' ``unn`` rows, kept so that the intervals until the next build query
        only the users added since)."""
        return self.root / "neighbour_lists" / f"{built_at:011d}" / f"{partition:05d}.parquet"

    def neighbours(self, as_of: int) -> StatePath:
        return self.root / "neighbours" / f"{as_of:011d}.parquet"

    def training(self, as_of: int) -> StatePath:
        return self.root / "training" / f"{as_of:011d}"

    def verifier_publication(self, as_of: int) -> StatePath:
        """The training run of ``as_of`` published its VM as the verifier from then on."""
        return self.root / "verifier" / f"{as_of:011d}.json"

    def verifier_in_force(self, as_of: int) -> StatePath | None:
        """The newest publication at or before ``as_of`` (None: the VM trained with the FM).

        Looked up by time, not "the latest", so a backfill or a rerun of an old interval
        never scores with a VM trained on labels from after it.
        """
        return _newest_at_or_before(self.root / "verifier", ".json", as_of)

    def run_record(self, dag_id: str, key: str) -> StatePath:
        return self.root / "runs" / dag_id / f"{key}.json"

    @property
    def live_marker(self) -> StatePath:
        """Written with the namespace's first run record on live traffic and kept until the
        namespace is reset: later replays or a corrupt record cannot hide it."""
        return self.root / "live.json"

    def live_run_record(self) -> StatePath | None:
        """The evidence that this namespace holds live state whatever its name, or None:
        its live marker (:attr:`live_marker`), else the newest run record of some DAG that
        says its run served live traffic (``"replay": false``; state written before the
        marker existed)."""
        if self.live_marker.is_file():
            return self.live_marker
        runs = self.root / "runs"
        for folder in sorted(p for p in runs.iterdir() if p.is_dir()) if runs.is_dir() else ():
            newest = max(folder.glob("*.json"), key=lambda p: p.name, default=None)
            if newest is None:
                continue
            try:
                record = json.loads(newest.read_text())
            except (OSError, ValueError):
                continue
            if isinstance(record, dict) and record.get("replay") is False:
                return newest
        return None

    # -- listing ----------------------------------------------------------------------------

    def intervals(self, kind: str, *, ending_after: int, ending_by: int) -> list[Interval]:
        """Intervals of ``kind`` (``request_log``, ``selections``, ``pair_embeddings``) whose
        end is in ``(ending_after, ending_by]``, oldest first."""
        folder = self.root / kind
        if not folder.is_dir():
            return []
        found = []
        for entry in folder.iterdir():
            name = entry.name.removesuffix(".parquet").removesuffix(".json")
            if entry.name.startswith(".") or not _INTERVAL.fullmatch(name):
                continue
            interval = Interval.from_key(name)
            if ending_after < interval.end <= ending_by:
                found.append(interval)
        return sorted(found)

    def recorded_intervals(self, dag_id: str, *, ending_by: int) -> list[Interval]:
        """The intervals ending at or before ``ending_by`` whose ``dag_id`` run finished (its
        run record is written last), oldest first."""
        return self.intervals(f"runs/{dag_id}", ending_after=-1, ending_by=ending_by)

    def embedded_intervals(self, *, ending_after: int, ending_by: int) -> list[Interval]:
        """The completely embedded intervals (marker written) ending in
        ``(ending_after, ending_by]``: what readers of the codes may use."""
        return [
            i
            for i in self.intervals(
                "pair_embeddings", ending_after=ending_after, ending_by=ending_by
            )
            if self.embeddings_done(i).is_file()
        ]

    def latest_neighbours(self, as_of: int) -> StatePath | None:
        """The newest neighbour table built at or before ``as_of``."""
        return _newest_at_or_before(self.root / "neighbours", ".parquet", as_of)


_GENERATION = re.compile(r"^[0-9a-f]{6,32}$")


def shard_coverage(
    payload: Mapping[str, Any], shards: int
) -> tuple[int | None, tuple[tuple[int, int], ...] | None]:
    """The ``partitions`` and per-shard ``coverage`` of a plan or marker (both None when it
    predates partitions); ``ValueError`` when they are present but inconsistent."""
    if "coverage" not in payload:
        return None, None
    partitions, coverage = payload["partitions"], payload["coverage"]
    if not isinstance(partitions, int) or isinstance(partitions, bool) or partitions < 1:
        raise LayoutError(f"partitions {partitions!r} is not a count")
    if not isinstance(coverage, list) or len(coverage) != shards:
        raise LayoutError(f"coverage must list {shards} (first, last) partitions")
    ranges = []
    for entry in coverage:
        first, last = entry  # a 2-list of ints
        if not (
            isinstance(first, int) and isinstance(last, int) and 0 <= first <= last < partitions
        ):
            raise LayoutError(f"coverage entry {entry!r} is not a partition range")
        ranges.append((first, last))
    return partitions, tuple(ranges)


def _checked(generation: object) -> str:
    """``generation`` if it is one (6 to 32 lower-case hex digits), else ``ValueError``."""
    if not isinstance(generation, str) or not _GENERATION.fullmatch(generation):
        raise LayoutError(f"not a generation: {generation!r} (6 to 32 lower-case hex digits)")
    return generation


def _newest_at_or_before(folder: StatePath, suffix: str, as_of: int) -> StatePath | None:
    """The file ``<t>{suffix}`` of ``folder`` with the largest epoch ``t <= as_of``."""
    if not folder.is_dir():
        return None
    times = [
        int(p.stem) for p in folder.glob(f"*{suffix}") if p.stem.isdigit() and int(p.stem) <= as_of
    ]
    return folder / f"{max(times):011d}{suffix}" if times else None


def write_run_record(
    layout: CycleLayout,
    dag_id: str,
    key: str,
    record: dict[str, Any],
    wrote: tuple[StatePath, ...] = (),
) -> StatePath:
    """The figures of one DAG run, for the SOLARIS page (written by the task, not the UI),
    also sent to Airflow's metrics (:func:`run_metrics`) when this process runs Airflow and
    to the task's log as one line (:func:`describe_run`, with the files in ``wrote``)."""
    path = atomic_write_json(
        layout.run_record(dag_id, key), {"dag_id": dag_id, "key": key, **record}
    )
    if record.get("replay") is False and not layout.live_marker.is_file():
        atomic_write_json(layout.live_marker, {"first_live_run": str(path)})
    _emit_run_metrics(layout.namespace.name, dag_id, record)
    log.info("%s", describe_run(layout.namespace.name, dag_id, key, record, (*wrote, path)))
    return path


# The figures of a run record that count what the run read, in this order.
RUN_INPUT_FIGURES = ("requests", "candidates", "misses_drained", "codes_read")


def describe_run(
    namespace: str,
    dag_id: str,
    key: str,
    record: Mapping[str, Any],
    wrote: tuple[StatePath, ...],
) -> str:
    """What a run did, for its task log: rows in, rows out, seconds, where it wrote."""

    def count(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    taken = [f"{name} {record[name]:,}" for name in RUN_INPUT_FIGURES if count(record.get(name))]
    made = [f"selected {record['selected']:,}"] if count(record.get("selected")) else []
    made += [
        f"{view} {rows:,} rows (online store and offline files)"
        for view, rows in (record.get("rows_written") or {}).items()
        if count(rows)
    ]
    seconds = record.get("seconds")
    took = f"{seconds:.2f} s" if isinstance(seconds, int | float) else "? s"
    return (
        f"{dag_id} {key} in namespace {namespace}: in {', '.join(taken) or 'nothing'}; "
        f"out {', '.join(made) or 'nothing'}; {took}; wrote {', '.join(map(str, wrote))}"
    )


# The run-record figures sent as gauges ``solaris.<dag_id>.<figure>``; the nested ones as
# ``solaris.<dag_id>.<group>.<key>`` (rows_written also as its total). ``seconds`` is also
# the timer ``solaris.<dag_id>.duration``.
RUN_METRIC_FIGURES = (
    "seconds",
    "requests",
    "candidates",
    "selected",
    "fm_passes",
    "misses_drained",
    "nearline_selected",
    "nearline_taken_back",
    "freshness_s",
    "pairs_per_second",
    "labelled",
    "fetch_failures",
)
RUN_METRIC_GROUPS = ("rows_written", "coverage", "serving")


def run_metrics(record: Mapping[str, Any]) -> dict[str, float]:
    """The gauges of one run record, by name below ``solaris.<dag_id>.`` (numbers only:
    absent, ``None``, boolean and non-finite figures are left out)."""

    def number(value: Any) -> float | None:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return float(value) if ok and math.isfinite(value) else None

    out = {k: v for k in RUN_METRIC_FIGURES if (v := number(record.get(k))) is not None}
    for group in RUN_METRIC_GROUPS:
        values = record.get(group)
        if not isinstance(values, Mapping):
            continue
        figures = {k: n for k, v in values.items() if (n := number(v)) is not None}
        out.update({f"{group}.{k}": v for k, v in figures.items()})
        if group == "rows_written" and figures:
            out[group] = sum(figures.values())
    return out


def _emit_run_metrics(namespace: str, dag_id: str, record: Mapping[str, Any]) -> None:
    """Send :func:`run_metrics` through Airflow's metrics (StatsD or OpenTelemetry, as its
    ``[metrics]`` settings say), tagged with the namespace. Only in a process that already
    runs Airflow (a task, ``dag.test()``): importing it elsewhere would cost seconds and
    set up an Airflow home. Metrics are best effort: a failure is logged, never raised."""
    if "airflow.sdk" not in sys.modules:
        return
    try:
        from airflow.sdk.observability import stats
    except ImportError:
        return
    prefix, tags = f"solaris.{dag_id}", {"namespace": namespace}
    try:
        gauges = run_metrics(record)
        for name, value in gauges.items():
            stats.gauge(f"{prefix}.{name}", value, tags=tags)
        if gauges.get("seconds", -1.0) >= 0:
            stats.timing(f"{prefix}.duration", timedelta(seconds=gauges["seconds"]), tags=tags)
    except Exception as exc:  # a metrics backend never fails the run that wrote its record
        log.warning("run metrics of %s not sent (%s: %s)", dag_id, type(exc).__name__, exc)


def read_run_records(root: StatePath | str) -> dict[str, list[dict[str, Any]]]:
    """Every run record under ``root`` (a namespace's folder), by DAG id, newest first.

    A record that cannot be parsed is reported as such rather than dropped silently.
    """
    runs = state_path(root) / "runs"
    out: dict[str, list[dict[str, Any]]] = {}
    if not runs.is_dir():
        return out
    for folder in sorted(p for p in runs.iterdir() if p.is_dir()):
        records = []
        for path in sorted(folder.glob("*.json"), reverse=True):
            try:
                records.append(json.loads(path.read_text()))
            except (OSError, ValueError, RecursionError) as exc:  # nested past the stack too
                records.append({"dag_id": folder.name, "key": path.stem, "error": str(exc)})
        out[folder.name] = records
    return out


def read_all_run_records(state_root: StatePath | str) -> dict[str, list[dict[str, Any]]]:
    """The run records of every namespace under ``state_root`` (``cycle.state_uri``, by
    default ``artifacts_dir``), by DAG id, newest first; each record names its
    ``namespace`` (replays and the live cycle are told apart)."""
    folder = state_path(state_root) / "namespaces"
    out: dict[str, list[dict[str, Any]]] = {}
    if not folder.is_dir():
        return out
    for root in sorted(p for p in folder.iterdir() if p.is_dir()):
        for dag_id, records in read_run_records(root).items():
            for record in records:
                if isinstance(record, dict):
                    record.setdefault("namespace", root.name)
            out.setdefault(dag_id, []).extend(records)
    for records in out.values():
        records.sort(
            key=lambda r: str(r.get("key", "")) if isinstance(r, dict) else "", reverse=True
        )
    return out
