"""The MovieLens example's commands: ``solaris demo``, ``replay``, ``report`` and ``data
fetch``, added to the ``solaris`` command by the ``solaris.commands`` entry point (see
``pyproject.toml``), so that the product's CLI imports no example."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Annotated

import typer

from solaris.cli import ConfigOption, load_config, namespace_arg, writable_folder
from solaris.examples.movielens.settings import with_adapters

__all__ = ["data_fetch", "demo", "register", "replay_command", "report_command"]


def register(app: typer.Typer, data_app: typer.Typer) -> None:
    """Add the example's commands to ``app`` and its ``data`` group."""
    data_app.command("fetch")(data_fetch)
    app.command("demo")(demo)
    app.command("replay")(replay_command)
    app.command("report")(report_command)


def data_fetch(
    config: ConfigOption = None,
    force: Annotated[bool, typer.Option(help="download again even if cached")] = False,
) -> None:
    """Unpack MovieLens-100K from the recbole==1.2.1 wheel into the cache directory."""
    from solaris.examples.movielens.fetch import fetch_movielens

    folder = fetch_movielens(load_config(config).data, force=force)
    typer.echo(f"MovieLens-100K ready in {folder}")


def demo(
    config: ConfigOption = None,
    airflow: Annotated[
        bool, typer.Option(help="after the offline stage, run the cycle through Airflow DAGs")
    ] = True,
    namespace: Annotated[
        str, typer.Option(help="namespace of the replay (Feast project, streams, state folder)")
    ] = "demo",
    force: Annotated[
        bool, typer.Option(help="reset and replay into a namespace that holds live state")
    ] = False,
) -> None:
    """Run the SOLARIS cycle on MovieLens-100K (offline, then through Airflow); print figures.
    The models it trains are a new model version, pinned for the namespace; the namespace's
    earlier state is reset first. A namespace holding live state is refused before any
    training (with or without --no-airflow), unless --force."""
    namespace_arg(namespace, "--namespace")
    from solaris.examples.movielens.demo import run_demo
    from solaris.model_versions import refuse_live_pin
    from solaris.orchestration.resources import live_state, refuse_live

    deployment = load_config(config)
    # Refused before the offline stage's minutes, not after them.
    live = live_state(deployment, namespace)
    if airflow:
        refuse_live(deployment, namespace, "replay into", force=force)
    refuse_live_pin(
        namespace,
        live,
        f"train the demo's models and pin them for namespace {namespace!r}",
        f"`solaris demo --namespace {namespace} --force`",
        force=force,
    )
    cfg = with_adapters(load_config(config, namespace=namespace))
    run_demo(cfg, airflow=airflow, echo=typer.echo, force=force, live=live)


_SELECTORS = ("verifier", "random", "oracle")


def replay_command(
    config: ConfigOption = None,
    share: Annotated[float | None, typer.Option(help="selection share per request")] = None,
    ttl_hours: Annotated[float | None, typer.Option(help="cache TTL")] = None,
    cadence_minutes: Annotated[float | None, typer.Option(help="refresh cadence")] = None,
    selector: Annotated[str, typer.Option(help="verifier | random | oracle")] = "verifier",
    nearline_seconds: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="the near-line path instead of the cadence: codes usable this many seconds "
            "after the request (make bench measures it)",
        ),
    ] = None,
    refresh_after_requests: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="refresh on activity: a code counts as stale after this many of the user's "
            "requests since it was written (nearline.refresh_after_requests)",
        ),
    ] = None,
    refresh_share: Annotated[
        float | None,
        typer.Option(
            min=0.0,
            max=1.0,
            help="with --refresh-after-requests: each request refreshes its best stale codes "
            "up to this share of its candidates (default nearline.refresh_share)",
        ),
    ] = None,
) -> None:
    """Replay the request log with the trained verifier and report native pair coverage.

    Needs the artifacts of a previous `solaris demo` (request log and models).
    """
    from pydantic import ValidationError

    if selector not in _SELECTORS:
        raise typer.BadParameter(
            f"{selector!r} is not one of {', '.join(_SELECTORS)}", param_hint="--selector"
        )
    if refresh_share == 0:
        raise typer.BadParameter(
            "0 refreshes nothing; give a share in (0, 1]", param_hint="--refresh-share"
        )
    cfg = with_adapters(load_config(config))
    overrides = {"share": share, "ttl_hours": ttl_hours, "cadence_minutes": cadence_minutes}
    given = {k: v for k, v in overrides.items() if v is not None}
    # Validated like the config file would be, before any data is loaded.
    try:
        selection = type(cfg.selection).model_validate({**cfg.selection.model_dump(), **given})
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        name = str(error["loc"][0]) if error["loc"] else "share"
        raise typer.BadParameter(
            f"{error['msg']} (got {error.get('input')!r})",
            param_hint="--" + name.replace("_", "-"),
        ) from None
    from solaris.examples.movielens.replay import replay_from_artifacts

    try:
        result = replay_from_artifacts(
            cfg,
            selection,
            selector,
            nearline_seconds,
            refresh_after_requests,
            cfg.nearline.refresh_share if refresh_share is None else refresh_share,
        )
    except FileNotFoundError as exc:  # no demo ran here yet: say so, not a traceback
        typer.echo(f"Error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(
        f"{selector}: native pair coverage {result.coverage:.1%} "
        f"({result.n_hits:,}/{result.n_eval_impressions:,} test-period impressions), "
        f"{result.fm_passes_per_1k_requests:,.0f} FM passes per 1,000 requests "
        + (
            f"({1000 * result.n_refreshed_eval / max(result.n_eval_requests, 1):,.0f} of them "
            "refreshes) "
            if refresh_after_requests is not None
            else ""
        )
        + f"[share {selection.share:g}, TTL {selection.ttl_hours:g} h, "
        + (
            f"near-line, codes usable {nearline_seconds} s after the request"
            if nearline_seconds is not None
            else f"cadence {selection.cadence_minutes:g} min"
        )
        + (
            f", refresh after {refresh_after_requests} request(s) on "
            f"{cfg.nearline.refresh_share if refresh_share is None else refresh_share:g}]"
            if refresh_after_requests is not None
            else "]"
        )
    )


def report_command(
    config: ConfigOption = None,
    seeds: Annotated[
        str, typer.Option(help="comma-separated seeds, each run in every window (at least 2)")
    ] = "0,1",
    windows: Annotated[
        int, typer.Option(help="rolling-origin windows: consecutive test periods (at least 3)")
    ] = 3,
    out: Annotated[Path, typer.Option(help="folder of the report and its plots")] = Path("reports"),
) -> None:
    """Reproduce the paper's tables on the MovieLens-100K replay -> reports/solaris_report.md."""
    try:
        parsed = tuple(int(s) for s in seeds.split(",") if s.strip())
    except ValueError:
        raise typer.BadParameter(
            f"{seeds!r} is not a comma-separated list of integers", param_hint="--seeds"
        ) from None
    # Checked now, not after the runs (tens of minutes).
    if len(set(parsed)) < 2 or len(set(parsed)) != len(parsed) or min(parsed) < 0:
        raise typer.BadParameter(
            f"{seeds!r}: give at least 2 distinct seeds >= 0 (the report's intervals resample "
            "seeds within each window)",
            param_hint="--seeds",
        )
    if windows < 3:
        raise typer.BadParameter(
            f"{windows}: give at least 3 windows (the report's claims are over consecutive "
            "test periods)",
            param_hint="--windows",
        )
    writable_folder(out, "--out")
    if importlib.util.find_spec("matplotlib") is None:  # the report extra, not a dependency
        raise typer.BadParameter(
            "the report draws its plots with matplotlib, which is not installed: "
            'pip install -c constraints.txt -e ".[report]" (make report does it)',
            param_hint="report",
        )
    from solaris.examples.movielens.report.run import run_report
    from solaris.examples.movielens.report.settings import ReportSettings

    settings = ReportSettings(seeds=parsed, windows=windows)
    run_report(with_adapters(load_config(config)), settings, out_dir=out, echo=typer.echo)
