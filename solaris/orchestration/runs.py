"""What every task does first, once: its settings, its namespace and its intervals.

A task's edge is :func:`task_run`. It takes what Airflow hands the task (the run's conf as
``params``, its data interval, the asset events that triggered it), builds the
:class:`~solaris.config.SolarisConfig` once, in the namespace the run names, and returns a
:class:`TaskRun` that the task's work receives. Nothing below it re-reads the environment.

**Namespace.** A run's conf may name one (``{"namespace": "replay_1998", "replay": true}``);
an asset-triggered run takes the namespace of the events that triggered it (they must agree);
otherwise the configured one (``SOLARIS_NAMESPACE``, default ``live``). Every asset event a
task emits carries its namespace, so a replay's downstream runs stay in the replay.

**Time.** A run's "now" is its interval, never the wall clock: the interval its conf names
(``interval_start``/``interval_end``, or ``intervals``), the intervals its triggering asset
events carry, else its own data interval. So a backfill replays history.

**Conf.** Unknown keys, a naive ISO time (which would take the worker's local zone), an
end before its start, and intervals off the cadence grid are errors that name the key.

Nothing here imports Airflow: asset events are read through duck typing (any mapping of
asset → list of objects with an ``extra`` dict), so it is tested without a scheduler.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from solaris.config import SolarisConfig
from solaris.namespace import Namespace
from solaris.orchestration.layout import CycleLayout, Interval
from solaris.orchestration.resources import CycleInputError

__all__ = [
    "ASSETS",
    "CANDIDATES",
    "CONF_KEYS",
    "ITEM_AGGREGATES",
    "NEIGHBOUR_FILL",
    "PAIR_EMBEDDINGS",
    "REQUEST_LOG",
    "USER_AGGREGATES",
    "USER_NEIGHBOURS",
    "VERIFIER",
    "CycleInputError",
    "TaskRun",
    "combine_extras",
    "cron_times",
    "event_extras",
    "on_cadence_grid",
    "settings",
    "task_run",
    "task_runs",
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

CONF_KEYS = frozenset({"namespace", "replay", "interval_start", "interval_end", "intervals"})

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

    def extra(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """An asset event's extra: ``record`` with the namespace that downstream runs use."""
        return {"namespace": self.cfg.namespace, "replay": self.cfg.replay, **record}


def event_extras(events: Any, asset: str) -> list[dict[str, Any]]:
    """The ``extra`` of each event of the asset named ``asset`` that triggered the run (none
    for a manual or scheduled run, or under ``dag.test``). ``events`` is Airflow's
    ``triggering_asset_events`` or any mapping whose keys are the asset or its name."""
    if not events:
        return []
    found = []
    for key in events:
        if key == asset or getattr(key, "name", None) == asset:
            found.extend(dict(e.extra or {}) for e in events[key])
    return found


def _epoch(value: object, name: str) -> int:
    """Epoch seconds from an int, an ISO 8601 string with a zone, or an aware datetime."""
    if isinstance(value, bool):
        raise CycleInputError(f"conf {name}: epoch seconds or ISO 8601 expected, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise CycleInputError(f"conf {name}: {value!r} is not a time")
        return int(value)
    if isinstance(value, str):
        if value.lstrip("-").isdigit():
            return int(value)
        try:
            value = datetime.fromisoformat(value)
        except ValueError as exc:
            raise CycleInputError(
                f"conf {name}: epoch seconds or ISO 8601 expected, got {value!r}"
            ) from exc
    if isinstance(value, datetime) or hasattr(value, "timestamp"):  # pendulum, Airflow's own
        if getattr(value, "tzinfo", None) is None:
            raise CycleInputError(
                f"conf {name}: {value} has no time zone (it would be read in the worker's "
                "local zone); add one, e.g. +00:00"
            )
        return int(value.timestamp())
    raise CycleInputError(f"conf {name}: epoch seconds or ISO 8601 expected, got {value!r}")


def _named_interval(item: Mapping[str, object], where: str) -> Interval:
    if not isinstance(item, Mapping):
        raise CycleInputError(f"{where}: expected an object with interval_start/interval_end")
    missing = [k for k in ("interval_start", "interval_end") if item.get(k) is None]
    if missing:
        raise CycleInputError(f"{where}: {' and '.join(missing)} missing")
    start = _epoch(item["interval_start"], f"{where}.interval_start")
    end = _epoch(item["interval_end"], f"{where}.interval_end")
    if end <= start:
        raise CycleInputError(f"{where}: interval_end {end} is not after interval_start {start}")
    return Interval(start, end)


def _conf_intervals(params: Mapping[str, object]) -> list[Interval]:
    if params.get("intervals") is not None:
        items = params["intervals"]
        if not isinstance(items, Sequence) or isinstance(items, str) or not items:
            raise CycleInputError("conf intervals: expected a non-empty list of intervals")
        return [_named_interval(item, f"conf intervals[{k}]") for k, item in enumerate(items)]
    if params.get("interval_end") is not None:
        if params.get("interval_start") is None:
            raise CycleInputError("conf: interval_end without interval_start")
        return [_named_interval(params, "conf")]
    return []


def _event_intervals(extras: Sequence[Mapping[str, Any]]) -> list[Interval]:
    found = []
    for extra in extras:
        for item in extra.get("intervals") or [extra]:
            if item.get("interval_end") is not None:  # a manual event may carry none
                found.append(_named_interval(item, "asset event"))
    return found


def _namespace_overrides(params: Mapping[str, object], extras: Sequence[Mapping]) -> dict:
    if params.get("namespace") is not None:
        chosen = {"namespace": params["namespace"]}
        if params.get("replay") is not None:
            chosen["replay"] = params["replay"]
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
    if params.get("replay") is not None:
        return {"replay": params["replay"]}
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
    params = dict(params or {})
    extras = _triggering_extras(params, events, asset)
    return _task_run(params, data_interval_start, data_interval_end, extras, grid=grid)


def task_runs(params: Params = None, events: Any = None, asset: str = "") -> list[TaskRun]:
    """The runs of an asset-triggered task: one per namespace among the events that
    triggered it (the scheduler may merge a replay's events and the live cycle's into one
    run; each namespace's work stays its own), or the one its conf names."""
    params = dict(params or {})
    groups: dict[object, list[dict[str, Any]]] = {}
    for extra in _triggering_extras(params, events, asset):
        groups.setdefault(extra.get("namespace"), []).append(extra)
    runs = [_task_run(params, None, None, group) for group in groups.values()]
    return runs or [_task_run(params, None, None, [])]


def _triggering_extras(params: Mapping[str, object], events: Any, asset: object) -> list[dict]:
    """The records of the events that triggered the run, one per namespace and event (an
    event of several namespaces carries one record each under ``runs``); none when the
    conf names a namespace or intervals, which is then the whole instruction."""
    if any(params.get(k) is not None for k in ("namespace", "interval_end", "intervals")):
        return []
    return [dict(r) for e in event_extras(events, asset) for r in (e.get("runs") or [e])]


def combine_extras(extras: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One asset event's extra for the records of several task runs (one per namespace)."""
    return extras[0] if len(extras) == 1 else {"runs": list(extras)}


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
    try:
        cfg = SolarisConfig.load(**_namespace_overrides(params, extras))
    except ValueError as exc:  # pydantic's ValidationError: a bad namespace or replay flag
        raise CycleInputError(f"conf: {exc}") from exc
    cadence = round(cfg.selection.cadence_minutes * 60)
    named = _conf_intervals(params) or _event_intervals(extras)
    if named:
        intervals = sorted(set(named))
        if grid:
            intervals = [on_cadence_grid(i, cadence, snap=False) for i in intervals]
    else:
        if data_interval_end is None:
            raise CycleInputError(
                "no interval to work on: the run has no data interval, its conf names no "
                "interval_start/interval_end (or intervals), and no asset event carried one"
            )
        end = _epoch(data_interval_end, "data_interval_end")
        start = None if data_interval_start is None else _epoch(data_interval_start, "start")
        if start is None or start >= end:  # a cron run's zero-length interval: one cadence
            start = end - cadence
        interval = Interval(start, end)
        intervals = [on_cadence_grid(interval, cadence, snap=True) if grid else interval]
    run = TaskRun(cfg, tuple(intervals))
    log.info("%s; intervals %s", run.namespace.describe(), [i.key for i in run.intervals])
    return run
