"""Which run records the SOLARIS page shows: read, dated, grouped by namespace, filtered.

Pure functions over the records as :func:`solaris.orchestration.layout.read_all_run_records`
returns them (by DAG id, newest first); what the user may read (``may_read``) and which
namespace is the live cycle's (``live``) are the caller's to say.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from solaris.dashboard.filters import Filters
from solaris.dashboard.formatting import as_number
from solaris.files import StatePath
from solaris.orchestration.layout import INTERVAL_END, read_all_run_records
from solaris.times import MAX_EPOCH_S

__all__ = [
    "SERVING_FIGURES",
    "TIERS",
    "NamespaceInfo",
    "Selection",
    "is_replay",
    "load_runs",
    "namespaces_of",
    "nested",
    "record_time",
    "select_runs",
]

# The serving tiers of the candidates runs' ``coverage`` dict, in the order they are shown.
TIERS = ("pair", "nbr", "uagg", "iagg", "any")
# The figures of the candidates runs' ``serving`` dict, in the order they are shown.
SERVING_FIGURES = (
    ("requests", "serving requests"),
    ("failures", "fetch failures"),
    ("fetch_p50_ms", "fetch p50"),
    ("fetch_p99_ms", "fetch p99"),
    ("miss_backlog", "miss backlog"),
    ("request_log_backlog", "request-log backlog"),
)


def load_runs(root: StatePath) -> dict[str, list[dict[str, Any]]]:
    """The run records under ``root`` (the state root) by DAG id, newest first.

    A record that is valid JSON but not an object is reported as an error record, like one
    that does not parse, so that every record the page shows is a dict (its namespace is
    then unknown: it is shown in every namespace's view rather than hidden).
    """
    runs = read_all_run_records(root)
    out: dict[str, list[dict[str, Any]]] = {}
    for dag_id, records in runs.items():
        out[dag_id] = [
            _cut(record, _MAX_RECORD_DEPTH)
            if isinstance(record, dict)
            else {"dag_id": dag_id, "error": f"not a JSON object: {record!r}"[:200]}
            for record in records
        ]
    return out


# How deep a record is served (the JSON route) before "…": far past what a task writes,
# far below what exhausts a serializer's stack.
_MAX_RECORD_DEPTH = 32


def _cut(value: Any, depth: int) -> Any:
    """``value`` with whatever is nested ``depth`` levels down replaced by a marker."""
    if isinstance(value, dict):
        if depth <= 0:
            return "… (nested deeper)"
        return {k: _cut(v, depth - 1) for k, v in value.items()}
    if isinstance(value, list):
        if depth <= 0:
            return "… (nested deeper)"
        return [_cut(v, depth - 1) for v in value]
    return value


_KEY_END = re.compile(r"^\d+-(\d+)$")
_KEY_START = re.compile(r"^(\d+)")


def record_time(record: Mapping[str, Any]) -> int | None:
    """When a run happened, for plots and the time filter: its interval end (every task
    records one), else the time its key names; None when neither is a time the cycle can
    record (``[0, MAX_EPOCH_S)``: a record claiming 1e300 is left out of the plots, not a
    500)."""
    end = as_number(record.get(INTERVAL_END))
    if end is None:
        key = str(record.get("key", ""))
        match = _KEY_END.fullmatch(key) or _KEY_START.match(key)
        end = int(match[1]) if match else None
    return int(end) if end is not None and 0 <= end < MAX_EPOCH_S else None


def nested(record: Mapping[str, Any], key: str, sub: str) -> Any:
    """``record[key][sub]``, or None when ``record[key]`` is not a dict or lacks ``sub``."""
    inner = record.get(key)
    return inner.get(sub) if isinstance(inner, Mapping) else None


def is_replay(namespace: str, records: Iterable[Mapping[str, Any]], live: str) -> bool:
    """A namespace is a replay when its records say so (``"replay": true``); when none says
    either way, when it is not the live cycle's namespace ``live`` (replays run in their
    own)."""
    flags = {r["replay"] for r in records if isinstance(r.get("replay"), bool)}
    if flags:
        return True in flags
    return namespace != live


@dataclass(frozen=True)
class NamespaceInfo:
    """One namespace as the selector lists it."""

    name: str
    replay: bool
    runs: int
    latest: int | None

    @property
    def label(self) -> str:
        return f"{self.name} (replay)" if self.replay else f"{self.name} (live)"


def namespaces_of(
    runs: Mapping[str, Sequence[Mapping[str, Any]]], *, live: str
) -> list[NamespaceInfo]:
    """The namespaces that have run records: the live one (``live``) first, then the newest
    first."""
    by_name: dict[str, list[Mapping[str, Any]]] = {}
    for records in runs.values():
        for record in records:
            if isinstance(record.get("namespace"), str):
                by_name.setdefault(record["namespace"], []).append(record)
    infos = []
    for name, records in by_name.items():
        times = [t for t in map(record_time, records) if t is not None]
        replay = is_replay(name, records, live)
        infos.append(NamespaceInfo(name, replay, len(records), max(times, default=None)))
    return sorted(infos, key=lambda i: (i.replay, -(i.latest or 0), i.name))


@dataclass(frozen=True)
class Selection:
    """What one request shows: the namespace, its filtered runs by DAG, and what is hidden."""

    namespace: NamespaceInfo | None
    namespaces: list[NamespaceInfo]
    dag_ids: list[str]  # the namespace's DAGs (the DAG selector's options)
    runs: dict[str, list[dict[str, Any]]]  # after every filter, newest first
    hidden_dags: int  # DAGs the user may not read the runs of


def select_runs(
    runs: Mapping[str, Sequence[dict[str, Any]]],
    filters: Filters,
    may_read: Callable[[str], bool],
    *,
    live: str,
) -> Selection:
    """The runs one request shows: DAGs the user may read, one namespace (the one asked
    for, else the live one, ``live``, when it has runs, else the newest), then DAG and time
    range."""
    readable = {dag_id: list(records) for dag_id, records in runs.items() if may_read(dag_id)}
    hidden = len(runs) - len(readable)
    infos = namespaces_of(readable, live=live)
    name: str | None
    if filters.namespace is not None:
        name = filters.namespace
    else:
        live_infos = [i for i in infos if not i.replay]
        name = (live_infos or infos)[0].name if infos else None
    info = next((i for i in infos if i.name == name), None)
    if info is None and name is not None and filters.namespace is not None:
        info = NamespaceInfo(name, is_replay(name, [], live), 0, None)

    def in_namespace(record: Mapping[str, Any]) -> bool:
        return record.get("namespace") in (name, None)

    def in_range(record: Mapping[str, Any]) -> bool:
        if filters.start is None and filters.end is None:
            return True
        when = record_time(record)
        if when is None:
            return False
        return (filters.start is None or when >= filters.start) and (
            filters.end is None or when <= filters.end
        )

    dag_ids = sorted(d for d, records in readable.items() if any(map(in_namespace, records)))
    shown: dict[str, list[dict[str, Any]]] = {}
    for dag_id in dag_ids:
        if filters.dag_id is not None and dag_id != filters.dag_id:
            continue
        kept = [r for r in readable[dag_id] if in_namespace(r) and in_range(r)]
        if kept:
            shown[dag_id] = kept
    return Selection(info, infos, dag_ids, shown, hidden)
