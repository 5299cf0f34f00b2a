"""The maintenance DAG's work: exactly what is past retention goes, everything else stays
byte for byte (the state on a folder and on fsspec's memory filesystem, Feast's offline
date folders), the run's interval end is "now", and the cleanup of Airflow's metadata is
given a command, a connection and a summary it can trust."""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from solaris.config import SolarisConfig
from solaris.errors import ConfigError
from solaris.files import StatePath, atomic_write_bytes, remove_tree, state_path
from solaris.namespace import Namespace
from solaris.orchestration import maintenance
from solaris.orchestration.layout import CycleLayout, Interval
from solaris.orchestration.resources import CycleInputError

DAY, H = 86_400, 3_600
T0 = 19_675 * DAY  # 2023-11-14T00:00:00Z
AS_OF = T0 + 60 * DAY + 3 * H
CUTOFF = AS_OF - 45 * DAY  # the default retention
GEN = "abc123"
BEFORE, AT, AFTER = (Interval(CUTOFF + k * H, CUTOFF + (k + 1) * H) for k in (-2, -1, 0))


def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in [k for k in os.environ if k.startswith("SOLARIS_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("SOLARIS_ARTIFACTS_DIR", str(tmp_path / "artifacts"))
    monkeypatch.setenv("SOLARIS_STORE__REPO_PATH", str(tmp_path / "repo"))
    monkeypatch.setenv("SOLARIS_NAMESPACE", "m1")


@pytest.fixture(params=["local", "memory"])
def cfg(request, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SolarisConfig]:
    """Settings of namespace ``m1``, its state on a folder or on fsspec's memory filesystem."""
    _clean_env(monkeypatch, tmp_path)
    if request.param == "local":
        yield SolarisConfig.load()
        return
    root = f"memory://solaris-maintenance-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("SOLARIS_CYCLE__STATE_URI", root)
    yield SolarisConfig.load()
    remove_tree(state_path(root))


@pytest.fixture
def local_cfg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SolarisConfig:
    _clean_env(monkeypatch, tmp_path)
    return SolarisConfig.load()


def _files(root: StatePath) -> dict[str, bytes]:
    """Every file below ``root`` (by path relative to it) and its bytes."""
    base = str(root).rstrip("/") + "/"
    return {str(p).removeprefix(base): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _snapshot(cfg: SolarisConfig, tmp_path: Path) -> dict[str, bytes]:
    """Every file of the test: the namespace's state (``ns/...``, on a folder or in
    memory) and everything else (``tmp/...``: other namespaces, the models, the repo)."""
    namespace = Namespace.of(cfg)
    found = {f"ns/{k}": v for k, v in _files(namespace.cycle_root).items()}
    if not isinstance(namespace.state_root, Path):  # other namespaces' state, in memory
        others = _files(namespace.state_root).items()
        found |= {f"state/{k}": v for k, v in others if not k.startswith("namespaces/m1/")}
    local = "artifacts/namespaces/m1/"  # the namespace's own folder when it is on disk
    return found | {f"tmp/{k}": v for k, v in _files(tmp_path).items() if not k.startswith(local)}


class _State:
    """Writes the files of a namespace's state, each marked as past retention or not."""

    def __init__(self, cfg: SolarisConfig) -> None:
        self.layout = CycleLayout(Namespace.of(cfg))
        self.root = self.layout.root
        self.going: set[str] = set()

    def put(self, path: StatePath, goes: bool, content: bytes | None = None) -> None:
        atomic_write_bytes(path, content if content is not None else f"{path}".encode())
        if goes:
            base = str(self.root).rstrip("/") + "/"
            self.going.add(str(path).removeprefix(base))

    def record(self, dag_id: str, key: str, goes: bool, **record: object) -> None:
        self.put(self.layout.run_record(dag_id, key), goes, json.dumps(record).encode())

    def interval(self, interval: Interval) -> None:
        """Everything the cycle writes for one interval, and its run records."""
        goes, layout = interval.end <= CUTOFF, self.layout
        self.put(layout.request_log(interval), goes)
        for partition in (0, 1):
            self.put(layout.selections(interval, partition), goes)
        self.put(layout.nearline(interval), goes)
        self.put(layout.misses(interval), goes)
        self.put(layout.shard(interval, 0, GEN), goes)
        self.put(layout.plan(interval, GEN), goes, b'{"generation": "abc123", "shards": 1}')
        self.put(layout.embeddings(interval, 0, GEN), goes)
        self.put(layout.embeddings_done(interval), goes, b'{"generation": "abc123", "shards": 1}')
        self.record("solaris_candidates", interval.key, goes, interval_end=interval.end)
        self.record("solaris_embeddings", interval.key, goes)
        for view in ("uagg", "iagg", "nbr"):
            self.record("solaris_enrichment", f"{interval.end:011d}-{view}", goes)

    def training(self, t: int, goes: bool, *, published: bool) -> None:
        folder = self.layout.training(t)
        self.put(folder / "vm.pt", goes)
        self.put(folder / "metrics.json", goes)
        if published:
            name = f"namespaces/{self.layout.namespace.name}/training/{t:011d}/vm.pt"
            payload = json.dumps({"path": name, "version": f"vm-{t}", "as_of": t}).encode()
            self.put(self.layout.verifier_publication(t), goes, payload)


def _lay_out(cfg: SolarisConfig) -> _State:
    """A namespace's state with files of every kind before, at and after the cutoff."""
    state = _State(cfg)
    for interval in (BEFORE, AT, AFTER):
        state.interval(interval)
    layout = state.layout
    # Neighbour tables: the newest at or before the cutoff is what later intervals read.
    state.put(layout.neighbours(CUTOFF - 2 * DAY), goes=True)
    state.put(layout.neighbours(CUTOFF), goes=False)
    state.put(layout.neighbours(CUTOFF + DAY), goes=False)
    # Training runs: the one published before the cutoff is still in force, with its VM.
    state.training(CUTOFF - 3 * DAY, goes=True, published=True)
    state.training(CUTOFF - 2 * DAY, goes=True, published=False)
    state.training(CUTOFF - DAY, goes=False, published=True)
    state.training(CUTOFF + 2 * DAY, goes=False, published=True)
    state.record("solaris_training", f"{CUTOFF - DAY:011d}", goes=True)
    state.record("solaris_training", f"{CUTOFF + 2 * DAY:011d}", goes=False)
    state.record("solaris_clustering", f"{CUTOFF - 2 * DAY:011d}-unn", goes=True)
    state.record("solaris_maintenance", f"{CUTOFF - DAY:011d}-prune_state", goes=True)
    # Never named by a time, or not this DAG's to prune: left, the unknown ones reported.
    state.put(layout.live_marker, goes=False, content=b'{"first_live_run": "x"}')
    state.put(state.root / "notes.txt", goes=False)
    state.put(state.root / "selections" / "README.md", goes=False)
    state.put(state.root / "runs" / "stray.txt", goes=False)
    state.put(state.root / "runs" / "solaris_candidates" / ".x.json.0a.tmp", goes=False)
    state.put(layout.item_partials(CUTOFF - 5 * DAY, 0), goes=False)  # enrichment's own
    # Another namespace's state and the shared models: never touched.
    other = CycleLayout(Namespace.of(cfg.model_copy(update={"namespace": "m2"})))
    atomic_write_bytes(other.request_log(BEFORE), b"other namespace")
    atomic_write_bytes(layout.models_dir / "vm.pt", b"the models")
    return state


def test_exactly_the_state_past_retention_goes_and_the_rest_is_untouched(
    cfg: SolarisConfig, tmp_path: Path
) -> None:
    state = _lay_out(cfg)
    before = _snapshot(cfg, tmp_path)
    figures = maintenance.prune_state(cfg, AS_OF)
    after = _snapshot(cfg, tmp_path)

    gone = {k.removeprefix("ns/") for k in set(before) - set(after)}
    assert gone == state.going
    assert set(after) <= set(before)
    assert all(after[k] == before[k] for k in after)  # byte for byte
    assert figures["cutoff"] == CUTOFF
    assert figures["removed"] == {
        "runs": 2 * 5 + 3,  # 2 intervals x 5 records; a training, clustering, maintenance one
        "selections": 2,
        "nearline": 2,
        "request_log": 2,
        "misses": 2,
        "shards": 2,
        "pair_embeddings": 2,
        "neighbours": 1,
        "verifier": 1,
        "training": 2,
    }
    assert figures["bytes_removed"] == sum(len(before[f"ns/{k}"]) for k in gone)
    assert figures["in_force"] == {
        "neighbours": f"{CUTOFF:011d}.parquet",
        "verifier": f"{CUTOFF - DAY:011d}.json",
        "training": [f"{CUTOFF - DAY:011d}"],
    }
    assert sorted(figures["unknown"]) == [
        "notes.txt",
        "runs/solaris_candidates/.x.json.0a.tmp",
        "runs/stray.txt",
        "selections/README.md",
    ]
    assert figures["live_marker_written"] is False
    # What readers look up by time still answers as before, at the cutoff and after it.
    layout = state.layout
    assert layout.verifier_in_force(CUTOFF).name == f"{CUTOFF - DAY:011d}.json"
    assert layout.latest_neighbours(CUTOFF + H).name == f"{CUTOFF:011d}.parquet"
    assert layout.published_codes(AFTER) is not None and layout.published_codes(AT) is None


def test_pruning_twice_removes_nothing_more(cfg: SolarisConfig, tmp_path: Path) -> None:
    _lay_out(cfg)
    maintenance.prune_state(cfg, AS_OF)
    once = _snapshot(cfg, tmp_path)
    again = maintenance.prune_state(cfg, AS_OF)
    assert _snapshot(cfg, tmp_path) == once
    assert again["removed_total"] == 0 and again["bytes_removed"] == 0


def test_a_run_over_an_older_interval_prunes_as_of_its_own_time(
    local_cfg: SolarisConfig, tmp_path: Path
) -> None:
    """As of three days earlier, the oldest verifier was still in force (with its training
    run) and nothing else had passed retention: a backfill's run removes nothing."""
    _lay_out(local_cfg)
    before = _snapshot(local_cfg, tmp_path)
    older = maintenance.prune_state(local_cfg, AS_OF - 3 * DAY)
    assert _snapshot(local_cfg, tmp_path) == before
    assert older["cutoff"] == CUTOFF - 3 * DAY and older["removed_total"] == 0
    assert older["in_force"] == {
        "neighbours": None,
        "verifier": f"{CUTOFF - 3 * DAY:011d}.json",
        "training": [f"{CUTOFF - 3 * DAY:011d}"],
    }
    assert maintenance.prune_state(local_cfg, AS_OF)["removed"]["verifier"] == 1


def test_after_a_prune_every_candidates_record_left_has_what_the_next_run_waits_for(
    local_cfg: SolarisConfig,
) -> None:
    """The candidates sensor waits for the previous recorded interval's codes and
    enrichment: a prune never leaves a record whose marker or enrichment it removed, so no
    live run waits forever, whether its previous interval is inside retention or past it."""
    from solaris.orchestration.candidates import previous_published

    state = _State(local_cfg)
    for interval in (BEFORE, AT, AFTER):
        state.interval(interval)
    nxt = Interval(AFTER.end, AFTER.end + H)
    conf = {"namespace": "m1", **nxt.as_dict()}
    late = Interval(AS_OF + 50 * DAY, AS_OF + 50 * DAY + H)  # a cycle resumed much later
    assert previous_published(conf, None, None)

    maintenance.prune_state(local_cfg, AS_OF)

    layout = state.layout
    for interval in layout.recorded_intervals("solaris_candidates", ending_by=AS_OF * 2):
        assert interval.end > CUTOFF
        assert layout.embeddings_done(interval).is_file()
        for view in ("uagg", "iagg", "nbr"):
            assert layout.run_record("solaris_enrichment", f"{interval.end:011d}-{view}").is_file()
    assert previous_published(conf, None, None)
    maintenance.prune_state(local_cfg, late.end)  # everything is past retention now
    assert layout.recorded_intervals("solaris_candidates", ending_by=late.start) == []
    assert previous_published({"namespace": "m1", **late.as_dict()}, None, None)


def test_a_prune_keeps_the_evidence_of_live_state_when_only_an_old_record_held_it(
    local_cfg: SolarisConfig,
) -> None:
    state = _State(local_cfg)
    state.record("solaris_candidates", BEFORE.key, goes=True, replay=False)
    layout = state.layout
    assert not layout.live_marker.is_file()  # state from before the marker existed
    figures = maintenance.prune_state(local_cfg, AS_OF)
    assert figures["live_marker_written"] is True
    assert not layout.run_record("solaris_candidates", BEFORE.key).is_file()
    assert layout.live_run_record() == layout.live_marker  # replays are still refused


def test_the_task_works_as_of_the_runs_interval_end_and_records_its_figures(
    local_cfg: SolarisConfig,
) -> None:
    state = _lay_out(local_cfg)
    conf = {"namespace": "m1", "interval_start": AS_OF - H, "interval_end": AS_OF}
    record = maintenance.prune_state_task(conf, None, None)
    path = state.layout.run_record("solaris_maintenance", f"{AS_OF:011d}-prune_state")
    assert json.loads(path.read_text()) == {
        "dag_id": "solaris_maintenance",
        "key": f"{AS_OF:011d}-prune_state",
        **record,
    }
    assert record["interval_end"] == AS_OF and record["cutoff"] == CUTOFF
    assert record["retention_days"] == 45 and record["removed_total"] > 0
    # A scheduled run: its data interval's end, whatever the wall clock says.
    end = datetime.fromtimestamp(AS_OF + DAY, UTC)
    scheduled = maintenance.prune_offline_task(None, end, end)
    assert scheduled["interval_end"] == AS_OF + DAY and scheduled["cutoff"] == CUTOFF + DAY
    assert state.layout.run_record("solaris_maintenance", f"{AS_OF + DAY:011d}-prune_offline")


# -- Feast's offline rows -----------------------------------------------------------------------

MIDNIGHT = 19_690 * DAY  # 2023-11-29T00:00:00Z


def test_a_date_folder_goes_only_when_its_whole_day_ended_by_the_cutoff() -> None:
    names = [
        "date=2023-11-27",
        "date=2023-11-28",  # ends at 11-29 00:00: at the cutoff
        "date=2023-11-29",  # the cutoff falls inside it
        "date=2023-11-30",
        "date=2023-02-30",  # not a day
        "date=bogus",
        "batch-1.parquet",
    ]
    assert maintenance.expired_dates(names, MIDNIGHT + 3 * H) == [
        "date=2023-11-27",
        "date=2023-11-28",
    ]
    assert maintenance.expired_dates(names, MIDNIGHT) == ["date=2023-11-27", "date=2023-11-28"]
    assert maintenance.expired_dates(names, MIDNIGHT - 1) == ["date=2023-11-27"]


def test_exactly_the_offline_days_past_retention_go_in_every_view_and_twice_is_idempotent(
    local_cfg: SolarisConfig, tmp_path: Path
) -> None:
    root = Namespace.of(local_cfg).offline_root
    assert root == tmp_path / "repo" / "data" / "offline" / "m1"
    cutoff_day = datetime.fromtimestamp(CUTOFF, UTC).date()  # 2023-11-29, cutoff at 03:00
    going = set()
    for view in ("pair", "uagg"):
        for day in (27, 28, 29, 30):
            folder = root / view / f"date=2023-11-{day:02d}"
            for name in ("batch-cycle-1.parquet", ".batch-cycle-2.parquet.pending"):
                atomic_write_bytes(folder / name, f"{view} {day} {name}".encode())
                if day < cutoff_day.day:
                    going.add(f"repo/data/offline/m1/{view}/date=2023-11-{day:02d}/{name}")
    atomic_write_bytes(root / "pair" / "README", b"not a date")
    atomic_write_bytes(root.parent / "m2" / "pair" / "date=2023-11-01" / "batch-1.parquet", b"m2")
    before = _files(tmp_path)

    figures = maintenance.prune_offline(local_cfg, AS_OF)

    after = _files(tmp_path)
    assert set(before) - set(after) == going
    assert all(after[k] == before[k] for k in after)
    assert figures["removed"] == {"pair": 2, "uagg": 2} and figures["kept_total"] == 4
    assert figures["unknown"] == ["pair/README"]
    assert figures["bytes_removed"] == sum(len(before[k]) for k in going)
    again = maintenance.prune_offline(local_cfg, AS_OF)
    assert _files(tmp_path) == after and again["removed_total"] == 0


def test_no_offline_folder_yet_is_nothing_to_prune(local_cfg: SolarisConfig) -> None:
    figures = maintenance.prune_offline(local_cfg, AS_OF)
    assert figures["removed_total"] == 0 and figures["unknown_count"] == 0


# -- the settings -------------------------------------------------------------------------------


def test_a_retention_shorter_than_what_the_cycle_reads_back_is_refused() -> None:
    read_back_days = SolarisConfig().read_back_seconds / DAY  # 30-day training window + 2
    with pytest.raises(ConfigError, match=r"cycle\.retention_days 31 keeps less"):
        SolarisConfig(cycle={"retention_days": read_back_days - 1})
    assert SolarisConfig(cycle={"retention_days": read_back_days}).cycle.retention_days == 32


# -- Airflow's metadata DB ----------------------------------------------------------------------


def test_the_cleanup_command_deletes_before_the_cutoff_in_utc_without_a_prompt() -> None:
    command = maintenance.db_clean_command(CUTOFF)
    assert command[:5] == [sys.executable, "-m", "airflow", "db", "clean"]
    stamp = command[command.index("--clean-before-timestamp") + 1]
    assert stamp == "2023-11-29T03:00:00+00:00"
    assert {"--yes", "--skip-archive", "--error-on-cleanup-failure"} <= set(command)


def test_the_cleanup_uses_the_real_metadata_connection_never_the_blocked_one() -> None:
    blocked = "airflow-db-not-allowed:///"
    real = "postgresql+psycopg2://airflow@db:5432/airflow"
    mine = "sqlite:////tmp/home/airflow.db"
    env = maintenance.db_clean_environment
    # dag.test(), or a worker that kept it: this process's own DB, whatever else is set.
    kept = env({"AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": mine, "SOLARIS_AIRFLOW_DB_URL": real})
    assert kept["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == mine
    # A task process (Airflow 3 blocks the variables): SOLARIS_AIRFLOW_DB_URL stands in.
    task = {
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": blocked,
        "AIRFLOW__CORE__SQL_ALCHEMY_CONN": blocked,
        "AIRFLOW_HOME": "/opt/airflow",
    }
    named = env({**task, "SOLARIS_AIRFLOW_DB_URL": real})
    assert named["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == real
    assert "AIRFLOW__CORE__SQL_ALCHEMY_CONN" not in named
    # The Helm chart's connection to the same DB, when it is a SQLAlchemy URL.
    chart = env({**task, "AIRFLOW_CONN_AIRFLOW_DB": real})
    assert chart["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == real
    # Without either, Airflow's own configuration decides (airflow.cfg, _CMD, its default).
    for other in ({}, {"AIRFLOW_CONN_AIRFLOW_DB": '{"conn_type": "postgres"}'}):
        unnamed = env({**task, **other})
        assert not {k for k in unnamed if k.endswith("SQL_ALCHEMY_CONN")}
        assert unnamed["AIRFLOW_HOME"] == "/opt/airflow"


def test_the_cleanups_output_is_summed_up_per_table() -> None:
    output = "\n".join(
        [
            "You have requested that we purge all data prior to 2023-11-29 03:00:00+00:00.",
            "",
            "Checking table dag_run",
            "Found 3 rows meeting deletion criteria.",
            "Performing Delete (batch 1, max 10000 rows)...",
            "Moving data to table _airflow_deleted__dag_run__20231201031500__b1",
            "Finished Performing Delete",
            "",
            "Checking table xcom",
            "Found 0 rows meeting deletion criteria.",
            "2023-12-01T03:15:01Z [warning  ] Table celery_taskmeta not found.  Skipping.",
        ]
    )
    assert maintenance.db_clean_summary(output) == {
        "tables": {"dag_run": 3, "xcom": 0},
        "missing_tables": ["celery_taskmeta"],
    }


def test_a_cleanup_cutoff_after_the_wall_clock_is_refused_before_anything_runs(
    local_cfg: SolarisConfig,
) -> None:
    future = int(time.time()) + 46 * DAY  # its cutoff is a day ahead of the wall clock
    with pytest.raises(CycleInputError, match="in the future") as caught:
        maintenance.clean_airflow_db(local_cfg, future)
    assert "db clean --clean-before-timestamp" in str(caught.value)


def test_run_records_of_every_kind_are_named_by_their_time() -> None:
    time_of = maintenance._record_time
    assert time_of(f"{Interval(0, 900).key}.json") == 900  # candidates, embeddings
    assert time_of(f"{900:011d}-uagg.json") == 900  # enrichment, clustering
    assert time_of(f"{900:011d}.json") == 900  # training
    assert time_of(f"{900:011d}-prune_state.json") == 900  # this DAG
    assert time_of(".x.json.0a.tmp") is None and time_of("notes.json") is None
