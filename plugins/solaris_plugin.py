"""The SOLARIS page of the Airflow UI: an operator's view of what the cycle's DAG runs did.

An Airflow 3 plugin that mounts a small FastAPI app in the api-server under ``/solaris`` and
adds a "SOLARIS" entry to the UI's navigation bar. It reads the run records that the tasks
write (``artifacts_dir/namespaces/<namespace>/runs/<dag_id>/<key>.json``, see
:func:`solaris.orchestration.layout.write_run_record`) and shows, for one namespace at a time:

* plots over time, drawn here as inline SVG (no script, no network): coverage per serving
  tier, embedding freshness, FM passes per 1,000 requests, selected vs candidates, rows
  written per view, fetch latency p50/p99, serving failures, the miss-stream and
  request-log backlogs (the serving figures come from the ``serving`` dict of the candidates
  runs; a run without it has no point) and the near-line path's pairs/s, lag p95 and backlog
  (the ``nearline`` dict the candidates run reads from the embedders' status);
* per DAG, a table with one row per run, every figure formatted (nested figures as
  ``key: value`` lists, never a raw dict).

Routes (both behind Airflow's auth manager, see :func:`dag_run_reader`):

* ``GET /solaris/``          the HTML page (plain HTML and inline CSS, no script);
* ``GET /solaris/api/runs``  the same records as JSON.

Both take the query parameters ``namespace``, ``dag_id``, ``from`` and ``to`` (UTC, ISO 8601
date or date and time, or epoch seconds; a run is in range when its interval *end* is). The
live cycle and replays never share a view: the page shows one namespace, by default the live
one (``$SOLARIS_NAMESPACE``, default ``live``) when it has runs, and its selector lists the
others, replays labelled as such.

The settings are built on every request as every task builds them (``SolarisConfig.load``:
``$SOLARIS_CONFIG`` and the ``SOLARIS_*`` variables): the state root is ``cycle.state_uri``
(a folder or an fsspec URL), else ``artifacts_dir`` (default ``artifacts``, relative to the
api-server's working directory). This module runs inside the api-server, so it imports
nothing heavy: no feast, torch or pandas (``solaris.config`` is pydantic only); the
records are read only through :func:`solaris.orchestration.layout.read_all_run_records`, and
the figures are written and drawn by :mod:`solaris.dashboard.formatting` and
:mod:`solaris.dashboard.charts` (pure functions, importable without Airflow).
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, ClassVar

from airflow.api_fastapi.app import get_auth_manager
from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails
from airflow.api_fastapi.core_api.security import GetUserDep
from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.exception_handlers import http_exception_handler
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from solaris.dashboard.charts import Chart, Series, fmt_tick, svg_chart
from solaris.dashboard.formatting import (
    MISSING,
    as_number,
    figure_html,
    fmt_figure,
    fmt_interval,
    fmt_share,
    fmt_time,
)
from solaris.errors import SolarisError
from solaris.files import StatePath, state_path
from solaris.namespace import LIVE
from solaris.orchestration.layout import INTERVAL_END, INTERVAL_KEYS, read_all_run_records

# The page's own surface; its formatters and charts are solaris.dashboard's.

if TYPE_CHECKING:
    from solaris.config import SolarisConfig

__all__ = [
    "ARTIFACTS_ENV",
    "MAX_TABLE_ROWS",
    "NAMESPACE_ENV",
    "SERVING_FIGURES",
    "STATE_URI_ENV",
    "TIERS",
    "DagFilter",
    "FilterError",
    "Filters",
    "NamespaceInfo",
    "Selection",
    "SolarisPlugin",
    "app",
    "artifacts_dir",
    "build_charts",
    "create_app",
    "dag_run_reader",
    "live_namespace",
    "load_runs",
    "namespaces_of",
    "parse_filters",
    "parse_time",
    "record_time",
    "render_page",
    "select_runs",
    "settings",
]

# The variables of the state root (cycle.state_uri, else artifacts_dir), named by the page
# when it has no runs to show.
ARTIFACTS_ENV = "SOLARIS_ARTIFACTS_DIR"
STATE_URI_ENV = "SOLARIS_CYCLE__STATE_URI"
NAMESPACE_ENV = "SOLARIS_NAMESPACE"
DEFAULT_LIVE_NAMESPACE = LIVE
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
# A long time range stays a page: each table shows its newest runs (and a long line loses
# its per-point markers: solaris.dashboard.charts.MAX_MARKERS).
MAX_TABLE_ROWS = 200
# Keys the page shows elsewhere (the row's interval, the namespace and its badge).
_IDENTITY_KEYS = frozenset({"dag_id", "key", "namespace", "replay", *INTERVAL_KEYS})


class FilterError(SolarisError, ValueError):
    """A query parameter of the page or of the JSON route is not usable; the message names it."""


def settings() -> SolarisConfig:
    """The deployment's settings, built as every task builds them: ``$SOLARIS_CONFIG`` and
    the ``SOLARIS_*`` variables (read on every request, so the page follows them)."""
    from solaris.config import SolarisConfig

    return SolarisConfig.load()


def artifacts_dir() -> StatePath:
    """The state root the page reads: ``cycle.state_uri``, else ``artifacts_dir``."""
    cfg = settings()
    return state_path(cfg.cycle.state_uri or str(cfg.artifacts_dir))


def live_namespace() -> str:
    """The namespace of the live cycle: the settings' ``namespace`` (default ``live``)."""
    return settings().namespace


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


# -- which runs are shown: namespaces, filters, permissions -----------------------------------

_KEY_END = re.compile(r"^\d+-(\d+)$")
_KEY_START = re.compile(r"^(\d+)")


def record_time(record: Mapping[str, Any]) -> int | None:
    """When a run happened, for plots and the time filter: its interval end (every task
    records one), else the time its key names."""
    end = as_number(record.get(INTERVAL_END))
    if end is not None:
        return int(end)
    key = str(record.get("key", ""))
    match = _KEY_END.fullmatch(key) or _KEY_START.match(key)
    return int(match[1]) if match else None


def _is_replay(namespace: str, records: Iterable[Mapping[str, Any]], live: str) -> bool:
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


def namespaces_of(runs: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[NamespaceInfo]:
    """The namespaces that have run records: the live one first, then the newest first."""
    by_name: dict[str, list[Mapping[str, Any]]] = {}
    for records in runs.values():
        for record in records:
            if isinstance(record.get("namespace"), str):
                by_name.setdefault(record["namespace"], []).append(record)
    live = live_namespace()  # the settings, built once for every namespace below
    infos = []
    for name, records in by_name.items():
        times = [t for t in map(record_time, records) if t is not None]
        replay = _is_replay(name, records, live)
        infos.append(NamespaceInfo(name, replay, len(records), max(times, default=None)))
    return sorted(infos, key=lambda i: (i.replay, -(i.latest or 0), i.name))


@dataclass(frozen=True)
class Filters:
    """The query parameters of a request, parsed (times as epoch seconds, inclusive)."""

    namespace: str | None = None
    dag_id: str | None = None
    start: int | None = None
    end: int | None = None

    def as_query(self) -> dict[str, str]:
        query = {"namespace": self.namespace, "dag_id": self.dag_id}
        query["from"] = None if self.start is None else fmt_time(self.start).replace(" ", "T")
        query["to"] = None if self.end is None else fmt_time(self.end).replace(" ", "T")
        return {k: v for k, v in query.items() if v}


_EPOCH = re.compile(r"[0-9]{1,11}")  # epoch seconds up to 2286 (and a little past)


def parse_time(value: str | None, name: str, *, end_of_day: bool = False) -> int | None:
    """Epoch seconds from a query parameter: epoch seconds, or an ISO 8601 date or date and
    time (UTC unless it names a zone). A bare date as ``to`` means the end of that day."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if _EPOCH.fullmatch(text):  # ASCII digits: str.isdigit() also takes '²', int() refuses it
        return int(text)
    try:
        when = datetime.fromisoformat(text)
    except ValueError as exc:
        raise FilterError(
            f"query parameter {name!r}: {value!r} is not a time; give an ISO 8601 date or date "
            "and time in UTC (1998-03-30 or 1998-03-30T22:00) or epoch seconds"
        ) from exc
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    seconds = int(when.timestamp())
    if end_of_day and len(text) == 10:  # a date only: the whole day
        seconds += 86_400 - 1
    return seconds


def parse_filters(
    namespace: str | None, dag_id: str | None, start: str | None, end: str | None
) -> Filters:
    """:class:`Filters` from the raw query parameters; :class:`FilterError` names a bad one."""
    filters = Filters(
        namespace=(namespace or "").strip() or None,
        dag_id=(dag_id or "").strip() or None,
        start=parse_time(start, "from"),
        end=parse_time(end, "to", end_of_day=True),
    )
    if filters.start is not None and filters.end is not None and filters.end < filters.start:
        raise FilterError(
            f"query parameters 'from' and 'to': 'to' ({end}) is before 'from' ({start})"
        )
    return filters


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
) -> Selection:
    """The runs one request shows: DAGs the user may read, one namespace (the one asked
    for, else the live one when it has runs, else the newest), then DAG and time range."""
    readable = {dag_id: list(records) for dag_id, records in runs.items() if may_read(dag_id)}
    hidden = len(runs) - len(readable)
    infos = namespaces_of(readable)
    if filters.namespace is not None:
        name = filters.namespace
    else:
        live = [i for i in infos if not i.replay]
        name = (live or infos)[0].name if infos else None
    info = next((i for i in infos if i.name == name), None)
    if info is None and name is not None and filters.namespace is not None:
        info = NamespaceInfo(name, _is_replay(name, [], live_namespace()), 0, None)

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


def _duration_unit(max_seconds: float) -> tuple[float, str]:
    if max_seconds < 120:
        return 1.0, "s"
    if max_seconds < 2 * 3600:
        return 60.0, "min"
    if max_seconds < 2 * 86_400:
        return 3600.0, "h"
    return 86_400.0, "d"


def _points(
    records: Iterable[Mapping[str, Any]], value: Callable[[Mapping[str, Any]], Any]
) -> tuple[tuple[int, float], ...]:
    """``(time, value)`` of each record where both are numbers (a figure it lacks: no point)."""
    out = []
    for record in records:
        when = record_time(record)
        try:
            number = as_number(value(record))
        except (TypeError, KeyError, ZeroDivisionError, AttributeError):
            number = None
        if when is not None and number is not None:
            out.append((when, number))
    return tuple(sorted(out))


def _sub(record: Mapping[str, Any], key: str, sub: str) -> Any:
    inner = record.get(key)
    return inner.get(sub) if isinstance(inner, Mapping) else None


def _percent(value: Any) -> float | None:
    share = as_number(value)
    return None if share is None else 100 * share


def _per_1k_requests(record: Mapping[str, Any]) -> float | None:
    passes, requests = as_number(record.get("fm_passes")), as_number(record.get("requests"))
    if passes is None or not requests:
        return None
    return 1000 * passes / requests


def build_charts(runs: Mapping[str, Sequence[Mapping[str, Any]]]) -> list[Chart]:
    """The page's plots from the shown runs (one namespace, filtered).

    A figure goes to a plot wherever a record has it: coverage, freshness, selection and
    serving figures come from the candidates runs, rows written from every run that wrote
    rows (embeddings, enrichment, clustering).
    """
    records = [r for rs in runs.values() for r in rs if "error" not in r]

    coverage = tuple(
        Series(tier, _points(records, lambda r, t=tier: _percent(_sub(r, "coverage", t))))
        for tier in TIERS
    )
    if not any(series.points for series in coverage):
        # No labelled impression (the live namespace): what serving knows instead, the
        # share of its served rows whose main slot each tier filled.
        coverage = tuple(
            Series(
                f"{tier} (served rows, main slot)",
                _points(
                    records,
                    lambda r, t=tier: _percent(_sub(r.get("serving") or {}, "main_tier_share", t)),
                ),
            )
            for tier in TIERS
        )
    freshness = _points(records, lambda r: r.get("freshness_s"))
    divisor, unit = _duration_unit(max((v for _, v in freshness), default=0.0))
    views = sorted(
        {
            str(v)
            for r in records
            if isinstance(r.get("rows_written"), Mapping)
            for v in r["rows_written"]
        }
    )
    return [
        Chart(
            "Coverage per serving tier",
            coverage,
            lambda v: f"{v:.0f}%" if float(v).is_integer() else f"{v:.1f}%",
            y_max=100.0,
        ),
        Chart(
            "Embedding freshness",
            (
                Series(
                    f"age of the newest codes ({unit})",
                    tuple((t, v / divisor) for t, v in freshness),
                ),
            ),
            lambda v: f"{fmt_tick(v)} {unit}",
        ),
        Chart(
            "FM passes per 1,000 requests",
            (Series("FM passes / 1k requests", _points(records, _per_1k_requests)),),
            fmt_tick,
        ),
        Chart(
            "Selected vs candidates",
            (
                Series("candidates", _points(records, lambda r: r.get("candidates"))),
                Series("selected", _points(records, lambda r: r.get("selected"))),
            ),
            fmt_tick,
        ),
        Chart(
            "Rows written per view",
            tuple(
                Series(view, _points(records, lambda r, v=view: _sub(r, "rows_written", v)))
                for view in views
            ),
            fmt_tick,
        ),
        Chart(
            "Fetch latency p50 / p99",
            (
                Series("p50", _points(records, lambda r: _sub(r, "serving", "fetch_p50_ms"))),
                Series("p99", _points(records, lambda r: _sub(r, "serving", "fetch_p99_ms"))),
            ),
            lambda v: f"{fmt_tick(v)} ms",
        ),
        Chart(
            "Serving failures",
            (Series("failed fetches", _points(records, lambda r: _sub(r, "serving", "failures"))),),
            fmt_tick,
            kind="bar",
        ),
        Chart(
            "Miss-stream and request-log backlog",
            (
                Series(
                    "miss stream", _points(records, lambda r: _sub(r, "serving", "miss_backlog"))
                ),
                Series(
                    "request log",
                    _points(records, lambda r: _sub(r, "serving", "request_log_backlog")),
                ),
            ),
            fmt_tick,
        ),
        Chart(
            "Near-line path: pairs embedded per second, lag p95, backlog",
            (
                Series("pairs/s", _points(records, lambda r: _sub(r, "nearline", "pairs_per_s"))),
                Series("lag p95 (s)", _points(records, lambda r: _sub(r, "nearline", "lag_p95_s"))),
                Series(
                    "backlog (entries)",
                    _points(records, lambda r: _sub(r, "nearline", "backlog")),
                ),
            ),
            fmt_tick,
        ),
    ]


# -- the per-run tables -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Column:
    header: str
    cell: Callable[[Mapping[str, Any]], str]  # HTML
    text: bool = False  # left-aligned


def _cell_number(key: str) -> Callable[[Mapping[str, Any]], str]:
    return lambda r: html.escape(fmt_figure(key, r.get(key)))


def _columns(records: Sequence[Mapping[str, Any]]) -> tuple[list[_Column], set[str]]:
    """The columns of one DAG's table (the figures its records have) and the keys they use."""
    has = {k for r in records for k in r}
    cols = [_Column("run (interval, UTC)", lambda r: html.escape(fmt_interval(r)), text=True)]
    used = set(_IDENTITY_KEYS)
    for key, header in (
        ("requests", "requests"),
        ("candidates", "candidates"),
        ("selected", "selected"),
        ("fm_passes", "FM passes"),
    ):
        if key in has:
            cols.append(_Column(header, _cell_number(key)))
            used.add(key)
    coverages = [r["coverage"] for r in records if isinstance(r.get("coverage"), Mapping)]
    if coverages:
        extra = sorted({str(k) for c in coverages for k in c} - set(TIERS))
        for tier in (*TIERS, *extra):
            cols.append(
                _Column(
                    f"coverage {tier}",
                    lambda r, t=tier: html.escape(fmt_share(_sub(r, "coverage", t))),
                )
            )
        used.add("coverage")
    if "freshness_s" in has:
        cols.append(_Column("embedding freshness", _cell_number("freshness_s")))
        used.add("freshness_s")
    if any(isinstance(r.get("serving"), Mapping) for r in records):
        for key, header in SERVING_FIGURES:
            cols.append(
                _Column(header, lambda r, k=key: html.escape(fmt_figure(k, _sub(r, "serving", k))))
            )
        used.add("serving")
    if "rows_written" in has:
        cols.append(
            _Column(
                "rows written",
                lambda r: figure_html("rows_written", r.get("rows_written")),
                text=True,
            )
        )
        used.add("rows_written")
    if "seconds" in has:
        cols.append(_Column("run time", _cell_number("seconds")))
        used.add("seconds")
    return cols, used


def _other_figures(record: Mapping[str, Any], used: set[str]) -> str:
    """The record's figures without a column of their own, as a ``key: value`` list."""
    rest: dict[str, Any] = {k: v for k, v in record.items() if k not in used}
    for key, shown in (("coverage", set(TIERS)), ("serving", {k for k, _ in SERVING_FIGURES})):
        if key in used and key in record:
            value = record[key]
            if not isinstance(value, Mapping):
                rest[key] = value
            elif key == "serving" and set(value) - shown:
                rest[key] = {k: v for k, v in value.items() if k not in shown}
    skip = {k: record[k] for k in INTERVAL_KEYS if k in record}
    return figure_html("", rest, skip=skip) if rest else MISSING


def _dag_table(dag_id: str, records: Sequence[Mapping[str, Any]]) -> str:
    good = [r for r in records if "error" not in r]
    cols, used = _columns(good)
    head = "".join(
        f'<th class="text">{html.escape(c.header)}</th>'
        if c.text
        else f"<th>{html.escape(c.header)}</th>"
        for c in cols
    )
    head += '<th class="text">other figures</th>'
    rows = []
    for record in records[:MAX_TABLE_ROWS]:
        if "error" in record:
            key = str(record.get("key", MISSING))
            message = f"unreadable run record {key}: {record['error']}"
            rows.append(
                f'<tr class="error"><td class="text">{html.escape(fmt_interval(record))}</td>'
                f'<td class="text" colspan="{len(cols)}">{html.escape(message)}</td></tr>'
            )
            continue
        cells = "".join(
            f'<td class="text">{c.cell(record)}</td>' if c.text else f"<td>{c.cell(record)}</td>"
            for c in cols
        )
        cells += f'<td class="text other">{_other_figures(record, used)}</td>'
        rows.append(f"<tr>{cells}</tr>")
    times = [t for t in map(record_time, records) if t is not None]
    latest = f", latest {fmt_time(max(times))} UTC" if times else ""
    if len(records) > MAX_TABLE_ROWS:
        latest += f"; the newest {MAX_TABLE_ROWS} shown: narrow the time range for older ones"
    return (
        f'<section class="dag" id="dag-{html.escape(dag_id)}"><h3>{html.escape(dag_id)}'
        f' <span class="meta">{len(records)} run(s){latest}</span></h3>'
        f'<div class="scroll"><table><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div></section>"
    )


# -- the page ---------------------------------------------------------------------------------

_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.2rem 1.5rem; color: #1d2733; }
h1 { font-size: 1.4rem; margin: 0 0 0.3rem; }
h2 { font-size: 1.1rem; margin: 1.4rem 0 0.5rem; }
h3 { font-size: 1rem; margin: 1.1rem 0 0.4rem; }
.meta { color: #5b6675; font-weight: normal; font-size: 0.85rem; }
p.meta { margin: 0 0 0.8rem; }
.badge { display: inline-block; padding: 0 0.45rem; border-radius: 0.6rem; font-size: 0.8rem;
  vertical-align: middle; }
.badge.live { background: #dcf3e4; color: #145c2e; }
.badge.replay { background: #fff0d1; color: #7a4d00; }
form.filters { display: flex; flex-wrap: wrap; gap: 0.6rem 1rem; align-items: end;
  background: #f5f7fa; border: 1px solid #d5dbe3; padding: 0.6rem 0.8rem; margin: 0 0 0.8rem; }
form.filters label { display: flex; flex-direction: column; font-size: 0.8rem; color: #3d4856; }
form.filters select, form.filters input { font: inherit; font-size: 0.9rem; padding: 0.15rem; }
form.filters button { font: inherit; padding: 0.25rem 0.9rem; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(400px, 1fr));
  gap: 0.6rem; }
svg.chart { width: 100%; height: auto; background: #fff; border: 1px solid #e1e6ec; }
svg .chart-title { font-size: 13px; font-weight: 600; fill: #1d2733; }
svg .legend, svg .tick { font-size: 10.5px; fill: #3d4856; }
svg .empty-chart { font-size: 12px; fill: #8a96a6; }
svg .grid { stroke: #e8ecf1; } svg .axis { stroke: #8a96a6; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-size: 0.82rem; }
th, td { border: 1px solid #d5dbe3; padding: 0.25rem 0.45rem; text-align: right;
  vertical-align: top; }
th { background: #eef2f6; position: sticky; top: 0; }
td.text, th.text { text-align: left; }
td { white-space: nowrap; }
figure { margin: 0; }
td.other { white-space: normal; min-width: 26rem; max-width: 40rem; }
ul.kv { list-style: none; margin: 0; padding: 0; display: inline; }
ul.kv li { display: inline; }
ul.kv li + li::before { content: " · "; color: #8a96a6; }
ul.kv ul.kv::before { content: "("; } ul.kv ul.kv::after { content: ")"; }
ul.kv .k { color: #5b6675; }
tr.error td { background: #fdecec; color: #8a1c1c; white-space: normal; }
.empty, .notice { padding: 0.8rem 1rem; background: #f5f7fa; border: 1px dashed #b8c1cc;
  max-width: 56rem; margin: 0.5rem 0; }
.problem { padding: 0.6rem 1rem; background: #fdecec; border: 1px solid #e3a3a3;
  color: #8a1c1c; max-width: 56rem; margin: 0.5rem 0; }
code { background: #eef2f6; padding: 0 0.2rem; }
"""


def _option(value: str, label: str, selected: bool) -> str:
    mark = " selected" if selected else ""
    return f'<option value="{html.escape(value)}"{mark}>{html.escape(label)}</option>'


def _form(selection: Selection, filters: Filters, raw: Mapping[str, str | None]) -> str:
    current = selection.namespace.name if selection.namespace else ""
    names = list(selection.namespaces)
    if selection.namespace is not None and selection.namespace not in names:
        names.append(selection.namespace)
    ns_options = "".join(_option(i.name, i.label, i.name == current) for i in names) or _option(
        "", "no namespaces yet", True
    )
    dag_options = _option("", "all DAGs", filters.dag_id is None) + "".join(
        _option(d, d, d == filters.dag_id) for d in selection.dag_ids
    )
    if filters.dag_id is not None and filters.dag_id not in selection.dag_ids:
        dag_options += _option(filters.dag_id, filters.dag_id, True)

    def when(value: int | None, raw_value: str | None) -> str:
        if value is None:
            return html.escape(raw_value or "")
        return html.escape(fmt_time(value).replace(" ", "T"))

    return (
        '<form class="filters" method="get" action="">'
        f'<label>namespace<select name="namespace">{ns_options}</select></label>'
        f'<label>DAG<select name="dag_id">{dag_options}</select></label>'
        '<label>from (UTC, interval end)<input type="datetime-local" name="from" '
        f'value="{when(filters.start, raw.get("from"))}"></label>'
        '<label>to (UTC)<input type="datetime-local" name="to" '
        f'value="{when(filters.end, raw.get("to"))}"></label>'
        '<button type="submit">Apply</button><a href="?">reset</a></form>'
    )


def _page(title_line: str, body: str) -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>SOLARIS runs</title><style>{_CSS}</style></head><body>"
        f"<h1>SOLARIS cycle runs</h1>{title_line}{body}</body></html>"
    )


def render_page(
    runs: Mapping[str, Sequence[dict[str, Any]]],
    root: StatePath,
    filters: Filters | None = None,
    *,
    may_read: Callable[[str], bool] = lambda dag_id: True,
    problem: str | None = None,
    raw: Mapping[str, str | None] | None = None,
) -> str:
    """The HTML page of ``runs`` (as :func:`load_runs` returns them), read from ``root``,
    for ``filters`` and a user who may read the runs of the DAGs ``may_read`` accepts.
    ``problem`` (a bad query parameter) is shown above the form instead of any run."""
    filters = filters or Filters()
    where = html.escape(str(state_path(root) / "namespaces"))
    selection = select_runs(runs, filters, may_read)
    form = _form(selection, filters, raw or {})
    if problem is not None:
        return _page(
            f'<p class="meta">read from {where}</p>',
            f'<div class="problem">{html.escape(problem)}</div>{form}',
        )
    hidden = (
        f'<div class="notice">The runs of {selection.hidden_dags} DAG(s) are hidden: your '
        "Airflow role may not read their runs.</div>"
        if selection.hidden_dags
        else ""
    )
    if not selection.namespaces and selection.namespace is None:
        body = (
            '<div class="empty"><strong>No runs yet.</strong> '
            f"There are no run records under <code>{where}</code>. Each SOLARIS DAG task "
            "writes one when its run finishes; unpause the DAGs (or trigger one) and reload "
            "this page. The folder is "
            f"<code>${STATE_URI_ENV}/namespaces/&lt;namespace&gt;/runs</code> (by default "
            f"<code>${ARTIFACTS_ENV}</code>).</div>"
        )
        return _page(f'<p class="meta">read from {where}</p>', form + hidden + body)

    info = selection.namespace
    assert info is not None  # there are namespaces, so one is chosen
    kind = "replay" if info.replay else "live"
    n_runs = sum(len(r) for r in selection.runs.values())
    span = ""
    if filters.start is not None or filters.end is not None:
        span = f", interval ends {fmt_time(filters.start)} to {fmt_time(filters.end)} UTC"
    title = (
        f'<p class="meta">namespace <strong>{html.escape(info.name)}</strong> '
        f'<span class="badge {kind}">{kind}</span> · {n_runs} run record(s) of '
        f"{len(selection.runs)} DAG(s){html.escape(span)}, newest first · times in UTC · "
        f"read from {where}</p>"
    )
    if not selection.runs:
        body = (
            '<div class="empty"><strong>No runs match.</strong> Namespace '
            f"<code>{html.escape(info.name)}</code> has no run records for these filters.</div>"
        )
        return _page(title, form + hidden + body)
    times = [t for rs in selection.runs.values() for t in map(record_time, rs) if t is not None]
    x_range = (min(times, default=0), max(times, default=0))
    charts = "".join(
        f"<figure>{svg_chart(chart, x_range)}</figure>" for chart in build_charts(selection.runs)
    )
    tables = "".join(
        _dag_table(dag_id, records) for dag_id, records in sorted(selection.runs.items())
    )
    body = f'<h2>Over time</h2><div class="charts">{charts}</div><h2>Runs</h2>{tables}'
    return _page(title, form + hidden + body)


# -- the app ----------------------------------------------------------------------------------

DagFilter = Callable[[str], bool]


def dag_run_reader(user: GetUserDep) -> DagFilter:
    """Airflow's auth manager on this app: who may see which runs.

    ``GetUserDep`` is the dependency that guards Airflow's own ``/api/v2`` routes: the JWT
    from the ``Authorization: Bearer`` header or the UI's ``_token`` cookie, else 401 (403
    for a token that does not verify). The returned filter keeps the DAGs whose runs the
    user may read (``GET`` on ``DagAccessEntity.RUN`` of that DAG), as the UI's DAG list
    does.
    """
    manager = get_auth_manager()

    def may_read(dag_id: str) -> bool:
        return manager.is_authorized_dag(
            method="GET",
            access_entity=DagAccessEntity.RUN,
            details=DagDetails(id=dag_id),
            user=user,
        )

    return may_read


def _login_url(request: Request) -> str | None:
    """The auth manager's login page, coming back to this request; None when there is no
    auth manager (the app outside an api-server)."""
    try:
        return get_auth_manager().get_url_login(next_url=str(request.url))
    except RuntimeError:
        return None


# The routes' parameters (module level: FastAPI resolves the annotations in this module).
Reader = Annotated[DagFilter, Depends(dag_run_reader)]
NamespaceParam = Annotated[str | None, Query(description="the namespace shown")]
DagIdParam = Annotated[str | None, Query(description="only this DAG's runs")]
FromParam = Annotated[str | None, Query(alias="from", description="interval end at or after")]
ToParam = Annotated[str | None, Query(alias="to", description="interval end at or before")]


def create_app(root: StatePath | str | None = None) -> FastAPI:
    """The SOLARIS FastAPI app; ``root`` is the state root (default: :func:`artifacts_dir`,
    read on every request)."""
    api = FastAPI(title="SOLARIS", description="Run records of the SOLARIS Airflow DAGs.")

    def current_root() -> StatePath:
        return state_path(root) if root is not None else artifacts_dir()

    @api.get("/", response_class=HTMLResponse)
    def page(
        may_read: Reader,
        namespace: NamespaceParam = None,
        dag_id: DagIdParam = None,
        start: FromParam = None,
        end: ToParam = None,
    ) -> HTMLResponse:
        where = current_root()
        raw = {"from": start, "to": end}
        try:
            filters = parse_filters(namespace, dag_id, start, end)
        except FilterError as exc:
            lenient = Filters(namespace=namespace or None, dag_id=dag_id or None)
            page_html = render_page(
                load_runs(where), where, lenient, may_read=may_read, problem=str(exc), raw=raw
            )
            return HTMLResponse(page_html, status_code=status.HTTP_400_BAD_REQUEST)
        return HTMLResponse(render_page(load_runs(where), where, filters, may_read=may_read))

    @api.get("/api/runs")
    def runs(
        may_read: Reader,
        namespace: NamespaceParam = None,
        dag_id: DagIdParam = None,
        start: FromParam = None,
        end: ToParam = None,
    ) -> dict[str, Any]:
        where = current_root()
        try:
            filters = parse_filters(namespace, dag_id, start, end)
        except FilterError as exc:
            raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from exc
        selection = select_runs(load_runs(where), filters, may_read)
        info = selection.namespace
        return {
            "artifacts_dir": str(where),
            "namespace": info.name if info else None,
            "replay": info.replay if info else None,
            "namespaces": [
                {"name": i.name, "replay": i.replay, "runs": i.runs, "latest": i.latest}
                for i in selection.namespaces
            ],
            "filters": filters.as_query(),
            "hidden_dags": selection.hidden_dags,
            "dags": selection.runs,
        }

    @api.exception_handler(HTTPException)
    async def login_first(request: Request, exc: HTTPException) -> Response:
        """A browser that opens the page without a session goes to Airflow's login page
        and comes back; the JSON route answers 401 like ``/api/v2``."""
        if (
            exc.status_code == status.HTTP_401_UNAUTHORIZED
            and request.scope.get("endpoint") is page
        ):
            url = _login_url(request)
            if url is not None:
                return RedirectResponse(url, status_code=status.HTTP_303_SEE_OTHER)
        return await http_exception_handler(request, exc)

    return api


app = create_app()


class SolarisPlugin(AirflowPlugin):
    """Mounts :data:`app` at ``/solaris`` and links it from the UI's navigation bar."""

    name = "solaris"
    fastapi_apps: ClassVar[list[dict[str, Any]]] = [
        {"app": app, "url_prefix": "/solaris", "name": "SOLARIS"}
    ]
    external_views: ClassVar[list[dict[str, Any]]] = [
        {"name": "SOLARIS", "href": "/solaris/", "destination": "nav", "url_route": "solaris"}
    ]
