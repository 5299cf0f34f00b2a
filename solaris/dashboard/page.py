"""The SOLARIS page as HTML: the filter form, the plots and the per-DAG tables.

Plain HTML and inline CSS, no script and no network. :func:`render_page` is a pure function
of the run records, the state root they were read from, the parsed filters, the live
namespace's name and what the user may read.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from solaris.dashboard.charts import svg_chart
from solaris.dashboard.filters import Filters
from solaris.dashboard.formatting import fmt_time
from solaris.dashboard.plots import build_charts
from solaris.dashboard.records import Selection, record_time, select_runs
from solaris.dashboard.tables import dag_table
from solaris.files import StatePath, state_path

__all__ = ["ARTIFACTS_ENV", "STATE_URI_ENV", "render_page"]

# The variables of the state root (cycle.state_uri, else artifacts_dir), named by the page
# when it has no runs to show.
ARTIFACTS_ENV = "SOLARIS_ARTIFACTS_DIR"
STATE_URI_ENV = "SOLARIS_CYCLE__STATE_URI"

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
    live: str,
    may_read: Callable[[str], bool] = lambda dag_id: True,
    problem: str | None = None,
    raw: Mapping[str, str | None] | None = None,
) -> str:
    """The HTML page of ``runs`` (as :func:`solaris.dashboard.records.load_runs` returns
    them), read from ``root``, for ``filters``, the live cycle's namespace ``live`` and a
    user who may read the runs of the DAGs ``may_read`` accepts. ``problem`` (a bad query
    parameter) is shown above the form instead of any run."""
    filters = filters or Filters()
    where = html.escape(str(state_path(root) / "namespaces"))
    selection = select_runs(runs, filters, may_read, live=live)
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
        dag_table(dag_id, records) for dag_id, records in sorted(selection.runs.items())
    )
    body = f'<h2>Over time</h2><div class="charts">{charts}</div><h2>Runs</h2>{tables}'
    return _page(title, form + hidden + body)
