"""The ``solaris`` command. Each command builds the config once and calls into the library.

Bad arguments are usage errors (exit 2) that name the option; any other error SOLARIS raises
on purpose (:class:`~solaris.errors.SolarisError`: a bad setting, a missing input) is one
``Error: ...`` line on stderr and exit 1, never a traceback. Arguments are checked before
anything is read or written.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from solaris.config import SolarisConfig
from solaris.errors import SolarisError
from solaris.namespace import NAME_PATTERN

__all__ = [
    "cycle_command",
    "data_fetch",
    "data_synth",
    "demo",
    "fit_autoencoder_command",
    "namespace_reset",
    "replay_command",
    "report_command",
    "serve_command",
]


class _SolarisGroup(TyperGroup):
    """The top-level command group: a :class:`SolarisError` from any command becomes its
    message on stderr and exit status 1."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except SolarisError as exc:
            typer.echo(f"Error: {exc}", err=True)
            raise typer.Exit(1) from None


app = typer.Typer(
    cls=_SolarisGroup,
    help="SOLARIS: FM embeddings precomputed for a vertical recommender.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
data_app = typer.Typer(help="Obtain and generate data.", no_args_is_help=True)
app.add_typer(data_app, name="data")
namespace_app = typer.Typer(help="The namespaces the cycle runs in.", no_args_is_help=True)
app.add_typer(namespace_app, name="namespace")

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config", "-c", exists=True, dir_okay=False, help="YAML config (else $SOLARIS_CONFIG)"
    ),
]


def _config(path: Path | None, **overrides: object):
    return SolarisConfig.load(path, **overrides)


def _redis_option(redis: str | None, cfg: SolarisConfig) -> str:
    """``--redis``, else ``store.redis``, checked against ``store.redis_type``; a usage error
    naming ``--redis`` when there is none or it cannot be used."""
    connection = redis or cfg.store.redis
    if not connection:
        raise typer.BadParameter(
            "no Redis to read: pass --redis host:port or set store.redis in the config",
            param_hint="--redis",
        )
    from solaris.store.connection import ConnectionStringError, RedisTarget

    try:
        RedisTarget.parse(connection).check(cfg.store.redis_type)
    except ConnectionStringError as exc:
        raise typer.BadParameter(str(exc), param_hint="--redis") from None
    return connection


def _namespace_arg(value: str, hint: str) -> str:
    """``value`` when it is a namespace name; a usage error naming ``hint`` otherwise."""
    if not re.match(NAME_PATTERN, value):
        raise typer.BadParameter(
            f"{value!r} is not a namespace name: lower-case letters, digits and '_', "
            "starting with a letter, at most 40",
            param_hint=hint,
        )
    return value


@data_app.command("fetch")
def data_fetch(
    config: ConfigOption = None,
    force: Annotated[bool, typer.Option(help="download again even if cached")] = False,
) -> None:
    """Unpack MovieLens-100K from the recbole==1.2.1 wheel into the cache directory."""
    from solaris.examples.movielens.fetch import fetch_movielens

    folder = fetch_movielens(_config(config).data, force=force)
    typer.echo(f"MovieLens-100K ready in {folder}")


@data_app.command("synth")
def data_synth(
    out: Annotated[Path, typer.Option(help="parquet file to write")],
    pairs: Annotated[int, typer.Option(help="candidate rows to generate")] = 1_000_000,
    users: int = 100_000,
    items: int = 50_000,
    seed: int = 0,
) -> None:
    """Write a seeded synthetic candidate log (Zipf items, heavy-tailed users) for scale tests."""
    for value, hint in ((pairs, "--pairs"), (users, "--users"), (items, "--items")):
        if value < 1:
            raise typer.BadParameter(f"must be a positive integer, got {value}", param_hint=hint)
    _writable_file(out, "--out")
    from solaris.data.synthetic import SyntheticSpec, write_synthetic

    try:
        spec = SyntheticSpec(n_pairs=pairs, n_users=users, n_items=items, seed=seed)
    except ValueError as exc:  # the spec's own limits (e.g. n_items within int32)
        raise typer.BadParameter(str(exc)) from None
    rows = write_synthetic(spec, out)
    typer.echo(f"wrote {rows:,} candidate rows to {out}")


@app.command()
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
    The namespace's earlier state is reset first; one holding live state is refused."""
    _namespace_arg(namespace, "--namespace")
    from solaris.examples.movielens.demo import run_demo
    from solaris.orchestration.resources import refuse_live

    if airflow:  # refused before the offline stage's minutes, not after them
        refuse_live(_config(config), namespace, "replay into", force=force)
    cfg = _config(config, namespace=namespace)
    run_demo(cfg, airflow=airflow, echo=typer.echo, force=force)


@app.command("cycle")
def cycle_command(
    start: Annotated[
        str, typer.Option(help="start of the measured period (ISO 8601); a warm-up day precedes")
    ],
    namespace: Annotated[
        str | None,
        typer.Option(
            help="the replay's namespace (its state is reset first); default: the config's"
        ),
    ] = None,
    config: ConfigOption = None,
    force: Annotated[
        bool, typer.Option(help="reset and replay into a namespace that holds live state")
    ] = False,
) -> None:
    """Replay your traffic (requests.source) through the five DAGs in this process
    (dag.test), as `make demo` does: cycle.demo_days from --start at
    cycle.demo_cadence_minutes, in a replay namespace whose earlier state is reset; prints
    the figures. Refuses a namespace that holds live state (the live one, the settings' own
    when they are not a replay's, one whose cycle ran live) unless --force."""
    eval_from = _epoch_option(start, "--start")
    if namespace is not None:
        _namespace_arg(namespace, "--namespace")
    deployment = _config(config)
    cfg = _config(config, **({"namespace": namespace} if namespace else {}))
    from solaris.local.demo import run_airflow_stage
    from solaris.namespace import Namespace
    from solaris.orchestration.resources import refuse_live
    from solaris.pipeline.codes import read_manifest

    refuse_live(deployment, cfg.namespace, "replay into", force=force)
    manifest = read_manifest(Namespace.of(cfg).models_dir)
    run_airflow_stage(
        cfg,
        eval_from=eval_from,
        fm_version=manifest.fm_version,
        echo=typer.echo,
        force=force,
    )


@app.command("serve")
def serve_command(
    namespace: Annotated[
        str | None,
        typer.Option(help="the namespace whose features are served; default: the config's"),
    ] = None,
    host: Annotated[str, typer.Option(help="address to listen on (loopback by default)")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option(min=0, max=65535, help="port to listen on")] = 8080,
    workers: Annotated[
        int, typer.Option(min=1, max=256, help="worker processes on the one port")
    ] = 1,
    redis: Annotated[
        str | None, typer.Option(help="Redis connection string; default: the config's store.redis")
    ] = None,
    fm_version: Annotated[
        str | None,
        typer.Option(help="the version the VM was trained with; default: the namespace's codes"),
    ] = None,
    metrics_dir: Annotated[
        Path | None,
        typer.Option(help="folder where the workers' metric counts meet (default: a temp one)"),
    ] = None,
    config: ConfigOption = None,
) -> None:
    """Serve features over HTTP to callers in any language: POST /v1/features answers one
    user x items as one Arrow IPC record batch (docs/serving_http.md); GET /metrics sums
    every worker's counts. Stops on Ctrl-C or SIGTERM."""
    if namespace is not None:
        _namespace_arg(namespace, "--namespace")
    cfg = _config(config, **({"namespace": namespace} if namespace else {}))
    connection = _redis_option(redis, cfg)
    if fm_version is None:
        from solaris.namespace import Namespace
        from solaris.pipeline.codes import read_manifest

        fm_version = read_manifest(Namespace.of(cfg).models_dir).fm_version
    from solaris.serving.http import run

    typer.echo(
        f"serving namespace {cfg.namespace!r} (fm_version {fm_version}) on "
        f"http://{host}:{port}/v1/features with {workers} worker(s)"
    )
    run(
        cfg,
        redis=connection,
        fm_version=fm_version,
        host=host,
        port=port,
        workers=workers,
        metrics_dir=metrics_dir,
    )


@app.command("nearline")
def nearline_command(
    namespace: Annotated[
        str | None,
        typer.Option(help="the namespace whose embed stream is read; default: the config's"),
    ] = None,
    redis: Annotated[
        str | None, typer.Option(help="Redis connection string; default: the config's store.redis")
    ] = None,
    consumer: Annotated[
        str | None,
        typer.Option(help="this consumer's name in the group; default: <host>-<pid>"),
    ] = None,
    log_every: Annotated[
        float, typer.Option(min=0.1, help="seconds between throughput/lag/backlog lines")
    ] = 10.0,
    threads: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="torch's CPU threads (default: torch's); 1 leaves cores to a serving "
            "process on the same host",
        ),
    ] = None,
    config: ConfigOption = None,
) -> None:
    """Embed the pairs serving selects, seconds after the request (docs/nearline.md): reads
    the namespace's embed stream through a consumer group; FM -> autoencoder -> the pair
    view, as the cycle writes it. Run several on one stream to split it. Stops on Ctrl-C
    or SIGTERM after the batch in hand."""
    import logging
    import signal

    if namespace is not None:
        _namespace_arg(namespace, "--namespace")
    cfg = _config(config, **({"namespace": namespace} if namespace else {}))
    connection = _redis_option(redis, cfg)
    from solaris.orchestration.nearline import NearlineEmbedder

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if threads is not None:
        import torch

        torch.set_num_threads(threads)
    embedder = NearlineEmbedder(cfg, connection, consumer=consumer, log_every_s=log_every)
    for stop in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop, lambda *_: embedder.stop())
    typer.echo(
        f"near-line embedder {embedder.consumer} on {embedder.stream} "
        f"(group {embedder.group}, fm_version {embedder.fm_version})"
    )
    try:
        stats = embedder.run()
    finally:
        embedder.close()
    typer.echo(f"stopped: {stats.figures()}")


@namespace_app.command("reset")
def namespace_reset(
    name: Annotated[str, typer.Argument(help="the namespace to forget")],
    config: ConfigOption = None,
    force: Annotated[
        bool, typer.Option(help="allow resetting a namespace that holds live state")
    ] = False,
) -> None:
    """Delete one namespace's state: its Redis keys and streams (<name>:*), its cycle folder
    and its offline parquet. Other namespaces are not touched. A namespace that holds live
    state (the live one, the settings' own when they are not a replay's, one whose cycle ran
    on live traffic) is refused unless --force."""
    _namespace_arg(name, "NAME")
    deployment = _config(config)
    cfg = _config(config, namespace=name)
    from solaris.namespace import Namespace
    from solaris.orchestration.resources import cycle_redis, reset_namespace

    reset_namespace(cfg, cycle_redis(cfg), deployment=deployment, force=force)
    typer.echo(f"reset {Namespace.of(cfg).describe()}")


@namespace_app.command("apply")
def namespace_apply(
    name: Annotated[
        str | None, typer.Argument(help="the namespace; default: the config's (live)")
    ] = None,
    config: ConfigOption = None,
) -> None:
    """Register the namespace's Feast definitions (its project), as a deploy step: the
    cycle's tasks then only check them. `make airflow` runs it for the configured namespace;
    a namespace first used without it is applied by its first task."""
    if name is not None:
        _namespace_arg(name, "NAME")
    cfg = _config(config, **({"namespace": name} if name else {}))
    from solaris.namespace import Namespace
    from solaris.orchestration.resources import cycle_redis
    from solaris.store.feast_store import ensure_definitions, open_feature_store

    store = open_feature_store(cfg, cycle_redis(cfg))
    applied = ensure_definitions(store, cfg)
    state = "applied" if applied else "already applied, unchanged"
    typer.echo(f"Feast definitions of {Namespace.of(cfg).describe()}: {state}")


@app.command("fit-autoencoder")
def fit_autoencoder_command(
    start: Annotated[str, typer.Option(help="first request time of the sample (ISO 8601)")],
    end: Annotated[str, typer.Option(help="end of the sample, exclusive (ISO 8601)")],
    config: ConfigOption = None,
    max_pairs: Annotated[
        int, typer.Option(help="most pairs to train on (seeded sample)")
    ] = 200_000,
) -> None:
    """Train the autoencoder h -> z on your FM (model.foundation), from the pairs of your
    traffic (requests.source) in [start, end); writes it and codes.json to the models folder."""
    first, last = _epoch_option(start, "--start"), _epoch_option(end, "--end")
    if last <= first:
        raise typer.BadParameter(f"{end!r} is not after --start {start!r}", param_hint="--end")
    if max_pairs < 1:
        raise typer.BadParameter(f"must be >= 1, got {max_pairs}", param_hint="--max-pairs")
    from solaris.pipeline.codes import fit_autoencoder_from_traffic

    manifest, mse = fit_autoencoder_from_traffic(_config(config), first, last, max_pairs)
    typer.echo(
        f"autoencoder for FM {manifest.fm}: fm_version {manifest.fm_version} "
        f"(h {manifest.shared_dim} -> z {manifest.z_dim}, reconstruction MSE {mse:.4f})"
    )


def _writable_file(path: Path, hint: str) -> None:
    """A usage error unless ``path`` can be written as a file: not a folder, its folder
    there and writable."""
    import os

    if path.is_dir():
        raise typer.BadParameter(f"{str(path)!r} is a folder; name a file in it", param_hint=hint)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        raise typer.BadParameter(
            f"{str(path)!r}: its folder {str(folder)!r} does not exist or is not writable",
            param_hint=hint,
        )


def _writable_folder(path: Path, hint: str) -> None:
    """A usage error unless ``path`` is (or can be made) a writable folder."""
    import os

    if path.exists() and not path.is_dir():
        raise typer.BadParameter(f"{str(path)!r} is a file, not a folder", param_hint=hint)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise typer.BadParameter(f"{str(path)!r}: {exc.strerror}", param_hint=hint) from None
    if not os.access(path, os.W_OK):
        raise typer.BadParameter(f"{str(path)!r} is not writable", param_hint=hint)


def _epoch_option(value: str, name: str) -> int:
    from datetime import datetime

    try:
        moment = datetime.fromisoformat(value)
    except ValueError as exc:
        raise typer.BadParameter(f"{value!r} is not ISO 8601", param_hint=name) from exc
    if moment.tzinfo is None:
        raise typer.BadParameter(f"{value!r} has no time zone (add +00:00)", param_hint=name)
    return int(moment.timestamp())


_SELECTORS = ("verifier", "random", "oracle")


@app.command("replay")
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
    cfg = _config(config)
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


@app.command("report")
def report_command(
    config: ConfigOption = None,
    seeds: Annotated[
        str, typer.Option(help="comma-separated seeds (at least 3 for the report)")
    ] = "0,1,2,3,4,5",
    out: Annotated[Path, typer.Option(help="folder of the report and its plots")] = Path("reports"),
) -> None:
    """Reproduce the paper's tables on the MovieLens-100K replay -> reports/solaris_report.md."""
    try:
        parsed = tuple(int(s) for s in seeds.split(",") if s.strip())
    except ValueError:
        raise typer.BadParameter(
            f"{seeds!r} is not a comma-separated list of integers", param_hint="--seeds"
        ) from None
    # Checked now, not after the seeds' runs (tens of minutes).
    if len(set(parsed)) < 3 or len(set(parsed)) != len(parsed) or min(parsed) < 0:
        raise typer.BadParameter(
            f"{seeds!r}: give at least 3 distinct seeds >= 0 (the report's intervals are "
            "over seeds)",
            param_hint="--seeds",
        )
    _writable_folder(out, "--out")
    if importlib.util.find_spec("matplotlib") is None:  # the report extra, not a dependency
        raise typer.BadParameter(
            "the report draws its plots with matplotlib, which is not installed: "
            'pip install -c constraints.txt -e ".[report]" (make report does it)',
            param_hint="report",
        )
    from solaris.examples.movielens.report.run import run_report
    from solaris.examples.movielens.report.settings import ReportSettings

    settings = ReportSettings(seeds=parsed)
    run_report(_config(config), settings, out_dir=out, echo=typer.echo)


if __name__ == "__main__":
    app()
