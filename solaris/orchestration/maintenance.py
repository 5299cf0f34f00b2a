"""The maintenance DAG: what is past retention is removed, as of the run's time.

Task entry points: :func:`prune_state_task`, :func:`prune_offline_task` and
:func:`clean_airflow_db_task`, each as of the run's interval end (its data interval, or the
conf's ``interval_end``) in the run's namespace. "Now" is that time, never the wall clock,
so the cutoff is ``as_of - cycle.retention_seconds`` (:func:`retention_cutoff`) and a run
over an old interval prunes what was past retention then. The settings refuse a retention
shorter than what the cycle reads back (``SolarisConfig.read_back_seconds``), so nothing a
later run reads is ever past the cutoff. Each task writes one run record,
``runs/solaris_maintenance/<as_of>-<task>.json``, with its figures.

- :func:`prune_state`: the namespace's per-interval state (:mod:`~.layout`) whose interval
  *end* (``<start>-<end>`` names) or time (``<as_of>`` names) is at or before the cutoff:
  run records, request logs and their drain records, selection and near-line ledgers, drained
  misses, shards, codes
  (an interval's marker before its generations), neighbour tables, verifier publications
  and training runs. Kept whatever their age: the verifier in force at the cutoff and the
  training folder its checkpoint lies in, the newest neighbour table at or before the cutoff
  (what later intervals look up by time), the live marker (written first if the only
  evidence of live state is a record about to go), and anything not named by a time
  (reported as ``unknown``). The kinds enrichment prunes itself (``iagg_partials``,
  ``user_embeddings``, ``fill_codes``, ``neighbour_index``, ``neighbour_lists`` and the carried
  windows' ``window_state``, ``window_codes``) are left to it.
- :func:`prune_offline`: Feast's offline rows of the namespace, whole ``date=YYYY-MM-DD``
  folders of every view whose day ends at or before the cutoff (:func:`expired_dates`; a
  day partly within retention is kept), staged files in them included.
- :func:`clean_airflow_db`: ``airflow db clean`` of the metadata older than the cutoff.

**The order of removal** keeps every reader consistent while a prune runs beside the
cycle, and after one that was interrupted: the candidates DAG's sensor takes the newest
candidates record before its interval as "the previous interval" and waits for its codes'
marker and its enrichment records, so the candidates records go first, the records those
checks read after them; a record past retention is then never the previous interval of a
live run (retention is days, the cadence minutes), and with every older one gone the sensor
has none to wait for. Selections go before the codes' markers (the embeddings DAG embeds
any selection without a marker, however old); an interval's marker before its generation
folders (a reader takes codes only through the marker: one that finds it may fail on a
missing file, never read half a generation); verifier publications before the training
runs their checkpoints lie in. Everything goes through :mod:`solaris.files`, so a local
folder and an fsspec URL (``cycle.state_uri = s3://...``) are pruned alike.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path, PurePosixPath
from typing import Any

from solaris.config import SolarisConfig
from solaris.files import StatePath, atomic_write_json, remove_tree, state_path
from solaris.namespace import Namespace
from solaris.orchestration.layout import INTERVAL_END, CycleLayout, write_run_record
from solaris.orchestration.resources import CycleInputError
from solaris.orchestration.runs import Params, task_run
from solaris.times import iso_utc

__all__ = [
    "AIRFLOW_DB_URL_ENV",
    "DAG_ID",
    "DB_CLEAN_BATCH_ROWS",
    "DB_CLEAN_TIMEOUT_S",
    "clean_airflow_db",
    "clean_airflow_db_task",
    "db_clean_command",
    "db_clean_environment",
    "db_clean_summary",
    "expired_dates",
    "prune_offline",
    "prune_offline_task",
    "prune_state",
    "prune_state_task",
    "retention_cutoff",
]

log = logging.getLogger(__name__)

DAG_ID = "solaris_maintenance"
# `airflow db clean`: the longest it may run, and the rows it deletes per transaction (short
# locks on a metadata DB the scheduler is using).
DB_CLEAN_TIMEOUT_S = 1_800
DB_CLEAN_BATCH_ROWS = 10_000
# The metadata DB's URL where a task process cannot see Airflow's own (see clean_airflow_db).
AIRFLOW_DB_URL_ENV = "SOLARIS_AIRFLOW_DB_URL"
_DB_CONN_ENV = ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "AIRFLOW__CORE__SQL_ALCHEMY_CONN")
# The Helm chart's connection to the metadata DB (from the same secret as sql_alchemy_conn),
# taken when it is a SQLAlchemy URL of a database Airflow supports.
_CHART_DB_ENV = "AIRFLOW_CONN_AIRFLOW_DB"
_SQLALCHEMY_URL = re.compile(r"^(?:postgresql|mysql|sqlite)(?:\+\w+)?://")
# What Airflow 3's task supervisor puts in a task process's connection variables.
_BLOCKED_DB = "airflow-db-not-allowed"

# The per-interval kinds, in the order they are pruned (the module docstring says why).
_LEDGERS = ("selections", "nearline", "request_log", "drained", "misses")
_CODES = ("shards", "pair_embeddings")
_AS_OF_KINDS = ("neighbours", "verifier", "training")
# Pruned by the enrichment DAG as it goes (older than its own as_of): left to it.
_ENRICHMENT_KINDS = (
    "iagg_partials",
    "user_embeddings",
    "fill_codes",
    "neighbour_index",
    "neighbour_lists",
    "window_state",
    "window_codes",
)
_RUNS = "runs"
_UNKNOWN_SHOWN = 50  # unknown entries listed in a record (all are counted)

_INTERVAL_NAME = re.compile(r"^(\d+)-(\d+)(?:\.parquet)?$")
_AS_OF_NAME = re.compile(r"^(\d+)(?:\.parquet|\.json)?$")
# A run record: <start>-<end>.json, <as_of>.json or <as_of>-<what>.json; its time is the last.
_RECORD_NAME = re.compile(r"^(?:\d+-)?(\d+)(?:-[a-z][a-z0-9_]*)?\.json$")
_DATE_FOLDER = re.compile(r"^date=(\d{4}-\d{2}-\d{2})$")
_CHECKING = re.compile(r"^Checking table (\w+)")
_FOUND = re.compile(r"^Found (\d+) rows meeting deletion criteria")
_NOT_FOUND = re.compile(r"Table (\w+) not found")


# -- entry points -----------------------------------------------------------------------------


def prune_state_task(params: Params, start: object, end: object) -> dict[str, Any]:
    """The ``prune_state`` task: :func:`prune_state` as of the run's interval end."""
    return _run_task(params, start, end, "prune_state", prune_state)


def prune_offline_task(params: Params, start: object, end: object) -> dict[str, Any]:
    """The ``prune_offline`` task: :func:`prune_offline` as of the run's interval end."""
    return _run_task(params, start, end, "prune_offline", prune_offline)


def clean_airflow_db_task(params: Params, start: object, end: object) -> dict[str, Any]:
    """The ``clean_airflow_db`` task: :func:`clean_airflow_db` as of the run's interval end."""
    return _run_task(params, start, end, "clean_airflow_db", clean_airflow_db)


def _run_task(
    params: Params,
    start: object,
    end: object,
    task: str,
    work: Callable[[SolarisConfig, int], dict[str, Any]],
) -> dict[str, Any]:
    """Build the run once, do ``work`` as of its interval end, record its figures."""
    began = time.perf_counter()
    run = task_run(params, start, end)
    figures = work(run.cfg, run.as_of)
    record = {
        INTERVAL_END: run.as_of,
        "task": task,
        "cutoff": retention_cutoff(run.cfg, run.as_of),
        "retention_days": run.cfg.cycle.retention_days,
        **figures,
        "seconds": round(time.perf_counter() - began, 3),
    }
    write_run_record(run.layout, DAG_ID, f"{run.as_of:011d}-{task}", record)
    return record


def retention_cutoff(cfg: SolarisConfig, as_of: int) -> int:
    """What is at or before this time (epoch seconds) is past retention as of ``as_of``."""
    return int(as_of) - cfg.cycle.retention_seconds


# -- the cycle's state --------------------------------------------------------------------------


@dataclass
class _Pruning:
    """What one prune removed and kept, and what it found named by no time (its figures)."""

    cutoff: int
    removed: dict[str, int] = field(default_factory=dict)
    bytes_removed: int = 0
    kept: int = 0
    unknown: list[str] = field(default_factory=list)

    def entries(self, folder: StatePath) -> list[StatePath]:
        """The entries of ``folder`` by name (none when it is not there)."""
        return sorted(folder.iterdir(), key=lambda p: p.name) if folder.is_dir() else []

    def past(
        self, kind: str, folder: StatePath, time_of: Callable[[str], int | None]
    ) -> list[StatePath]:
        """The entries of ``folder`` whose time is at or before the cutoff, oldest first;
        the others are counted kept, those named by no time reported unknown."""
        found: list[tuple[int, StatePath]] = []
        for entry in self.entries(folder):
            t = time_of(entry.name)
            if t is None:
                self.unknown.append(f"{kind}/{entry.name}")
            elif t <= self.cutoff:
                found.append((t, entry))
            else:
                self.kept += 1
        return [entry for _, entry in sorted(found, key=lambda item: (item[0], item[1].name))]

    def remove(self, kind: str, entry: StatePath, *, marker: str | None = None) -> None:
        """Remove the file or folder ``entry`` (its ``marker`` file first, if any)."""
        self.bytes_removed += _size(entry)
        if entry.is_dir():
            if marker is not None:
                (entry / marker).unlink(missing_ok=True)
            remove_tree(entry)
        else:
            entry.unlink(missing_ok=True)
        self.removed[kind] = self.removed.get(kind, 0) + 1

    def figures(self) -> dict[str, Any]:
        return {
            "removed": dict(self.removed),
            "removed_total": sum(self.removed.values()),
            "bytes_removed": self.bytes_removed,
            "kept_total": self.kept,
            "unknown": self.unknown[:_UNKNOWN_SHOWN],
            "unknown_count": len(self.unknown),
        }


def prune_state(cfg: SolarisConfig, as_of: int) -> dict[str, Any]:
    """Remove the namespace's cycle state past retention as of ``as_of`` (the module
    docstring says what, in which order, and what is always kept).

    Returns the figures: entries (files or folders) removed per kind and in all, their
    bytes, the entries kept, what was kept although past retention (``in_force``), the
    entries named by no time (``unknown``, left alone) and whether the live marker was
    written. Pruning again removes nothing more."""
    from solaris.orchestration.candidates import DAG_ID as CANDIDATES_DAG_ID

    layout = CycleLayout(Namespace.of(cfg))
    root = layout.root
    pruning = _Pruning(retention_cutoff(cfg, as_of))
    live_marker = _keep_live_evidence(layout)
    folders = []
    for entry in pruning.entries(root / _RUNS):
        if entry.is_dir():
            folders.append(entry)
        else:
            pruning.unknown.append(f"{_RUNS}/{entry.name}")
    folders.sort(key=lambda p: (p.name != CANDIDATES_DAG_ID, p.name))  # the sensor's first
    for folder in folders:
        for entry in pruning.past(f"{_RUNS}/{folder.name}", folder, _record_time):
            pruning.remove(_RUNS, entry)
    for kind in (*_LEDGERS, *_CODES):
        for entry in pruning.past(kind, root / kind, _interval_end):
            marker = "_SUCCESS" if kind == "pair_embeddings" else None
            pruning.remove(kind, entry, marker=marker)
    in_force = _prune_as_of_kinds(layout, pruning)
    known = {_RUNS, *_LEDGERS, *_CODES, *_AS_OF_KINDS, *_ENRICHMENT_KINDS}
    pruning.unknown += [
        p.name
        for p in pruning.entries(root)
        if p.name not in known and p.name != layout.live_marker.name
    ]
    figures = {"cutoff": pruning.cutoff, **pruning.figures(), "in_force": in_force}
    figures["live_marker_written"] = live_marker
    log.info(
        "pruned %s of namespace %s as of %s (cutoff %s): %s",
        root,
        cfg.namespace,
        as_of,
        pruning.cutoff,
        {k: v for k, v in figures.items() if k != "unknown"},
    )
    return figures


def _prune_as_of_kinds(layout: CycleLayout, pruning: _Pruning) -> dict[str, Any]:
    """Neighbour tables, verifier publications, training runs past retention, but for the
    table and the verifier in force at the cutoff and the training runs whose checkpoints a
    kept publication names. Returns what was kept although past retention."""
    root, cutoff = layout.root, pruning.cutoff
    table = layout.latest_neighbours(cutoff)
    table_time = None if table is None else int(table.stem)
    for entry in pruning.past("neighbours", root / "neighbours", _as_of_time):
        if _as_of_time(entry.name) != table_time:
            pruning.remove("neighbours", entry)
    verifier = layout.verifier_in_force(cutoff)
    verifier_time = None if verifier is None else int(verifier.stem)
    for entry in pruning.past("verifier", root / "verifier", _as_of_time):
        if _as_of_time(entry.name) != verifier_time:
            pruning.remove("verifier", entry)
    # The training runs the publications still there name (read after their removal: a
    # publication removed a moment ago protects nothing).
    named = {verifier_time} if verifier_time is not None else set()
    for publication in pruning.entries(root / "verifier"):
        named |= _named_training(layout, publication)
    used = []
    for entry in pruning.past("training", root / "training", _as_of_time):
        if _as_of_time(entry.name) in named:
            used.append(entry.name)
        else:
            pruning.remove("training", entry)
    return {
        "neighbours": None if table is None else table.name,
        "verifier": None if verifier is None else verifier.name,
        "training": used,
    }


def _named_training(layout: CycleLayout, publication: StatePath) -> set[int]:
    """The time of the training run whose folder holds the checkpoint ``publication``
    names (its ``path``, relative to the state root), if it names one of this namespace."""
    try:
        payload = json.loads(publication.read_text())
    except (OSError, ValueError):
        return set()
    path = payload.get("path") if isinstance(payload, dict) else None
    if not isinstance(path, str):
        return set()
    parts = PurePosixPath(path).parts
    name = layout.namespace.name
    for k in range(2, len(parts) - 1):
        if parts[k - 2 : k + 1] == ("namespaces", name, "training"):
            t = _as_of_time(parts[k + 1])
            return set() if t is None else {t}
    return set()


def _keep_live_evidence(layout: CycleLayout) -> bool:
    """Write the live marker when the only evidence that the namespace holds live state is
    a run record (state from before the marker existed), which a prune may remove: a
    replay must never be let into a live namespace because its old records are gone.
    Returns whether the marker was written."""
    if layout.live_marker.is_file():
        return False
    record = layout.live_run_record()
    if record is None:
        return False
    atomic_write_json(layout.live_marker, {"first_live_run": str(record)})
    return True


def _interval_end(name: str) -> int | None:
    """The end of the interval ``<start>-<end>[.parquet]`` names (None: not one)."""
    match = _INTERVAL_NAME.fullmatch(name)
    if not match or int(match[2]) <= int(match[1]):
        return None
    return int(match[2])


def _as_of_time(name: str) -> int | None:
    """The time ``<as_of>[.parquet|.json]`` names (None: not one)."""
    match = _AS_OF_NAME.fullmatch(name)
    return int(match[1]) if match else None


def _record_time(name: str) -> int | None:
    """The time of the run a record's name gives: its interval end or its as_of."""
    match = _RECORD_NAME.fullmatch(name)
    return int(match[1]) if match else None


def _size(path: StatePath) -> int:
    """The bytes of a file, or of every file below a folder."""
    if not isinstance(path, Path):  # an fsspec path: one listing
        try:
            return int(path.fs.du(path.path, total=True))
        except (OSError, ValueError):
            return 0
    if path.is_file():
        return path.stat().st_size
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(folder, name)).st_size
            except OSError:
                continue
    return total


# -- Feast's offline rows -----------------------------------------------------------------------


def expired_dates(names: Iterable[str], cutoff: int) -> list[str]:
    """The ``date=YYYY-MM-DD`` folder names among ``names`` whose whole (UTC) day ends at or
    before ``cutoff``: every row in them is past retention. A day the cutoff falls inside is
    kept, and names that are not date folders are never chosen."""
    out = []
    for name in names:
        match = _DATE_FOLDER.fullmatch(name)
        if not match:
            continue
        try:
            day = date.fromisoformat(match[1])
        except ValueError:
            continue
        ends = datetime(day.year, day.month, day.day, tzinfo=UTC) + timedelta(days=1)
        if ends.timestamp() <= cutoff:
            out.append(name)
    return sorted(out)


def _offline_root(cfg: SolarisConfig) -> StatePath:
    """The namespace's offline folder as Feast's FileSources name it (with the S3 endpoint
    they name, when ``store.offline_s3_endpoint`` is set)."""
    namespace = Namespace.of(cfg)
    uri, endpoint = cfg.store.offline_uri, cfg.store.offline_s3_endpoint
    if uri and "://" in uri and endpoint:
        return state_path(f"{uri.rstrip('/')}/{namespace.name}", endpoint_url=endpoint)
    return namespace.offline_root


def prune_offline(cfg: SolarisConfig, as_of: int) -> dict[str, Any]:
    """Remove the namespace's offline ``date=`` folders, in every view, whose day ends at or
    before the cutoff as of ``as_of`` (:func:`expired_dates`). Returns the figures: date
    folders removed per view and in all, their bytes, the date folders kept, and entries
    that are not date folders (``unknown``, left alone)."""
    root = _offline_root(cfg)
    pruning = _Pruning(retention_cutoff(cfg, as_of))
    for view in pruning.entries(root):
        if not view.is_dir():
            pruning.unknown.append(view.name)
            continue
        entries = {entry.name: entry for entry in pruning.entries(view)}
        dated = [n for n in entries if _DATE_FOLDER.fullmatch(n)]
        pruning.unknown += [f"{view.name}/{n}" for n in entries if n not in dated]
        going = expired_dates(dated, pruning.cutoff)
        pruning.kept += len(dated) - len(going)
        for name in going:
            pruning.remove(view.name, entries[name])
    figures = {"cutoff": pruning.cutoff, "offline_root": str(root), **pruning.figures()}
    log.info("pruned Feast's offline rows under %s as of %s: %s", root, as_of, figures)
    return figures


# -- Airflow's metadata DB ----------------------------------------------------------------------


def db_clean_command(cutoff: int) -> list[str]:
    """``airflow db clean`` of every table's rows older than ``cutoff`` (epoch seconds), in
    this interpreter's Airflow: no prompt, no archive tables left behind, batches of
    :data:`DB_CLEAN_BATCH_ROWS`, and a non-zero exit when any table failed (by default it
    logs the failure and exits 0)."""
    return [
        sys.executable,
        "-m",
        "airflow",
        "db",
        "clean",
        "--clean-before-timestamp",
        iso_utc(cutoff),
        "--yes",
        "--skip-archive",
        "--error-on-cleanup-failure",
        "--batch-size",
        str(DB_CLEAN_BATCH_ROWS),
    ]


def db_clean_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment ``airflow db clean`` runs in: ``environ`` with the metadata DB's
    connection as Airflow itself would use it.

    Airflow 3 runs a task in a process whose connection variables
    (``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN``) it has replaced by ``airflow-db-not-allowed:///``
    so that task code cannot use the ORM; a command started from the task inherits that. So:
    a real connection in ``environ`` (``dag.test()``, a worker that kept it) is used as it
    is; a blocked one is dropped and replaced by ``SOLARIS_AIRFLOW_DB_URL`` when that is set
    (what ``make airflow`` with PostgreSQL and ``make airflow-celery`` export), else by the
    Helm chart's ``AIRFLOW_CONN_AIRFLOW_DB`` when that is a SQLAlchemy URL (the chart sets
    it from the secret ``sql_alchemy_conn`` comes from), else left to Airflow's
    configuration (``airflow.cfg``, ``..._CMD`` or ``..._SECRET`` variables, or its default
    SQLite in ``AIRFLOW_HOME``: ``make airflow``'s)."""
    env = dict(environ)
    current = env.get(_DB_CONN_ENV[0], "")
    if current and not current.startswith(_BLOCKED_DB):
        return env
    for name in _DB_CONN_ENV:
        if env.get(name, "").startswith(_BLOCKED_DB):
            del env[name]
    chart = env.get(_CHART_DB_ENV, "")
    if env.get(AIRFLOW_DB_URL_ENV):
        env[_DB_CONN_ENV[0]] = env[AIRFLOW_DB_URL_ENV]
    elif _SQLALCHEMY_URL.match(chart):
        env[_DB_CONN_ENV[0]] = chart
    return env


def db_clean_summary(output: str) -> dict[str, Any]:
    """What ``airflow db clean`` printed, summed up: rows deleted per table checked (the
    rows it found meeting the criteria, which it then deleted) and the tables it did not
    find."""
    tables: dict[str, int] = {}
    table = None
    for line in output.splitlines():
        line = line.strip()
        if checking := _CHECKING.match(line):
            table = checking[1]
        elif (found := _FOUND.match(line)) and table is not None:
            tables[table] = int(found[1])
            table = None
    missing = sorted({m[1] for m in _NOT_FOUND.finditer(output)})
    return {"tables": tables, "missing_tables": missing}


def clean_airflow_db(
    cfg: SolarisConfig, as_of: int, *, timeout_s: float = DB_CLEAN_TIMEOUT_S
) -> dict[str, Any]:
    """Run Airflow's own cleanup of its metadata older than the cutoff as of ``as_of``
    (DAG runs, task instances, XComs, logs, asset events, jobs...: ``airflow db clean``,
    :func:`db_clean_command`) and return its figures: the timestamp, rows deleted per table
    and in all, the tables checked.

    In Airflow 3 a task may not use the ORM, hence the command in a subprocess, which needs
    the metadata DB's connection: ``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN``, which the
    LocalExecutor's and the Helm chart's Celery workers have, but which Airflow hides from
    the task's own process; :func:`db_clean_environment` says how the command finds it
    (set ``SOLARIS_AIRFLOW_DB_URL`` on workers that have it only in that variable, such as
    the compose file's).

    The metadata is stamped with the wall clock, and shared by every namespace: a cutoff
    after the wall clock (a run naming a future interval) is refused instead of deleting
    today's runs; the wall clock is read for that check only.

    Raises:
        CycleInputError: naming the command, when the cutoff is in the future, when it
            fails, runs past ``timeout_s`` or reaches a database without Airflow's tables
            (a connection that is not the metadata DB's)."""
    cutoff = retention_cutoff(cfg, as_of)
    command = db_clean_command(cutoff)
    shown = shlex.join(command[3:])  # "db clean ...", as an operator would type it
    if cutoff > time.time():
        raise CycleInputError(
            f"airflow {shown}: the cutoff {iso_utc(cutoff)} (interval end {as_of} less "
            f"cycle.retention_days {cfg.cycle.retention_days:g}) is in the future; Airflow's "
            "metadata is stamped with the wall clock, so this would delete current runs. "
            "Nothing was deleted: name an interval that has passed"
        )
    began = time.perf_counter()
    try:
        done = subprocess.run(
            command,
            env=db_clean_environment(os.environ),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise CycleInputError(
            f"airflow {shown} did not finish in {timeout_s:g} s; it deletes in batches, so "
            "the next run goes on where this one stopped"
        ) from None
    except OSError as exc:
        raise CycleInputError(f"airflow {shown} could not start ({sys.executable}): {exc}") from exc
    output = done.stdout or ""
    if done.returncode != 0:
        raise CycleInputError(
            f"airflow {shown} failed (exit {done.returncode}); its last output:\n{output[-3000:]}"
        )
    summary = db_clean_summary(output)
    if "dag_run" in summary["missing_tables"]:
        raise CycleInputError(
            f"airflow {shown} reached a database without Airflow's tables (no dag_run), "
            "not the metadata DB: this task's process has no connection to it (Airflow 3 "
            f"hides {_DB_CONN_ENV[0]} from task processes); set {AIRFLOW_DB_URL_ENV} to the "
            "metadata DB's SQLAlchemy URL on the workers"
        )
    tables = summary["tables"]
    figures = {
        "clean_before": iso_utc(cutoff),
        "rows_deleted": sum(tables.values()),
        "tables": {name: rows for name, rows in sorted(tables.items()) if rows},
        "tables_checked": len(tables),
        "db_clean_seconds": round(time.perf_counter() - began, 3),
    }
    log.info("airflow %s: %s", shown, figures)
    return figures
