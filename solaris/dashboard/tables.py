"""The SOLARIS page's per-DAG tables: one row per run, every figure formatted.

A figure with a column of its own (requests, coverage per tier, serving figures, rows written,
run time) is shown there; the rest of a record goes to "other figures" as a ``key: value``
list, never a raw dict. A record that did not parse is a row that says so.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from solaris.dashboard.formatting import (
    MISSING,
    figure_html,
    fmt_figure,
    fmt_interval,
    fmt_share,
    fmt_time,
)
from solaris.dashboard.records import SERVING_FIGURES, TIERS, nested, record_time
from solaris.orchestration.layout import INTERVAL_KEYS

__all__ = ["MAX_TABLE_ROWS", "dag_table"]

# A long time range stays a page: each table shows its newest runs (and a long line loses
# its per-point markers: solaris.dashboard.charts.MAX_MARKERS).
MAX_TABLE_ROWS = 200
# Keys the page shows elsewhere (the row's interval, the namespace and its badge).
_IDENTITY_KEYS = frozenset({"dag_id", "key", "namespace", "replay", *INTERVAL_KEYS})


@dataclass(frozen=True)
class _Column:
    header: str
    cell: Callable[[Mapping[str, Any]], str]  # HTML
    text: bool = False  # left-aligned


def _cell_number(key: str) -> Callable[[Mapping[str, Any]], str]:
    return lambda r: html.escape(fmt_figure(key, r.get(key)))


def _coverage_cell(tier: str) -> Callable[[Mapping[str, Any]], str]:
    return lambda r: html.escape(fmt_share(nested(r, "coverage", tier)))


def _serving_cell(key: str) -> Callable[[Mapping[str, Any]], str]:
    return lambda r: html.escape(fmt_figure(key, nested(r, "serving", key)))


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
                    _coverage_cell(tier),
                )
            )
        used.add("coverage")
    if "freshness_s" in has:
        cols.append(_Column("embedding freshness", _cell_number("freshness_s")))
        used.add("freshness_s")
    if any(isinstance(r.get("serving"), Mapping) for r in records):
        for key, header in SERVING_FIGURES:
            cols.append(_Column(header, _serving_cell(key)))
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


def dag_table(dag_id: str, records: Sequence[Mapping[str, Any]]) -> str:
    """The HTML section of one DAG's runs (newest first), at most :data:`MAX_TABLE_ROWS` rows."""
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
