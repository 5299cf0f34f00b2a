"""What every task does first, once: its settings, its namespace and its intervals.

A task's edge is :func:`task_run`. It takes what Airflow hands the task (the run's conf as
``params``, its data interval, the asset events that triggered it), builds the
:class:`~solaris.config.SolarisConfig` once, in the namespace the run names, and returns a
:class:`TaskRun` that the task's work receives. Nothing below it re-reads the environment.

**Namespace.** A run's conf may name one (``{"namespace": "replay_1998", "replay": true}``);
an asset-triggered run takes the namespace of the events that triggered it (they must agree);
otherwise the configured one (``SOLARIS_NAMESPACE``, default ``live``). Every asset event a
task emits carries its namespace, so a replay's downstream runs stay in the replay. A run
that replays (``"replay": true`` in its conf or its events) into a namespace holding live
state (:func:`~solaris.orchestration.resources.live_state`: ``live``, the settings' own
namespace when they are not a replay's, one whose cycle ran live) is refused before any
work, with no override.

**Time.** A run's "now" is its interval, never the wall clock: the interval its conf names
(``interval_start``/``interval_end``, or ``intervals``), the intervals its triggering asset
events carry, else its own data interval. So a backfill replays history.

**Conf.** A time is whole epoch seconds (an int, a whole float or a string of ASCII digits)
or ISO 8601 with a zone, in ``[0, MAX_EPOCH_S)`` (1970 to 2286, what the online store
records): :func:`solaris.times.epoch_of`, the rule a command's time options follow too.
Unknown keys (also inside ``intervals``), a naive ISO time (which would take the
worker's local zone), NaN, infinities, booleans, fractions of a second, an end at or before
its start, ``interval_start`` without ``interval_end`` (or both with ``intervals``), an
``intervals`` that is not a non-empty list of objects, a ``replay`` that is not a JSON
boolean, a ``namespace`` that is not a valid name, a conf that is not an object, and
intervals off the cadence grid are errors that name the key (and the list entry). A
triggering asset event's intervals, namespace and replay flag are checked the same way, and
its errors say ``asset event``.

Nothing here imports Airflow: asset events are read through duck typing (any mapping of
asset → list of objects with an ``extra`` dict), so it is tested without a scheduler.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from solaris.config import SolarisConfig
from solaris.errors import shown
from solaris.namespace import Namespace, NamespaceError, check_name
from solaris.orchestration.handoff import Scope, Unit
from solaris.orchestration.layout import (
    INTERVAL_END,
    INTERVAL_KEYS,
    INTERVAL_START,
    CycleLayout,
    Interval,
)
from solaris.orchestration.resources import (
    CycleInputError,
    check_partition_count,
    refuse_live,
)
from solaris.times import MAX_EPOCH_S, TimeInputError, epoch_of

__all__ = [
    "ASSETS",
    "CANDIDATES",
    "CONF_KEYS",
    "ITEM_AGGREGATES",
    "MAX_RUN_INTERVALS",
    "MAX_RUN_SPAN_S",
    "NEIGHBOUR_FILL",
    "PAIR_EMBEDDINGS",
    "REQUEST_LOG",
    "USER_AGGREGATES",
    "USER_NEIGHBOURS",
    "VERIFIER",
    "CycleInputError",
    "TaskRun",
    "combine_extras",
    "conf_params",
    "cron_times",
    "emit",
    "event_extras",
    "finish_run",
    "mapped_results",
    "on_cadence_grid",
    "settings",
    "task_run",
    "task_runs",
    "unit_run",
]

log = logging.getLogger(__name__)

# Asset URIs of the cycle; the DAG files wrap them in ``airflow.sdk.Asset``.
REQUEST_LOG = "solaris://request_log"
CANDIDATES = "solaris://candidates"
PAIR_EMBEDDINGS = "solaris://pair_embeddings"
USER_AGGREGATES = "solaris://uagg"
ITEM_AGGREGATES = "solaris://iagg"
NEIGHBOUR_FILL = "solaris://nbr"
USER_NEIGHBOURS = "solaris://unn"
VERIFIER = "solaris://verifier"
ASSETS = (
    REQUEST_LOG,
    CANDIDATES,
    PAIR_EMBEDDINGS,
    USER_AGGREGATES,
    ITEM_AGGREGATES,
    NEIGHBOUR_FILL,
    USER_NEIGHBOURS,
    VERIFIER,
)

CONF_KEYS = frozenset({"namespace", "replay", *INTERVAL_KEYS, "intervals"})
# What one run may name: a backfill of a month at a one-minute cadence is 44,640 runs of one
# interval, not one run; a run naming 1970 to 2286 is a typo, not a replay.
MAX_RUN_INTERVALS = 10_000
MAX_RUN_SPAN_S = 31 * 86_400

Params = Mapping[str, object] | None


def settings() -> SolarisConfig:
    """The settings a DAG file reads at parse time (schedules only): the environment and
    ``$SOLARIS_CONFIG``."""
    return SolarisConfig.load()


@dataclass(frozen=True)
class TaskRun:
    """One task's settings (in its namespace) and the intervals it works on, oldest first."""

    cfg: SolarisConfig
    intervals: tuple[Interval, ...]

    @property
    def namespace(self) -> Namespace:
        return Namespace.of(self.cfg)

    @property
    def layout(self) -> CycleLayout:
        return CycleLayout(self.namespace)

    @property
    def as_of(self) -> int:
        """The newest interval end: enrichment and the daily DAGs work as of it."""
        return max(i.end for i in self.intervals)

    @property
    def scope(self) -> Scope:
        return Scope.of(self.cfg)

    def extra(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """An asset event's extra: ``record`` with the namespace that downstream runs use."""
        return {**self.scope.to_json(), **record}


def event_extras(events: Any, asset: str) -> list[dict[str, Any]]:
    """The ``extra`` of each event of the asset named ``asset`` that triggered the run (none
    for a manual or scheduled run, or under ``dag.test``). ``events`` is Airflow's
    ``triggering_asset_events`` or any mapping whose keys are the asset or its name."""
    if not events:
        return []
    found = []
    for key in events:
        if key == asset or getattr(key, "name", None) == asset:
            for k, event in enumerate(events[key]):
                extra = getattr(event, "extra", None) or {}
                if not isinstance(extra, Mapping):
                    raise CycleInputError(
                        f"asset event {asset}[{k}] extra: expected an object (the run's "
                        f"record), got {type(extra).__name__} {shown(extra)}"
                    )
                found.append(dict(extra))
    return found


def _epoch(value: object, name: str) -> int:
    """Epoch seconds by :func:`solaris.times.epoch_of`'s rule; :class:`CycleInputError`
    naming ``name`` otherwise."""
    try:
        return epoch_of(value)
    except TimeInputError as exc:
        raise CycleInputError(f"{name}: {exc}") from None


def _named_interval(item: object, where: str, *, only_interval: bool = False) -> Interval:
    """The interval an object names; with ``only_interval``, other keys are errors."""
    if not isinstance(item, Mapping):
        raise CycleInputError(
            f"{where}: expected an object with interval_start/interval_end, got {shown(item)}"
        )
    unknown = sorted(str(k) for k in set(item) - set(INTERVAL_KEYS)) if only_interval else []
    if unknown:
        raise CycleInputError(f"{where}: unknown keys {unknown}; an interval takes {INTERVAL_KEYS}")
    missing = [k for k in INTERVAL_KEYS if item.get(k) is None]
    if missing:
        raise CycleInputError(f"{where}: {' and '.join(missing)} missing")
    start = _epoch(item[INTERVAL_START], f"{where}.{INTERVAL_START}")
    end = _epoch(item[INTERVAL_END], f"{where}.{INTERVAL_END}")
    if end <= start:
        raise CycleInputError(
            f"{where}: {INTERVAL_END} {end} is not after {INTERVAL_START} {start}"
        )
    return Interval(start, end)


def _conf_intervals(params: Mapping[str, object]) -> list[tuple[str, Interval]]:
    """The intervals the conf names, each with where it was named (for error messages)."""
    single = [k for k in INTERVAL_KEYS if params.get(k) is not None]
    if params.get("intervals") is not None:
        if single:
            raise CycleInputError(
                "conf: give either intervals or interval_start/interval_end, not both "
                f"(got intervals and {' and '.join(single)})"
            )
        items = params["intervals"]
        if not isinstance(items, Sequence) or isinstance(items, str | bytes) or not items:
            raise CycleInputError(
                "conf intervals: expected a non-empty list of "
                f"{{interval_start, interval_end}} objects, got {shown(items)}"
            )
        return [
            (
                f"conf intervals[{k}]",
                _named_interval(item, f"conf intervals[{k}]", only_interval=True),
            )
            for k, item in enumerate(items)
        ]
    if len(single) == 1:
        (other,) = set(INTERVAL_KEYS) - set(single)
        raise CycleInputError(f"conf: {single[0]} without {other}")
    return [("conf", _named_interval(params, "conf"))] if single else []


def _run_intervals(named: Sequence[tuple[str, Interval]]) -> list[Interval]:
    """The distinct intervals of ``named`` (each with where it was named), oldest first:
    none may overlap another (its requests would be selected, and its figures counted,
    twice); a conf may not repeat one (asset events may: the scheduler can merge one
    interval's events) nor name more than :data:`MAX_RUN_INTERVALS` spanning more than
    :data:`MAX_RUN_SPAN_S` (events may: a merged backlog spans what it spans)."""
    where: dict[Interval, str] = {}
    for name, interval in named:
        if interval in where and name.startswith("conf"):
            raise CycleInputError(
                f"{name}: repeats {where[interval]} [{interval.start}, {interval.end})"
            )
        where.setdefault(interval, name)
    ordered = sorted(where)
    if not named[0][0].startswith("conf"):
        # Events are the cycle's own: the scheduler may merge a backlog of them (a replay's
        # and a live interval's of one namespace) into one run, far apart; only overlaps
        # are errors there. The bounds are for what an operator types.
        _no_overlap(ordered, where)
        return ordered
    if len(ordered) > MAX_RUN_INTERVALS:
        raise CycleInputError(
            f"{named[0][0]}: {len(ordered):,} intervals in one run, at most "
            f"{MAX_RUN_INTERVALS:,}; split the backfill into several runs"
        )
    _no_overlap(ordered, where)
    span = ordered[-1].end - ordered[0].start
    if span > MAX_RUN_SPAN_S:
        raise CycleInputError(
            f"{where[ordered[0]]}: one run spans {span / 86_400:,.1f} days "
            f"([{ordered[0].start}, {ordered[-1].end})), at most {MAX_RUN_SPAN_S // 86_400}; "
            "split the backfill into several runs"
        )
    return ordered


def _no_overlap(ordered: Sequence[Interval], where: Mapping[Interval, str]) -> None:
    for before, after in itertools.pairwise(ordered):
        if after.start < before.end:
            raise CycleInputError(
                f"{where[after]}: [{after.start}, {after.end}) overlaps {where[before]} "
                f"[{before.start}, {before.end}); its requests would be selected and counted "
                "twice"
            )


def conf_params() -> dict[str, Any]:
    """The run conf as Airflow ``Param``s, for every DAG's ``params``: Airflow checks a
    conf against them when the run is created (the UI's trigger form, the REST API,
    ``airflow dags trigger``, a backfill), so a conf of the wrong shape is refused at trigger
    time instead of failing when its first task runs. What a schema cannot say (intervals on
    the cadence grid, overlaps, the span, live namespaces: JSON Schema compares no two values,
    and Airflow checks each Param alone) is checked by :func:`task_run`, in the run's first
    task, before anything is written."""
    from airflow.sdk import Param

    from solaris.namespace import NAME_PATTERN

    epoch = [
        {"type": "integer", "minimum": 0, "maximum": MAX_EPOCH_S - 1},
        {"type": "string", "minLength": 1, "maxLength": 64},  # ISO 8601 with a zone, digits
    ]
    interval = {
        "type": "object",
        "properties": {key: {"anyOf": epoch} for key in INTERVAL_KEYS},
        "required": list(INTERVAL_KEYS),
        "additionalProperties": False,
    }
    return {
        "namespace": Param(
            None,
            type=["null", "string"],
            pattern=NAME_PATTERN,
            description="run in this namespace (a replay names its own); default: the settings'",
        ),
        "replay": Param(
            None,
            type=["null", "boolean"],
            description="replay history from requests.source (never into live state)",
        ),
        **{
            key: Param(
                None,
                anyOf=[{"type": "null"}, *epoch],
                description=f"{key}: epoch seconds or ISO 8601 with a zone",
            )
            for key in INTERVAL_KEYS
        },
        "intervals": Param(
            None,
            type=["null", "array"],
            minItems=1,
            maxItems=MAX_RUN_INTERVALS,
            uniqueItems=True,  # a repeat; an overlap needs comparisons a schema cannot make
            items=interval,
            description="several intervals, oldest first, none overlapping",
        ),
    }


def _event_intervals(extras: Sequence[Mapping[str, Any]]) -> list[tuple[str, Interval]]:
    found = []
    for extra in extras:  # each checked by _checked_event: intervals, if any, is a list
        for item in extra.get("intervals") or [extra]:
            if isinstance(item, Mapping) and item.get(INTERVAL_END) is None:
                continue  # a manual event may carry none
            found.append(("asset event", _named_interval(item, "asset event")))
    return found


def _conf_namespace(value: object, where: str = "conf") -> str:
    try:
        return check_name(value)  # the one rule for names
    except NamespaceError as exc:
        raise CycleInputError(f"{where} namespace: {exc}") from None


def _conf_replay(value: object, where: str = "conf") -> bool:
    if not isinstance(value, bool):  # pydantic would take "yes", 1 or "false" as a flag
        raise CycleInputError(f"{where} replay: expected true or false, got {shown(value)}")
    return value


def _namespace_overrides(params: Mapping[str, object], extras: Sequence[Mapping]) -> dict:
    replay = None if params.get("replay") is None else _conf_replay(params["replay"])
    if params.get("namespace") is not None:
        chosen: dict[str, object] = {"namespace": _conf_namespace(params["namespace"])}
        if replay is not None:
            chosen["replay"] = replay
        return chosen
    named = {e.get("namespace") for e in extras if e.get("namespace")}
    if len(named) > 1:
        raise CycleInputError(
            f"events of several namespaces {sorted(named)} reached one task run: "
            "task_runs() splits them, task_run() takes one namespace"
        )
    if named:
        [namespace] = named
        flags = {bool(e.get("replay")) for e in extras if e.get("namespace") == namespace}
        if len(flags) > 1:
            raise CycleInputError(f"events of namespace {namespace} disagree on its replay flag")
        return {"namespace": namespace, "replay": flags.pop()}
    if replay is not None:
        return {"replay": replay}
    return {}


def cron_times(expression: str, after: int, until: int) -> list[int]:
    """The fire times of the cron ``expression`` in ``(after, until]``, epoch seconds (UTC)."""
    from datetime import UTC

    from croniter import croniter

    times = []
    it = croniter(expression, datetime.fromtimestamp(after, UTC))
    while (t := int(it.get_next(datetime).timestamp())) <= until:
        times.append(t)
    return times


def on_cadence_grid(interval: Interval, cadence_s: int, *, snap: bool) -> Interval:
    """``interval`` on the cadence grid (epoch-aligned steps of ``cadence_s``).

    Selections of overlapping intervals would select the same requests twice, so the
    candidates DAG works on grid intervals only. A named interval (conf, asset event) must
    start and end on the grid, and may span several steps (an hourly replay at a 15-minute
    cadence). With ``snap`` (a run's own data interval, e.g. a manual run's
    ``[run_after - cadence, run_after)``) it becomes the last whole step ending at or before
    its end.
    """
    if interval.start % cadence_s == 0 and interval.end % cadence_s == 0:
        return interval
    end = interval.end // cadence_s * cadence_s
    if snap:
        return Interval(end - cadence_s, end)
    raise CycleInputError(
        f"interval [{interval.start}, {interval.end}) is not on the {cadence_s} s cadence "
        f"grid: its start and end must be multiples of {cadence_s} (selection.cadence_minutes), "
        f"e.g. [{end - cadence_s}, {end})"
    )


def task_run(
    params: Params = None,
    data_interval_start: object = None,
    data_interval_end: object = None,
    events: Any = None,
    asset: object = None,
    *,
    grid: bool = False,
) -> TaskRun:
    """The settings and intervals of one task run (see the module docstring).

    Args:
        params: the run's conf.
        data_interval_start, data_interval_end: the run's data interval (scheduled runs).
        events, asset: the run's ``triggering_asset_events`` and the asset to read.
        grid: put the intervals on the cadence grid (the candidates DAG).

    Raises:
        CycleInputError: for a bad conf, events of several namespaces, or no interval.
    """
    params = _conf(params)
    extras = _triggering_extras(params, events, asset)
    return _task_run(params, data_interval_start, data_interval_end, extras, grid=grid)


def task_runs(params: Params = None, events: Any = None, asset: str = "") -> list[TaskRun]:
    """The runs of an asset-triggered task: one per namespace among the events that
    triggered it (the scheduler may merge a replay's events and the live cycle's into one
    run; each namespace's work stays its own), or the one its conf names."""
    params = _conf(params)
    groups: dict[object, list[dict[str, Any]]] = {}
    for extra in _triggering_extras(params, events, asset):
        groups.setdefault(extra.get("namespace"), []).append(extra)
    runs = [_task_run(params, None, None, group) for group in groups.values()]
    return runs or [_task_run(params, None, None, [])]


def _conf(params: object) -> dict[str, object]:
    """The run's conf as a dict; anything but a mapping (or none) is an error."""
    if params is None:
        return {}
    if not isinstance(params, Mapping):
        raise CycleInputError(
            f"conf: expected an object with the keys {sorted(CONF_KEYS)}, got {shown(params)}"
        )
    return dict(params)


def _checked_event(record: object) -> dict[str, Any]:
    """An event's record, its namespace and replay flag checked as the conf's are."""
    if not isinstance(record, Mapping):
        raise CycleInputError(f"asset event: expected an object, got {shown(record)}")
    if record.get("namespace") is not None:
        _conf_namespace(record["namespace"], "asset event")
    if record.get("replay") is not None:
        _conf_replay(record["replay"], "asset event")
    intervals = record.get("intervals")
    if intervals is not None and (
        not isinstance(intervals, Sequence) or isinstance(intervals, str | bytes)
    ):
        raise CycleInputError(
            "asset event intervals: expected a list of {interval_start, interval_end} "
            f"objects, got {type(intervals).__name__} {shown(intervals)}"
        )
    return dict(record)


def _triggering_extras(params: Mapping[str, object], events: Any, asset: object) -> list[dict]:
    """The records of the events that triggered the run, one per namespace and event (an
    event of several namespaces carries one record each under ``runs``); none when the
    conf names a namespace or intervals, which is then the whole instruction."""
    if any(params.get(k) is not None for k in ("namespace", INTERVAL_END, "intervals")):
        return []
    return [_checked_event(r) for e in event_extras(events, asset) for r in _event_records(e)]


def _event_records(extra: Mapping[str, Any]) -> list[object]:
    """The records one event carries: its ``runs`` list (an event of several namespaces),
    else itself; a ``runs`` that is not a list of them is a :class:`CycleInputError`."""
    runs = extra.get("runs")
    if runs is None:
        return [extra]
    if not isinstance(runs, list) or not runs:
        raise CycleInputError(
            f"asset event runs: expected a non-empty list of run records, got {shown(runs)}"
        )
    return runs


def combine_extras(extras: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One asset event's extra for the records of several task runs (one per namespace)."""
    return extras[0] if len(extras) == 1 else {"runs": list(extras)}


def unit_run(unit: Unit) -> TaskRun:
    """The run of one mapped task's unit (an embedding shard, a group of partitions): the
    namespace, replay flag and interval its planning task put in it."""
    return task_run({**unit.scope.to_json(), **unit.interval.as_dict()})


def mapped_results(results: Sequence[Any]) -> list[Any]:
    """The results of a mapped task, skipped ones left out. By index: iterating Airflow's
    lazy sequence probes one past its end and logs that probe's 404 as an error."""
    return [r for i in range(len(results)) if (r := results[i])]


def emit(events: Any, asset: str, extras: Sequence[dict[str, Any]]) -> None:
    """An event of ``asset`` (one of :data:`ASSETS`) with the combined ``extras``, added
    through a task's asset-alias outlet (``outlet_events[alias]``); none without extras
    or events (a call outside Airflow).

    Why an alias: the stage's first task emits the events when it did the interval's whole
    work itself (a quiet interval), and its last task when mapped tasks did it. An outlet
    declared as the asset would emit an event whenever its task succeeds; through an alias
    a task emits exactly the events it adds, so downstream DAGs start as soon as the work is
    done, and only then.
    """
    if events is None or not extras:
        return
    from airflow.sdk import Asset

    events.add(Asset(asset), extra=combine_extras(extras))


def finish_run(events: Any) -> None:
    """End the DAG run's work in the calling task, which did all of it (a quiet interval):
    every task downstream is marked skipped at once and the calling task succeeds with the
    events it added (what Airflow's ``ShortCircuitOperator`` does, by raising its
    ``DownstreamTasksSkipped``). Nothing outside Airflow (``events`` None).

    Why: left to themselves, the skips go down one level per scheduling pass (a mapped task
    over nothing, then each task after it), and ``dag.test()`` waits a second per pass: some
    four seconds an interval in the demo."""
    if events is None:
        return
    from airflow.sdk import get_current_context
    from airflow.sdk.exceptions import DownstreamTasksSkipped

    task = get_current_context()["task"]
    raise DownstreamTasksSkipped(tasks=sorted(task.get_flat_relative_ids(upstream=False)))


def _task_run(
    params: dict[str, object],
    data_interval_start: object,
    data_interval_end: object,
    extras: list[dict[str, Any]],
    *,
    grid: bool = False,
) -> TaskRun:
    unknown = sorted(set(params) - CONF_KEYS)
    if unknown:
        raise CycleInputError(
            f"unknown conf keys {unknown}; a SOLARIS run takes {sorted(CONF_KEYS)}"
        )
    overrides = _namespace_overrides(params, extras)
    deployment = SolarisConfig.load()
    try:
        cfg = SolarisConfig.model_validate({**deployment.model_dump(), **overrides})
    except ValueError as exc:  # pydantic's ValidationError: a bad namespace or replay flag
        raise CycleInputError(f"conf: {exc}") from exc
    if cfg.replay:  # history never lands in live state, whatever the conf says
        refuse_live(deployment, cfg.namespace, "replay into", forcible=False)
    cadence = cfg.selection.cadence_seconds
    named = _conf_intervals(params) or _event_intervals(extras)
    if named:
        if grid:  # a named interval must be on the grid as given: it is not guessed at
            for where, interval in named:
                try:
                    on_cadence_grid(interval, cadence, snap=False)
                except CycleInputError as exc:
                    raise CycleInputError(f"{where}: {exc}") from None
        intervals = _run_intervals(named)
    else:
        if data_interval_end is None:
            raise CycleInputError(
                "no interval to work on: the run has no data interval, its conf names no "
                "interval_start/interval_end (or intervals), and no asset event carried one"
            )
        end = _epoch(data_interval_end, "data_interval_end")
        start = (
            None
            if data_interval_start is None
            else _epoch(data_interval_start, "data_interval_start")
        )
        if start is not None and start > end:
            raise CycleInputError(
                f"data interval: data_interval_end {end} is before data_interval_start {start}"
            )
        if start is None or start == end:  # a cron run's zero-length interval: one cadence
            start = end - cadence
        interval = Interval(start, end)
        intervals = [on_cadence_grid(interval, cadence, snap=True) if grid else interval]
    run = TaskRun(cfg, tuple(intervals))
    if cfg.store.redis is not None:  # every task agrees with the namespace's partitions
        check_partition_count(cfg, f"a task in namespace {cfg.namespace!r}")
    log.info("%s; intervals %s", run.namespace.describe(), [i.key for i in run.intervals])
    return run
