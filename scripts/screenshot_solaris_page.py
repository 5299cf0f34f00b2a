"""Write ``docs/images/solaris-page.png``: the SOLARIS page over synthetic run records.

docs/airflow.md shows the page as an operator sees it, so the picture has to come from the
page's own code, not a mock-up, and from data anyone may publish (never MovieLens). This
script seeds a day of made-up runs of every SOLARIS DAG into a temporary artifacts folder
(:func:`seed_run_records`: a ``live`` namespace and a replay, each with serving figures),
renders the page with the plugin's :func:`render_page` for one namespace, and takes the
picture in headless Chromium (Debian's ``/usr/bin/chromium`` driven by Playwright; no
browser is downloaded). The page has no script and loads nothing, so what the script
renders is what ``GET /solaris/`` serves.

Usage::

    .venv/bin/python scripts/screenshot_solaris_page.py [--out docs/images/solaris-page.png]
        [--namespace live] [--chromium /usr/bin/chromium]

The browser test (``tests/integration/test_solaris_page_browser.py``) seeds the same records.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

from solaris.namespace import Namespace
from solaris.orchestration.layout import CycleLayout, Interval, write_run_record

__all__ = ["LIVE", "REPLAY", "load_plugin", "main", "render", "seed_run_records"]

REPO = Path(__file__).resolve().parents[1]
PLUGIN_FILE = REPO / "plugins" / "solaris_plugin.py"
LIVE = "live"
REPLAY = "replay_synth"
# Synthetic times: the live cycle on 2026-11-30, the replay on a made-up day of 2023.
_STARTS = {LIVE: 1_795_996_800, REPLAY: 1_700_006_400}  # both midnight UTC
_HOUR = 3600


def seed_run_records(artifacts: Path, *, hours: int = 24, seed: int = 7) -> None:
    """Write ``hours`` hourly runs of the cycle's DAGs into the ``live`` and ``replay_synth``
    namespaces under ``artifacts``, as the tasks write them (plus the ``serving`` figures the
    live candidates runs carry). Deterministic for a given ``seed``; nothing is measured."""
    rng = random.Random(seed)
    for namespace, t0 in _STARTS.items():
        layout = CycleLayout(Namespace(namespace, artifacts, artifacts))
        replay = namespace == REPLAY
        for hour in range(hours):
            interval = Interval(t0 + hour * _HOUR, t0 + (hour + 1) * _HOUR)
            requests = rng.randint(900, 1500) if replay else rng.randint(300, 700)
            candidates = requests * 20
            selected = round(candidates * rng.uniform(0.045, 0.055))
            lag = 2 * _HOUR if hour in (9, 10) else _HOUR  # one embeddings run came late
            record: dict[str, Any] = {
                **interval.as_dict(),
                "namespace": namespace,
                "replay": replay,
                "requests": requests,
                "freshness_s": lag if hour else None,
                "candidates": candidates,
                "misses_drained": rng.randint(0, 40),
                "selected": selected,
                "fm_passes": round(selected * rng.uniform(0.8, 0.95)),
                "verifier": "vm-synthetic-2",
                "seconds": round(rng.uniform(4.0, 7.5), 3),
                "request_log": {
                    **interval.as_dict(),
                    "requests": requests,
                    "rows": candidates,
                    "late": rng.randint(0, 3),
                    "stale_dropped": 0,
                },
            }
            # Serving's metric windows carry wall-clock times, so only the live cycle has
            # them (a replay's record holds "serving": null, as select_interval writes it).
            record["serving"] = (
                None
                if replay
                else {
                    "requests": requests,
                    "failures": rng.choice((0, 0, 0, 1, 2)) if hour != 15 else 9,
                    "fetch_p50_ms": round(rng.uniform(1.1, 1.6), 2),
                    "fetch_p99_ms": round(rng.uniform(4.0, 7.0) + (6.0 if hour == 15 else 0), 2),
                    "miss_backlog": rng.randint(0, 30) + (200 if hour == 15 else 0),
                    "request_log_backlog": rng.randint(0, 12),
                }
            )
            # The near-line embedders' figures, as the live cycle's candidates runs read them
            # (no embedder serves a replay). No draw from rng: the other figures stay as they were.
            record["nearline"] = (
                None
                if replay
                else {
                    "consumers": 1,
                    "pairs_per_s": 3_900.0 + 10 * hour,
                    "embedded": 3_500_000 + 35_000 * hour,
                    "malformed": 0,
                    "lag_p95_s": 1.1 + (2.0 if hour == 15 else 0.0),
                    "backlog": 40 if hour == 15 else 0,
                    "pending": 0,
                }
            )
            if replay:  # only a replay knows the labels, so only it measures coverage
                warm = min(1.0, (hour + 4) / 16)
                pair = round(0.22 * warm + rng.uniform(-0.015, 0.015), 4)
                record["labelled"] = rng.randint(60, 110)
                record["coverage"] = {
                    "pair": pair,
                    "nbr": round(0.004 * warm, 4),
                    "uagg": round(0.45 * warm + rng.uniform(-0.02, 0.02), 4),
                    "iagg": round(0.86 * warm + rng.uniform(-0.02, 0.02), 4),
                    "any": round(0.93 * warm + rng.uniform(-0.01, 0.01), 4),
                }
                record["main_tier_share"] = {"pair": pair, "iagg": 0.61, "none": 0.07}
            write_run_record(layout, "solaris_candidates", interval.key, record)
            embedded = record["fm_passes"]
            write_run_record(
                layout,
                "solaris_embeddings",
                interval.key,
                {
                    **interval.as_dict(),
                    "intervals": [interval.as_dict()],
                    "shards": 1,
                    "fm_passes": embedded,
                    "rows_written": {"pair": embedded},
                    "pairs_per_second": round(embedded / rng.uniform(4.0, 6.0), 1),
                    "seconds": round(rng.uniform(5.0, 8.0), 3),
                    "computed_at": interval.end,
                },
            )
            for view, rows in (
                ("uagg", rng.randint(180, 260)),
                ("iagg", rng.randint(300, 420)),
                ("nbr", rng.randint(0, 40)),
            ):
                write_run_record(
                    layout,
                    "solaris_enrichment",
                    f"{interval.end:011d}-{view}",
                    {
                        "interval_end": interval.end,
                        "view": view,
                        "rows_written": {view: rows},
                        "seconds": round(rng.uniform(8.0, 12.0), 3),
                    },
                )
        as_of = t0 + hours * _HOUR
        write_run_record(
            layout,
            "solaris_clustering",
            f"{as_of:011d}-unn",
            {"interval_end": as_of, "view": "unn", "rows_written": {"unn": 943}, "seconds": 14.2},
        )
        write_run_record(
            layout,
            "solaris_training",
            f"{as_of:011d}",
            {
                "interval_end": as_of,
                "labelled": 2210,
                "published": True,
                "val_logloss": 0.4831,
                "seconds": 41.7,
            },
        )


def load_plugin() -> ModuleType:
    """``plugins/solaris_plugin.py`` loaded as Airflow's plugin manager loads it."""
    name = "solaris_plugin"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, PLUGIN_FILE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def render(artifacts: Path, namespace: str) -> str:
    """The page ``GET /solaris/?namespace=<namespace>`` serves for the records under
    ``artifacts`` (a user who may read every DAG's runs)."""
    plugin = load_plugin()
    filters = plugin.parse_filters(namespace, None, None, None)
    return plugin.render_page(plugin.load_runs(artifacts), artifacts, filters)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "images" / "solaris-page.png")
    parser.add_argument("--namespace", default="live", help="the namespace shown")
    parser.add_argument("--chromium", type=Path, default=Path("/usr/bin/chromium"))
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=1250)
    args = parser.parse_args(argv)
    if not args.chromium.is_file():
        parser.error(f"no Chromium at {args.chromium}: apt-get install chromium, or --chromium")
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="solaris-page-") as tmp:
        artifacts = Path(tmp)
        seed_run_records(artifacts)
        page_html = render(artifacts, args.namespace)
        # The page names the folder it read; the picture shows a stable one instead of tmp.
        page_html = page_html.replace(str(artifacts / "namespaces"), "artifacts/namespaces")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(args.chromium))
        try:
            page = browser.new_page(viewport={"width": args.width, "height": args.height})
            page.set_content(page_html, wait_until="load")
            page.screenshot(path=str(args.out))
        finally:
            browser.close()
    print(f"wrote {args.out} ({args.out.stat().st_size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
