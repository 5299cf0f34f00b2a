"""The SOLARIS page of the Airflow UI: what each DAG run of the cycle did.

An Airflow 3 plugin that mounts a small FastAPI app in the api-server under ``/solaris`` and
adds a "SOLARIS" entry to the UI's navigation bar. The page lists, per DAG and per DAG run,
the run records that the tasks write
(``artifacts_dir/namespaces/<namespace>/runs/<dag_id>/<key>.json``, see
:func:`solaris.orchestration.layout.write_run_record`): candidates selected, FM passes, rows
written, coverage per serving tier, embedding freshness and run time.

* ``GET /solaris/``         the HTML page (plain HTML and inline CSS, no script);
* ``GET /solaris/api/runs`` the same records as JSON.

``artifacts_dir`` is read from ``SOLARIS_ARTIFACTS_DIR`` on every request (default
``artifacts``, relative to the api-server's working directory). This module runs inside the
api-server, so it imports nothing heavy: no feast, torch, pandas or ``solaris.config``; the
records are read only through :func:`solaris.orchestration.layout.read_run_records`.

The app has no authentication of its own: whoever reaches the api-server can read the page.
"""

from __future__ import annotations

import html
import math
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from airflow.plugins_manager import AirflowPlugin
from fastapi import FastAPI
from fastapi.responses import HTMLResponse

from solaris.orchestration.layout import read_all_run_records

ARTIFACTS_ENV = "SOLARIS_ARTIFACTS_DIR"
MISSING = "–"
TIERS = ("pair", "nbr", "uagg", "iagg", "any")
# Keys that have a column of their own; any other key goes to "details".
_COLUMN_KEYS = frozenset(
    {
        "dag_id",
        "namespace",
        "key",
        "interval_start",
        "interval_end",
        "seconds",
        "candidates",
        "selected",
        "fm_passes",
        "rows_written",
        "coverage",
        "freshness_s",
        "error",
    }
)


def artifacts_dir() -> Path:
    """The artifacts folder the page reads (``$SOLARIS_ARTIFACTS_DIR``, default ``artifacts``)."""
    return Path(os.environ.get(ARTIFACTS_ENV) or "artifacts")


def load_runs(root: Path) -> dict[str, list[dict[str, Any]]]:
    """The run records under ``root`` (``artifacts_dir``) by DAG id, newest first.

    A record that is valid JSON but not an object is reported as an error record, like one
    that does not parse, so that every record the page shows is a dict.
    """
    runs = read_all_run_records(Path(root))
    out: dict[str, list[dict[str, Any]]] = {}
    for dag_id, records in runs.items():
        out[dag_id] = [
            record
            if isinstance(record, dict)
            else {"dag_id": dag_id, "error": f"not a JSON object: {record!r}"[:200]}
            for record in records
        ]
    return out


# -- formatting: every formatter takes any JSON value and never raises ----------------------


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _guard(fmt: Callable[[Any], str]) -> Callable[[Any], str]:
    """``fmt``, except that a missing value shows as "–" and an unexpected one as itself."""

    def safe(value: Any) -> str:
        if value is None:
            return MISSING
        try:
            return fmt(value)
        except (TypeError, ValueError, OverflowError, OSError, AttributeError):
            return str(value)

    return safe


@_guard
def fmt_time(value: Any) -> str:
    """Epoch seconds as UTC ISO 8601, to the second."""
    seconds = _number(value)
    if seconds is None:
        return str(value)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@_guard
def fmt_count(value: Any) -> str:
    number = _number(value)
    if number is None:
        return str(value)
    return f"{number:,.0f}" if number.is_integer() else f"{number:,.3g}"


@_guard
def fmt_share(value: Any) -> str:
    share = _number(value)
    return str(value) if share is None else f"{100 * share:.1f}%"


@_guard
def fmt_age(value: Any) -> str:
    """An age in seconds, in the unit that reads best."""
    seconds = _number(value)
    if seconds is None:
        return str(value)
    if abs(seconds) < 120:
        return f"{seconds:.0f} s"
    if abs(seconds) < 2 * 3600:
        return f"{seconds / 60:.1f} min"
    if abs(seconds) < 2 * 86_400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86_400:.1f} d"


@_guard
def fmt_seconds(value: Any) -> str:
    seconds = _number(value)
    return str(value) if seconds is None else f"{seconds:.1f}"


@_guard
def fmt_rows(value: Any) -> str:
    """An int, or a dict view -> int shown as ``view: n`` pairs with their total."""
    if not isinstance(value, dict):
        return fmt_count(value)
    if not value:
        return MISSING
    parts = [f"{view}: {fmt_count(n)}" for view, n in sorted(value.items())]
    counts = [_number(n) for n in value.values()]
    if len(value) > 1 and all(n is not None for n in counts):
        parts.append(f"total {fmt_count(sum(counts))}")
    return ", ".join(parts)


@_guard
def fmt_value(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def fmt_interval(record: dict[str, Any]) -> str:
    start, end = record.get("interval_start"), record.get("interval_end")
    if start is None and end is None:
        return str(record.get("key", MISSING))
    return f"{fmt_time(start)} → {fmt_time(end)}"


def fmt_selected(record: dict[str, Any]) -> str:
    selected, candidates = record.get("selected"), record.get("candidates")
    if selected is not None and candidates is not None:
        return f"{fmt_count(selected)} / {fmt_count(candidates)}"
    if candidates is not None:
        return f"{MISSING} / {fmt_count(candidates)}"
    return fmt_count(selected)


def fmt_details(record: dict[str, Any]) -> str:
    extra = sorted(k for k in record if k not in _COLUMN_KEYS)
    return ", ".join(f"{k}={fmt_value(record[k])}" for k in extra) or MISSING


def _coverage(record: dict[str, Any], tier: str) -> Any:
    coverage = record.get("coverage")
    return coverage.get(tier) if isinstance(coverage, dict) else None


# -- the page ---------------------------------------------------------------------------------

HEADERS = (
    "DAG",
    "run (interval, UTC)",
    "candidates selected",
    "FM passes",
    "rows written",
    *(f"coverage {tier}" for tier in TIERS),
    "embedding freshness",
    "seconds",
    "details",
)

_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #1d2733; }
h1 { font-size: 1.4rem; margin: 0 0 0.3rem; }
p.meta { color: #5b6675; margin: 0 0 1rem; }
table { border-collapse: collapse; font-size: 0.85rem; }
th, td { border: 1px solid #d5dbe3; padding: 0.3rem 0.5rem; text-align: right; }
th { background: #eef2f6; position: sticky; top: 0; }
td.text, th.text { text-align: left; }
tr.dag-start td { border-top: 2px solid #8a96a6; }
tr.error td { background: #fdecec; color: #8a1c1c; }
.empty { padding: 1rem; background: #f5f7fa; border: 1px dashed #b8c1cc; max-width: 50rem; }
code { background: #eef2f6; padding: 0 0.2rem; }
"""


def _cell(text: str, *, left: bool = False) -> str:
    css = ' class="text"' if left else ""
    return f"<td{css}>{html.escape(text)}</td>"


def _row(record: dict[str, Any], dag_id: str, *, first: bool) -> str:
    dag = str(record.get("dag_id", dag_id))
    classes = ["dag-start"] if first else []
    if "error" in record:
        classes.append("error")
        key = str(record.get("key", MISSING))
        message = f"unreadable run record {key}: {record['error']}"
        cells = _cell(dag, left=True) + (
            f'<td class="text" colspan="{len(HEADERS) - 1}">{html.escape(message)}</td>'
        )
    else:
        cells = "".join(
            [
                _cell(dag, left=True),
                _cell(fmt_interval(record), left=True),
                _cell(fmt_selected(record)),
                _cell(fmt_count(record.get("fm_passes"))),
                _cell(fmt_rows(record.get("rows_written")), left=True),
                *(_cell(fmt_share(_coverage(record, tier))) for tier in TIERS),
                _cell(fmt_age(record.get("freshness_s"))),
                _cell(fmt_seconds(record.get("seconds"))),
                _cell(fmt_details(record), left=True),
            ]
        )
    css = f' class="{" ".join(classes)}"' if classes else ""
    return f"<tr{css}>{cells}</tr>"


def render_page(runs: dict[str, list[dict[str, Any]]], root: Path) -> str:
    """The HTML page of ``runs`` (as :func:`load_runs` returns them), read from ``root``."""
    where = html.escape(str(Path(root) / "namespaces"))
    n_runs = sum(len(records) for records in runs.values())
    if n_runs == 0:
        body = (
            '<div class="empty"><strong>No runs yet.</strong> '
            f"There are no run records under <code>{where}</code>. Each SOLARIS DAG task "
            "writes one when its run finishes; unpause the DAGs (or trigger one) and reload "
            "this page. The folder is "
            f"<code>${ARTIFACTS_ENV}/namespaces/&lt;namespace&gt;/runs</code>.</div>"
        )
    else:
        head = "".join(
            f'<th class="text">{html.escape(h)}</th>' if i < 2 else f"<th>{html.escape(h)}</th>"
            for i, h in enumerate(HEADERS)
        )
        rows = [
            _row(record, dag_id, first=i == 0)
            for dag_id, records in sorted(runs.items())
            for i, record in enumerate(records)
        ]
        body = f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    summary = f"{n_runs} run record(s) from {len(runs)} DAG(s), newest first, read from {where}"
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>SOLARIS runs</title><style>{_CSS}</style></head><body>"
        f'<h1>SOLARIS cycle runs</h1><p class="meta">{summary}</p>{body}</body></html>'
    )


def create_app(root: Path | None = None) -> FastAPI:
    """The SOLARIS FastAPI app; ``root`` is the artifacts folder (default: :func:`artifacts_dir`,
    read on every request)."""
    api = FastAPI(title="SOLARIS", description="Run records of the SOLARIS Airflow DAGs.")

    def current_root() -> Path:
        return Path(root) if root is not None else artifacts_dir()

    @api.get("/", response_class=HTMLResponse)
    def page() -> HTMLResponse:
        where = current_root()
        return HTMLResponse(render_page(load_runs(where), where))

    @api.get("/api/runs")
    def runs() -> dict[str, Any]:
        where = current_root()
        return {"artifacts_dir": str(where), "dags": load_runs(where)}

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
