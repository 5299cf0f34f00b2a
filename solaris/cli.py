"""The ``solaris`` command. Each command builds the config once and calls into the library.

Bad arguments are usage errors (exit 2) that name the option; any other error SOLARIS raises
on purpose (:class:`~solaris.errors.SolarisError`: a bad setting, a missing input) is one
``Error: ...`` line on stderr and exit 1, never a traceback. Arguments are checked before
anything is read or written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from solaris.config import SolarisConfig
from solaris.connection import ENDPOINT_PORT, ConnectionStringError, RedisTarget
from solaris.errors import SolarisError
from solaris.namespace import NamespaceError, check_name

__all__ = [
    "ConfigOption",
    "cycle_command",
    "data_synth",
    "epoch_option",
    "fit_autoencoder_command",
    "load_config",
    "models_list",
    "models_promote",
    "namespace_arg",
    "namespace_repartition",
    "namespace_reset",
    "redis_option",
    "serve_command",
    "training_set_command",
    "writable_file",
    "writable_folder",
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


@data_app.callback()
def _data_group() -> None:
    """Obtain and generate data."""  # a group even with one command (`data synth` alone)


namespace_app = typer.Typer(help="The namespaces the cycle runs in.", no_args_is_help=True)
app.add_typer(namespace_app, name="namespace")

models_app = typer.Typer(
    help="Model versions and the one each namespace reads.", no_args_is_help=True
)
app.add_typer(models_app, name="models")

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config", "-c", exists=True, dir_okay=False, help="YAML config (else $SOLARIS_CONFIG)"
    ),
]


def load_config(path: Path | None, **overrides: object):
    return SolarisConfig.load(path, **overrides)


def redis_option(redis: str | None, cfg: SolarisConfig) -> RedisTarget:
    """``--redis`` parsed, else ``store.redis``, checked against ``store.redis_type``; a
    usage error naming ``--redis`` when there is none or it cannot be used."""
    try:
        target = RedisTarget.parse(redis) if redis else cfg.store.redis
        if target is None:
            raise typer.BadParameter(
                "no Redis to read: pass --redis host:port or set store.redis in the config",
                param_hint="--redis",
            )
        target.check(cfg.store.redis_type)
    except ConnectionStringError as exc:
        raise typer.BadParameter(str(exc), param_hint="--redis") from None
    return target


def namespace_arg(value: str, hint: str) -> str:
    """``value`` when it is a namespace name; a usage error naming ``hint`` otherwise."""
    try:
        return check_name(value)
    except NamespaceError as exc:
        raise typer.BadParameter(str(exc), param_hint=hint) from None


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
    writable_file(out, "--out")
    from solaris.data.synthetic import SyntheticSpec, write_synthetic

    try:
        spec = SyntheticSpec(n_pairs=pairs, n_users=users, n_items=items, seed=seed)
    except ValueError as exc:  # the spec's own limits (e.g. n_items within int32)
        raise typer.BadParameter(str(exc)) from None
    rows = write_synthetic(spec, out)
    typer.echo(f"wrote {rows:,} candidate rows to {out}")


@app.command("cycle")
def cycle_command(
    start: Annotated[
        str,
        typer.Option(
            help="start of the measured period (ISO 8601 with a zone, or epoch seconds); "
            "a warm-up day precedes"
        ),
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
    eval_from = epoch_option(start, "--start")
    if namespace is not None:
        namespace_arg(namespace, "--namespace")
    deployment = load_config(config)
    cfg = load_config(config, **({"namespace": namespace} if namespace else {}))
    import os

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
        config_file=config or os.environ.get("SOLARIS_CONFIG") or None,
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
    port: Annotated[int, typer.Option(min=0, max=65535, help="port to listen on")] = (
        ENDPOINT_PORT
    ),
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
    token_file: Annotated[
        Path | None,
        typer.Option(
            help="file holding the bearer token /v1/features, /v1/requests and /metrics "
            "require (or the SOLARIS_SERVE_TOKEN variable; never the token itself as a flag)"
        ),
    ] = None,
    allow_unauthenticated: Annotated[
        bool,
        typer.Option(help="serve on a non-loopback --host without a token (refused otherwise)"),
    ] = False,
    max_connections: Annotated[
        int, typer.Option(min=1, help="open connections per worker; more are answered 503")
    ] = 1024,
    header_timeout: Annotated[
        float,
        typer.Option(
            help="seconds a request's line and headers may take to arrive; a connection "
            "still sending them is answered 408 and closed",
        ),
    ] = 10.0,
    config: ConfigOption = None,
) -> None:
    """Serve features over HTTP to callers in any language: POST /v1/features answers one
    user x items as one Arrow IPC record batch (docs/serving_http.md); POST /v1/requests
    logs a served request for the cycle, as SolarisFeatures.log_request does; GET /metrics
    sums every worker's counts. Stops on Ctrl-C or SIGTERM."""
    import math
    import os

    if not (math.isfinite(header_timeout) and header_timeout > 0):
        raise typer.BadParameter(
            f"a finite number of seconds > 0 expected, got {header_timeout!r}",
            param_hint="--header-timeout",
        )
    if namespace is not None:
        namespace_arg(namespace, "--namespace")
    cfg = load_config(config, **({"namespace": namespace} if namespace else {}))
    from solaris.manifest import FmVersionError, check_fm_version, current_fm_version

    if fm_version is not None:
        try:
            check_fm_version(fm_version, "")  # BadParameter names --fm-version
        except FmVersionError as exc:
            raise typer.BadParameter(str(exc), param_hint="--fm-version") from None
    connection = redis_option(redis, cfg)
    if fm_version is None:
        fm_version = current_fm_version(cfg)  # the manifest's, checked as it is read
    from solaris.serving.http import run
    from solaris.store.feast_store import require_applied

    require_applied(cfg, connection)
    token = os.environ.get("SOLARIS_SERVE_TOKEN")
    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as exc:
            raise SolarisError(f"--token-file {token_file}: {exc.strerror or exc}") from None

    def listening(bound: int) -> None:
        guarded = "a bearer token" if token else "no token"
        typer.echo(
            f"serving namespace {cfg.namespace!r} (fm_version {fm_version}) on "
            f"http://{host}:{bound}/v1/features with {workers} worker(s), {guarded}"
        )

    run(
        cfg,
        redis=connection,
        fm_version=fm_version,
        host=host,
        port=port,
        workers=workers,
        metrics_dir=metrics_dir,
        token=token,
        allow_unauthenticated=allow_unauthenticated,
        max_connections=max_connections,
        header_timeout_s=header_timeout,
        on_listening=listening,
    )


@app.command("training-set")
def training_set_command(
    impressions: Annotated[
        str,
        typer.Option(
            help="parquet file or folder (local or fsspec URL) with user_id, item_id, ts "
            "(epoch seconds); other columns are carried through"
        ),
    ],
    out: Annotated[
        str,
        typer.Option(help="folder or URL prefix to write date=YYYY-MM-DD/part-NNNNN.parquet under"),
    ],
    namespace: Annotated[
        str | None,
        typer.Option(help="the namespace whose features are read; default: the config's"),
    ] = None,
    fm_version: Annotated[
        str | None,
        typer.Option(help="the version the VM is trained for; default: the namespace's codes"),
    ] = None,
    chunk_rows: Annotated[
        int, typer.Option(min=1, help="impressions per point-in-time join (memory grows with it)")
    ] = 50_000,
    overwrite: Annotated[
        bool, typer.Option(help="replace the training set --out already holds")
    ] = False,
    config: ConfigOption = None,
) -> None:
    """Write the point-in-time training set of your impressions (docs/training_set.md): for
    each, the features serving would have returned at its time (the offline rows visible
    then, assembled into tiers by the code serving uses), with presence masks, as parquet
    partitioned by day. Shows progress on stderr; prints one summary line."""
    import resource

    if namespace is not None:
        namespace_arg(namespace, "--namespace")
    cfg = load_config(config, **({"namespace": namespace} if namespace else {}))
    from solaris.serving.training_export import write_training_set

    written = write_training_set(
        cfg,
        impressions,
        out,
        fm_version=fm_version,
        chunk_rows=chunk_rows,
        overwrite=overwrite,
        progress=True,
    )
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    typer.echo(
        f"wrote {written.rows:,} training rows of namespace {cfg.namespace!r} (fm_version "
        f"{written.fm_version}) in {len(written.files)} files, {written.chunks} chunks, to "
        f"{out} in {written.seconds:.1f} s; peak RSS {peak_mb:,.0f} MB"
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
        namespace_arg(namespace, "--namespace")
    cfg = load_config(config, **({"namespace": namespace} if namespace else {}))
    connection = redis_option(redis, cfg)
    from solaris.orchestration.nearline import NearlineEmbedder
    from solaris.store.feast_store import require_applied

    require_applied(cfg, connection)

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
    namespace_arg(name, "NAME")
    deployment = load_config(config)
    cfg = load_config(config, namespace=name)
    from solaris.namespace import Namespace
    from solaris.orchestration.resources import cycle_redis, reset_namespace

    reset_namespace(cfg, cycle_redis(cfg), deployment=deployment, force=force)
    typer.echo(f"reset {Namespace.of(cfg).describe()}")


@namespace_app.command("repartition")
def namespace_repartition(
    name: Annotated[str, typer.Argument(help="the namespace to re-split")],
    partitions: Annotated[
        int, typer.Option("--partitions", help="its new partition count (cycle.partitions)")
    ],
    config: ConfigOption = None,
) -> None:
    """Change a namespace's partition count (cycle.partitions), re-splitting what is in
    flight: its request streams, its interval ledgers and request logs, its kept neighbour
    lists (state rebuilt when absent is removed). Stop its serving processes, near-line
    embedders and cycle DAGs first, then start them with the new count; every process is
    refused while it runs, and a rerun after a crash finishes it."""
    namespace_arg(name, "NAME")
    from solaris.store.partitions import PartitionError, Partitioning

    try:
        Partitioning(partitions)
    except PartitionError as exc:
        raise typer.BadParameter(str(exc), param_hint="--partitions") from None
    cfg = load_config(config, namespace=name)
    from solaris.orchestration.repartition import repartition

    typer.echo(repartition(cfg, partitions).describe())


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
        namespace_arg(name, "NAME")
    cfg = load_config(config, **({"namespace": name} if name else {}))
    from solaris.namespace import Namespace
    from solaris.orchestration.resources import cycle_redis
    from solaris.store.feast_store import ensure_definitions, open_feature_store

    store = open_feature_store(cfg, cycle_redis(cfg))
    applied = ensure_definitions(store, cfg)
    state = "applied" if applied else "already applied, unchanged"
    typer.echo(f"Feast definitions of {Namespace.of(cfg).describe()}: {state}")


@app.command("fit-autoencoder")
def fit_autoencoder_command(
    start: Annotated[
        str,
        typer.Option(
            help="first request time of the sample (ISO 8601 with a zone, or epoch seconds)"
        ),
    ],
    end: Annotated[
        str,
        typer.Option(help="end of the sample, exclusive (ISO 8601 with a zone, or epoch seconds)"),
    ],
    config: ConfigOption = None,
    max_pairs: Annotated[
        int, typer.Option(help="most pairs to train on (seeded sample)")
    ] = 200_000,
) -> None:
    """Train the autoencoder h -> z on your FM (model.foundation), from the pairs of your
    traffic (requests.source) in [start, end); writes it and codes.json as a new model
    version (the older ones are kept) and pins it for the config's namespace, unless that
    namespace holds live state: then its pin is left and the promote command printed."""
    first, last = epoch_option(start, "--start"), epoch_option(end, "--end")
    if last <= first:
        raise typer.BadParameter(f"{end!r} is not after --start {start!r}", param_hint="--end")
    if max_pairs < 1:
        raise typer.BadParameter(f"must be >= 1, got {max_pairs}", param_hint="--max-pairs")
    cfg = load_config(config)
    from solaris.model_versions import pin_version
    from solaris.namespace import Namespace
    from solaris.orchestration.resources import live_state
    from solaris.pipeline.codes import fit_autoencoder_from_traffic

    live = live_state(cfg, cfg.namespace)  # judged before the training's minutes
    manifest, mse, version = fit_autoencoder_from_traffic(cfg, first, last, max_pairs)
    typer.echo(
        f"autoencoder for FM {manifest.fm}: fm_version {manifest.fm_version} "
        f"(h {manifest.shared_dim} -> z {manifest.z_dim}, reconstruction MSE {mse:.4f}), "
        f"model version {version}"
    )
    if live is not None:
        typer.echo(
            f"namespace {cfg.namespace!r} still reads the models it read before ({live}): "
            f"promote this version when its VM is ready for it (`solaris models promote "
            f"--namespace {cfg.namespace} {version} --force`)"
        )
        return
    pin_version(Namespace.of(cfg).models_root, cfg.namespace, version, live=None)
    typer.echo(f"namespace {cfg.namespace!r} now reads model version {version}")


@models_app.command("list")
def models_list(
    namespace: Annotated[
        str | None, typer.Option(help="also say which version this namespace reads")
    ] = None,
    config: ConfigOption = None,
) -> None:
    """The model versions of the models folder, oldest first, each with its fm_version and
    the namespaces that pin it; the older flat layout, if any, on a line of its own."""
    if namespace is not None:
        namespace_arg(namespace, "--namespace")
    cfg = load_config(config)
    from solaris.manifest import CodesError, read_manifest
    from solaris.model_versions import (
        ModelVersionError,
        flat_layout,
        pins,
        version_folder,
        versions,
    )
    from solaris.namespace import Namespace

    root = Namespace.of(cfg).models_root

    def fm_version(folder: Path) -> str:
        try:
            return read_manifest(folder).fm_version
        except CodesError:
            return "(no codes.json)"

    pinned = pins(root)
    names = versions(root)
    typer.echo(f"models in {root}: {len(names)} version(s)")
    for version in names:
        by = sorted(ns for ns, pin in pinned.items() if pin.version == version)
        typer.echo(
            f"  {version}  fm_version {fm_version(version_folder(root, version))}  "
            f"pinned by: {', '.join(by) or '-'}"
        )
    if flat_layout(root):
        typer.echo(
            f"  (older flat layout)  fm_version {fm_version(root)}  read by namespaces "
            "without a pin"
        )
    if namespace is not None:
        try:
            folder = Namespace.of(cfg.model_copy(update={"namespace": namespace})).models_dir
        except ModelVersionError as exc:  # what the readers of the namespace would raise
            typer.echo(f"namespace {namespace!r} reads nothing: {exc}")
        else:
            typer.echo(f"namespace {namespace!r} reads {folder}")


@models_app.command("promote")
def models_promote(
    version: Annotated[
        str,
        typer.Argument(help="the version to pin (`solaris models list`), or 'newest'"),
    ],
    namespace: Annotated[str, typer.Option(help="the namespace whose models change")],
    config: ConfigOption = None,
    force: Annotated[
        bool, typer.Option(help="change the models of a namespace that holds live state")
    ] = False,
) -> None:
    """Pin VERSION for a namespace: what its cycle, near-line embedder and serving read
    from then on. Refused for an unknown version, and for a namespace holding live state
    (the live one, the settings' own when they are not a replay's, one whose cycle ran live
    or whose serving logged live traffic) unless --force: its VM was trained with the codes
    of the version it reads now. Nothing is written when refused."""
    namespace_arg(namespace, "--namespace")
    cfg = load_config(config)
    from solaris.model_versions import check_version, pin_version
    from solaris.namespace import Namespace
    from solaris.orchestration.resources import live_state

    root = Namespace.of(cfg).models_root
    version = check_version(root, version, namespace)  # before Redis is asked anything
    pin = pin_version(root, namespace, version, live=live_state(cfg, namespace), force=force)
    was = f" (was {pin.previous})" if pin.previous else ""
    typer.echo(f"namespace {namespace!r} reads model version {pin.version}{was}")


def writable_file(path: Path, hint: str) -> None:
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


def writable_folder(path: Path, hint: str) -> None:
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


def epoch_option(value: str, name: str) -> int:
    """A time option in epoch seconds, by the one rule for a time a person writes
    (:func:`solaris.times.epoch_of`: epoch seconds or ISO 8601 with a zone)."""
    from solaris.times import TimeInputError, epoch_of

    try:
        return epoch_of(value)
    except TimeInputError as exc:
        raise typer.BadParameter(str(exc), param_hint=name) from None


def _plugged_commands() -> None:
    """Commands that other packages add through the ``solaris.commands`` entry-point group,
    each a ``register(app, data_app)``: the MovieLens example's ``demo``, ``replay``,
    ``report`` and ``data fetch`` (the product imports no example). A package installed
    beside SOLARIS can add its own the same way."""
    from importlib.metadata import entry_points

    for entry in entry_points(group="solaris.commands"):
        try:
            entry.load()(app, data_app)
        except Exception as exc:  # a broken plug-in costs its commands, not the others'
            typer.echo(f"solaris: commands of {entry.value} not loaded: {exc!r}", err=True)


_plugged_commands()


if __name__ == "__main__":
    app()
