"""The five DAGs run end to end with ``dag.test()`` against the real Redis and FeatureStore.

One module-scoped run of ``solaris demo`` on the tiny fake MovieLens: the offline stage
trains the models, then the Airflow stage replays a window of the test period through real
DAG runs (candidates → embeddings → enrichment per interval, clustering at midnight,
training at the end), each downstream run fed from the asset events of its upstream run.
The tests read back what the runs wrote: the metadata DB's asset events and queues, the
cycle's files, Feast's offline parquet and Redis (database 12, a project of its own).
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from solaris.config import SolarisConfig
from solaris.connection import redis_client
from solaris.local.cycle import window_intervals
from solaris.namespace import Namespace
from solaris.orchestration import runs
from solaris.orchestration.layout import CycleLayout, Interval
from solaris.pipeline.codes import read_manifest
from solaris.store.feast_store import delete_project_keys

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
REDIS = "127.0.0.1:6379,db=12"  # this module's own database number
DAG_IDS = (
    "solaris_candidates",
    "solaris_embeddings",
    "solaris_enrichment",
    "solaris_clustering",
    "solaris_training",
)


def _demo(tmp: Path, write_movielens, tiny_config, **cycle: object) -> tuple[SolarisConfig, dict]:
    """``solaris demo`` on the tiny MovieLens in ``tmp``, with ``cycle`` settings added:
    (settings as the task runs read them, the demo's summary)."""
    from solaris.examples.movielens.demo import run_demo

    write_movielens(tmp / "ml-100k")
    project = f"dag_{uuid.uuid4().hex[:8]}"
    path = tmp / "solaris.yaml"
    config = tiny_config(tmp, project, REDIS)
    # A budget and TTL under which the tiny log's few recurring pairs give pair hits.
    config["selection"] = {"cadence_minutes": 60, "ttl_hours": 72, "share": 0.5}
    config["cycle"] = {
        "dags_folder": str(REPO / "dags"),
        "airflow_home": os.environ["AIRFLOW_HOME"],  # the session's (tests/conftest.py)
        "demo_days": 1.5,
        "demo_cadence_minutes": 360,
        "shard_rows": 40,  # several mapped shards per interval
        "training_window_days": 10,
        **cycle,
    }
    path.write_text(yaml.safe_dump(config))
    cfg = SolarisConfig.load(path)
    printed: list[str] = []
    summary = run_demo(cfg, echo=printed.append)
    summary["printed"] = "\n".join(printed)
    # What the task runs read (the demo's copy: absolute paths, the demo cadence).
    run_cfg = SolarisConfig.load(Path(cfg.artifacts_dir).resolve() / "airflow" / "solaris.yaml")
    return run_cfg, summary


@pytest.fixture(scope="module")
def cycle(
    tmp_path_factory: pytest.TempPathFactory, write_movielens, tiny_config
) -> Iterator[tuple[SolarisConfig, dict]]:
    """(settings as the task runs read them, the demo's summary), one partition."""
    cfg, summary = _demo(tmp_path_factory.mktemp("cycle"), write_movielens, tiny_config)
    yield cfg, summary
    delete_project_keys(redis_client(REDIS), Namespace.of(cfg).project)


@pytest.fixture(scope="module")
def partitioned_cycle(
    tmp_path_factory: pytest.TempPathFactory, write_movielens, tiny_config
) -> Iterator[tuple[SolarisConfig, dict]]:
    """The same demo with 8 partitions and small units (several mapped selection,
    embedding and aggregates tasks per interval), more than the mapped-task cap of 3
    allows, so the plans grow their units to fit."""
    cfg, summary = _demo(
        tmp_path_factory.mktemp("partitioned"),
        write_movielens,
        tiny_config,
        partitions=8,
        shard_rows=10,
        select_requests=3,
        enrich_rows=20,
        max_mapped_tasks=MAPPED_TASK_CAP,
    )
    yield cfg, summary
    delete_project_keys(redis_client(REDIS), Namespace.of(cfg).project)


MAPPED_TASK_CAP = 3


def _intervals(summary: dict) -> int:
    return summary["airflow"]["intervals"]


def test_every_dag_ran_in_cycle_order_and_succeeded(cycle) -> None:
    _, summary = cycle
    runs = summary["airflow"]["dag_seconds"]
    n = _intervals(summary)
    eval_from = summary["models"]["val_end"]
    # 24 h of warm-up, then 1.5 days of the test period, at 6 h.
    assert n == len(window_intervals(eval_from - 86_400, eval_from + 36 * 3600, 6 * 3600))
    assert [len(runs[d]) for d in DAG_IDS[:3]] == [n, n, n]
    assert len(runs["solaris_clustering"]) >= 2  # one per midnight of the window
    assert len(runs["solaris_training"]) == 1


def test_demo_prints_per_dag_timings_coverage_by_tier_and_a_served_request(cycle) -> None:
    _, summary = cycle
    printed = summary["printed"]
    for label in (
        "Airflow cycle:",
        "DAG runs (count, mean s, total s):",
        *DAG_IDS,
        "FM passes over",
        "served through Feast:",
        "library replay of the same intervals",
        "training run:",
        "one served request:",
    ):
        assert label in printed
    for tier in ("pair", "nbr", "uagg", "iagg", "any"):
        assert f"  {tier:<5} " in printed


def test_backfill_pair_coverage_equals_the_library_replay(cycle) -> None:
    _, summary = cycle
    airflow = summary["airflow"]
    assert airflow["labelled_impressions"] == airflow["library_replay_impressions"] > 0
    assert airflow["coverage"]["pair"] > 0
    assert airflow["coverage"]["pair"] == pytest.approx(
        airflow["library_replay_pair_coverage"], abs=1e-12
    )


def test_asset_events_chain_candidates_to_embeddings_to_enrichment(cycle) -> None:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from solaris.local.airflow import LocalAirflow

    _, summary = cycle
    with create_session() as session:
        rows = session.execute(
            select(AssetModel.name, AssetEvent.extra, AssetEvent.source_dag_id).join(
                AssetModel, AssetModel.id == AssetEvent.asset_id
            )
        ).all()
    project_intervals = {
        (r["interval_start"], r["interval_end"])
        for r in json.loads(json.dumps(summary["airflow"]["candidates_intervals"]))
    }

    def intervals_of(name: str) -> set[tuple[int, int]]:
        return {
            (extra["interval_start"], extra["interval_end"])
            for asset, extra, _ in rows
            if asset == name
            and (extra["interval_start"], extra["interval_end"]) in project_intervals
        }

    assert intervals_of(runs.CANDIDATES) == project_intervals
    assert intervals_of(runs.PAIR_EMBEDDINGS) == project_intervals
    sources = {asset: dag for asset, _, dag in rows}
    assert sources[runs.CANDIDATES] == "solaris_candidates"
    assert sources[runs.PAIR_EMBEDDINGS] == "solaris_embeddings"
    assert sources[runs.USER_AGGREGATES] == "solaris_enrichment"
    assert sources[runs.USER_NEIGHBOURS] == "solaris_clustering"
    assert sources[runs.VERIFIER] == "solaris_training"
    # What the scheduler would start next from these events.
    assert "solaris_embeddings" in LocalAirflow.queued_dags(runs.CANDIDATES)
    assert "solaris_enrichment" in LocalAirflow.queued_dags(runs.PAIR_EMBEDDINGS)


def test_a_quiet_interval_ends_its_run_in_the_first_task_and_skips_the_rest(cycle) -> None:
    """One partition: every interval is quiet, so the candidates sensor and ``enrich`` do
    the work and mark the tasks below them skipped themselves (one task run per DAG run),
    while their events still start the next DAG (the chain test above)."""
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    cfg, summary = cycle
    firsts = {"solaris_candidates": "select_candidates", "solaris_enrichment": "enrich"}
    with create_session() as session:
        dag_runs = session.execute(
            select(DagRun.dag_id, DagRun.run_id, DagRun.conf).where(DagRun.dag_id.in_(firsts))
        ).all()
        mine = {(d, r) for d, r, conf in dag_runs if (conf or {}).get("namespace") == cfg.namespace}
        states = session.execute(
            select(
                TaskInstance.dag_id, TaskInstance.run_id, TaskInstance.task_id, TaskInstance.state
            ).where(TaskInstance.dag_id.in_(firsts))
        ).all()
    by_run: dict[tuple[str, str], dict[str, str]] = {}
    for dag_id, run_id, task_id, state in states:
        if (dag_id, run_id) in mine:
            by_run.setdefault((dag_id, run_id), {})[task_id] = str(state)
    assert len(by_run) == 2 * _intervals(summary)
    for (dag_id, _), tasks in by_run.items():
        first = firsts[dag_id]
        assert tasks.pop(first) == "success"
        assert tasks and set(tasks.values()) == {"skipped"}, (dag_id, tasks)


def test_runs_wrote_ledgers_codes_views_and_run_records(cycle) -> None:
    from solaris.data.schemas import read_table
    from solaris.serving.client import SolarisFeatures

    cfg, summary = cycle
    layout = CycleLayout(Namespace.of(cfg))
    embedded = 0
    last = None
    for start, end in (
        (r["interval_start"], r["interval_end"]) for r in summary["airflow"]["candidates_intervals"]
    ):
        interval = Interval(start, end)
        assert layout.selections(interval).is_file()
        folder = layout.codes_dir(interval)
        if folder is not None and any(folder.glob("shard-*.parquet")):
            table = read_table(folder, "pair_embeddings", z_dim=cfg.model.z_dim)
            assert {int(t.timestamp()) for t in table["computed_at"].to_pylist()} == {end}
            embedded += table.num_rows
            last = table
    assert embedded == summary["airflow"]["fm_passes"] > 0
    for view in ("pair", "uagg", "iagg"):
        assert any((Namespace.of(cfg).offline_root / view).rglob("*.parquet"))

    # The newest codes are in Redis: served as pair hits right after their interval.
    users = last["user_id"].to_numpy()
    items = last["item_id"].to_numpy()[users == users[0]]
    computed_at = int(last["computed_at"][0].as_py().timestamp())
    version = read_manifest(layout.models_dir).fm_version
    with SolarisFeatures(cfg, redis=REDIS, fm_version=version) as client:
        served = client.fetch(int(users[0]), items, now=computed_at)
    assert served.mask[:, 0].all()

    from solaris.orchestration.layout import read_run_records

    records = read_run_records(layout.root)
    assert set(records) == set(DAG_IDS)
    assert all("error" not in r for runs in records.values() for r in runs)
    # The SOLARIS page's freshness: the newest codes are whole cadences old.
    ages = [r["freshness_s"] for r in records["solaris_candidates"] if r["freshness_s"]]
    assert ages and all(a > 0 and a % (6 * 3600) == 0 for a in ages)


def test_training_publishes_the_new_verifier_only_if_no_worse(cycle) -> None:
    cfg, summary = cycle
    record = summary["airflow"]["training"]
    assert record["published"] == (record["val_logloss"] <= record["current_val_logloss"])
    pointer = CycleLayout(Namespace.of(cfg)).verifier_publication(record["interval_end"])
    assert pointer.is_file() == record["published"]


def test_candidates_run_without_redis_fails_and_writes_no_ledger(
    cycle, monkeypatch: pytest.MonkeyPatch
) -> None:
    from solaris.local.airflow import AirflowRunError, LocalAirflow

    cfg, _ = cycle
    config_path = Path(cfg.artifacts_dir) / "airflow" / "solaris.yaml"
    monkeypatch.setenv("SOLARIS_CONFIG", str(config_path))
    monkeypatch.setenv("SOLARIS_STORE__REDIS", "127.0.0.1:1")  # nothing listens there
    interval = Interval(0, 6 * 3600)  # long before the log: no earlier ledger either
    airflow = LocalAirflow(REPO / "dags")
    with pytest.raises(AirflowRunError, match="ended failed"):
        airflow.run("solaris_candidates", interval.as_dict())
    assert not CycleLayout(Namespace.of(cfg)).selections(interval).exists()


@pytest.mark.parametrize(
    "conf",
    [
        {"replay": "yes"},
        {"namespace": "Bad-Name"},
        {"interval_start": True, "interval_end": 900},
        {"intervals": []},
        {"intervals": [{"interval_start": 0}]},
        {"intervals": [{"interval_start": 0, "interval_end": 900, "extra": 1}]},
    ],
    ids=["replay-a-string", "bad-namespace", "bool-start", "no-intervals", "no-end", "extra-key"],
)
def test_a_conf_of_the_wrong_shape_is_refused_when_the_run_is_created(
    cycle, conf: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Airflow checks the conf against the DAGs' Params (``runs.conf_params``) as it
    creates the run, so no task starts and nothing is written."""
    from airflow.sdk.exceptions import ParamValidationError

    from solaris.local.airflow import LocalAirflow

    cfg, _ = cycle
    monkeypatch.setenv("SOLARIS_CONFIG", str(Path(cfg.artifacts_dir) / "airflow" / "solaris.yaml"))
    namespace = Namespace.of(cfg)
    before = _files(namespace.cycle_root, namespace.offline_root)
    airflow = LocalAirflow(REPO / "dags")
    for dag_id in ("solaris_candidates", "solaris_enrichment"):
        with pytest.raises(ParamValidationError):
            airflow.run(dag_id, conf)
    assert _files(namespace.cycle_root, namespace.offline_root) == before


# -- namespaces: a live-clock interval beside the replay, and logged scores -------------------


def _redis_state(client, namespace: Namespace) -> dict[bytes, bytes]:
    """Every key of ``namespace`` with its serialized value (``DUMP``): views and streams."""
    return {k: client.dump(k) for k in sorted(client.scan_iter(match=f"{namespace.name}:*"))}


def _files(*roots: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p): (p.stat().st_size, p.stat().st_mtime_ns)
        for root in roots
        if root.exists()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _snapshot(client, namespace: Namespace) -> tuple[dict, dict]:
    return _redis_state(client, namespace), _files(namespace.cycle_root, namespace.offline_root)


def test_live_clock_interval_and_replay_never_touch_each_others_state(
    cycle, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wall-clock run of the live namespace beside the demo's replay, on the same Redis
    and artifacts: each reads and writes only its own keys, streams and files. The live run
    selects from the scores serving logged, with no VM forward pass."""
    from datetime import UTC, datetime

    from solaris.examples.movielens.models.vm import VerticalModel
    from solaris.local.airflow import LocalAirflow
    from solaris.local.cycle import downstream_conf
    from solaris.model_versions import pin_version
    from solaris.orchestration.resources import read_parquet
    from solaris.serving.client import SolarisFeatures

    replay_cfg, summary = cycle
    replay = Namespace.of(replay_cfg)
    live_cfg = replay_cfg.model_copy(update={"namespace": f"{replay.name}_live", "replay": False})
    live = Namespace.of(live_cfg)
    # A namespace reads the model version pinned for it: the live one the demo's models.
    pin_version(live.models_root, live.name, summary["models"]["version"], live=None)
    client = redis_client(REDIS)
    monkeypatch.setenv(
        "SOLARIS_CONFIG", str(Path(replay_cfg.artifacts_dir) / "airflow" / "solaris.yaml")
    )

    def no_vm(*args, **kwargs):
        raise AssertionError("the candidates run scored with the VM instead of logged scores")

    monkeypatch.setattr(VerticalModel, "forward", no_vm)
    airflow = LocalAirflow(REPO / "dags")
    try:
        replay_before = _snapshot(client, replay)
        assert replay_before[0] and replay_before[1]  # the replay has keys and files to lose

        # Serving logs a request of the last whole wall-clock interval in the live namespace.
        now = datetime.now(UTC)
        cadence = round(replay_cfg.selection.cadence_minutes * 60)
        grid_end = int(now.timestamp()) // cadence * cadence
        version = read_manifest(replay.models_dir).fm_version
        with SolarisFeatures(live_cfg, redis=REDIS, fm_version=version) as serving:
            serving.log_request(7, 1, [1, 2, 3, 4], [0.9, 0.1, 0.8, 0.2], now=grid_end - 60)
            assert serving.flush()

        # A wall-clock run: no interval in its conf, its data interval from the clock.
        live_conf = {"namespace": live.name, "replay": False}  # the settings replay
        cand = airflow.run("solaris_candidates", live_conf, logical_date=now)
        [logged] = cand.asset_extras[runs.REQUEST_LOG]
        [selected] = cand.asset_extras[runs.CANDIDATES]
        assert (logged["namespace"], logged["interval_end"], logged["requests"]) == (
            live.name,
            grid_end,
            1,
        )
        assert selected["namespace"] == live.name and selected["selected"] == 2
        interval = Interval(grid_end - cadence, grid_end)
        ledger = read_parquet(CycleLayout(live).selections(interval))
        assert sorted(ledger["item_id"]) == [1, 3]  # the top half by the logged scores
        assert client.xlen(live.request_stream) == 0  # drained, once
        emb = airflow.run("solaris_embeddings", downstream_conf(selected))
        [embedded] = emb.asset_extras[runs.PAIR_EMBEDDINGS]
        airflow.run("solaris_enrichment", downstream_conf(embedded))

        assert _snapshot(client, replay) == replay_before
        live_state = _snapshot(client, live)
        assert any(b":pair:" in k for k in live_state[0])  # the live codes are in Redis ...
        assert all(k.startswith(live.key_prefix.encode()) for k in live_state[0])
        assert all(
            p.startswith((str(live.cycle_root), str(live.offline_root))) for p in live_state[1]
        )

        # ... and a replay interval after the demo's window leaves the live state alone.
        last = summary["airflow"]["candidates_intervals"][-1]["interval_end"]
        conf = {"namespace": replay.name, "replay": True}
        airflow.run(
            "solaris_candidates", {**conf, "interval_start": last, "interval_end": last + cadence}
        )
        assert _snapshot(client, live) == live_state
    finally:
        delete_project_keys(client, live.project)
        client.close()


def test_new_users_get_neighbours_at_every_enrichment_interval(cycle) -> None:
    """New users get neighbours within the interval that first embeds them: the enrichment
    keeps an index as of each interval end, not only the clustering DAG at midnight. The
    index is built over every user once a day (``cycle.neighbour_index_hours``) and grown
    by the users it lacks in between, when only those are queried."""
    run_cfg, summary = cycle
    assert run_cfg.cycle.neighbours_every_interval
    eval_from = summary["models"]["val_end"]
    ends = {i.end for i in window_intervals(eval_from - 86_400, eval_from + 36 * 3600, 6 * 3600)}
    layout = CycleLayout(Namespace.of(run_cfg))
    folder = layout.root / "runs" / "solaris_enrichment"
    built = {int(p.name.removesuffix("-unn.json")) for p in folder.glob("*-unn.json")}
    assert ends <= built
    newest = max(ends)
    assert layout.neighbour_index(newest).is_file()  # the newest index is kept, older removed
    assert not any(layout.neighbour_index(end).exists() for end in ends - {newest})
    assert any(end % 86_400 for end in ends)  # tables between the midnights too
    records = [json.loads(p.read_text()) for p in sorted(folder.glob("*-unn.json"))]
    queried = [r["rows_written"]["unn"] for r in records]
    assert max(queried) > 0 and min(queried) < max(queried)  # a build, and growth after it


# -- partitions ------------------------------------------------------------------------------


def _served_values(client, project: str) -> dict[str, bytes]:
    """Every view key of ``project`` (the prefix dropped) with its value: hashes as their
    sorted (field, record) pairs, strings as they are. The namespace's recorded partition
    count is no served value (it is what the replays differ in)."""
    out = {}
    for key in client.scan_iter(match=f"{project}:*"):
        name = key.decode().removeprefix(f"{project}:")
        if name == "partitions":
            continue
        if client.type(key) == b"hash":
            out[name] = sorted(client.hgetall(key).items())
        elif client.type(key) == b"string":
            out[name] = client.get(key)
    return out


def test_eight_partitions_serve_the_features_and_coverage_of_one(cycle, partitioned_cycle) -> None:
    """The same replay with ``cycle.partitions`` 1 and 8: the Feast-served coverage of every
    tier is the same impression for impression, equal to the library replay's, and every
    key of the online store holds the same bytes; with 8 partitions the aggregates ran as
    several mapped tasks and the shards record the partitions they hold."""
    cfg1, one = cycle
    cfg8, eight = partitioned_cycle
    assert eight["airflow"]["coverage"] == one["airflow"]["coverage"]
    assert eight["airflow"]["labelled_impressions"] == one["airflow"]["labelled_impressions"]
    assert eight["airflow"]["coverage"]["pair"] == pytest.approx(
        eight["airflow"]["library_replay_pair_coverage"], abs=1e-12
    )
    client = redis_client(REDIS)
    served1 = _served_values(client, Namespace.of(cfg1).project)
    served8 = _served_values(client, Namespace.of(cfg8).project)
    assert served1 and served1.keys() == served8.keys()
    assert {k for k in served1 if served1[k] != served8[k]} == set()

    from solaris.orchestration.layout import read_run_records

    layout = CycleLayout(Namespace.of(cfg8))
    records = read_run_records(layout.root)
    tasks = [r["tasks"] for r in records["solaris_enrichment"] if r.get("view") == "uagg"]
    assert tasks and max(tasks) > 1  # the busy intervals' partitions were spread over tasks
    assert max(r["tasks"] for r in records["solaris_candidates"]) > 1  # selection too
    # ... and no stage mapped more tasks than the cap, though its units' rows asked for more.
    assert max(tasks) <= MAPPED_TASK_CAP
    assert max(r["tasks"] for r in records["solaris_candidates"]) <= MAPPED_TASK_CAP
    interval = Interval(*max(_interval(r) for r in eight["airflow"]["candidates_intervals"]))
    files = layout.interval_files("selections", interval)[0]  # a ledger per partition
    assert [p.name for p in files] == [f"{k:05d}.parquet" for k in range(8)]
    assert len(layout.interval_files("request_log", interval)[0]) == 8
    coverage = [
        codes.coverage
        for r in eight["airflow"]["candidates_intervals"]
        if (codes := layout.published_codes(Interval(r["interval_start"], r["interval_end"])))
    ]
    assert coverage and all(c is not None for c in coverage)
    assert any(len({first for first, _ in c}) > 1 for c in coverage)  # shards by partition
    assert max(len(c) for c in coverage) <= MAPPED_TASK_CAP
    rows = [
        codes.rows
        for r in eight["airflow"]["candidates_intervals"]
        if (codes := layout.published_codes(Interval(r["interval_start"], r["interval_end"])))
    ]
    assert max(max(r) for r in rows if r) > 10  # shards grew past cycle.shard_rows to fit


def test_a_partitions_tasks_touch_only_that_partitions_files_and_keys(
    partitioned_cycle,
) -> None:
    """One partition's aggregates, rerun as of the last interval: it reads only the shards
    that hold that partition (the others are moved away and it still succeeds), writes
    only uagg keys of that partition's users (seen through Redis keyspace notifications)
    and only that partition's files (its item sums, its fill codes, its carried windows)."""
    import shutil

    import numpy as np

    from solaris.orchestration.enrichment import (
        aggregate_partitions,
        fill_partitions,
        pair_history,
    )
    from solaris.store.partitions import Partitioning

    cfg, summary = partitioned_cycle
    namespace = Namespace.of(cfg)
    layout = CycleLayout(namespace)
    parts = Partitioning(cfg.cycle.partitions)
    as_of = max(r["interval_end"] for r in summary["airflow"]["candidates_intervals"])
    window = round(cfg.store.uagg_window_hours * 3600)
    held = [
        (path, rng)
        for interval in layout.embedded_intervals(ending_after=as_of - window, ending_by=as_of)
        for path, rng in zip(*_shards(layout, interval), strict=True)
    ]
    users = pair_history(cfg, as_of, window).pairs["user_id"].to_numpy()
    mine = int(np.bincount(parts.of(users)).argmax())  # a partition with codes in the window
    away = [path for path, (first, last) in held if not first <= mine <= last]
    assert away  # other partitions' shards exist, and are not needed
    hidden = Path(cfg.artifacts_dir) / "hidden"
    hidden.mkdir(exist_ok=True)
    with _watching(namespace) as seen:
        moved = [(p, Path(shutil.move(p, hidden / f"{i}.parquet"))) for i, p in enumerate(away)]
        try:
            figures = aggregate_partitions(cfg, as_of, [mine])
        finally:
            for original, now in moved:
                shutil.move(now, original)
    touched, changed = seen["keys"], seen["files"]
    assert figures["uagg_rows"] > 0 and figures["partitions_run"] == [mine, mine]
    assert touched and all(k.startswith(f"{namespace.project}:uagg:{{u:") for k in touched)
    users = np.array([int(k.rsplit(":", 1)[1].rstrip("}")) for k in touched])
    assert set(parts.of(users).tolist()) == {mine}
    assert {Path(p).name for p in changed} <= {
        f"{mine:05d}.parquet",
        f"{mine:05d}.arrow",
        f"{mine:05d}.npz",
        f"batch-cycle-{as_of}-p{mine:05d}.parquet",
    }, changed
    assert str(layout.item_partials(as_of, mine)) in changed
    assert str(layout.fill_codes(as_of, mine)) in changed

    # The partition's neighbour fill looks codes up in every partition's fill codes (its
    # users' neighbours are anywhere) but writes only its own users' unn and nbr keys and
    # batch files.
    with _watching(namespace) as seen:
        filled = fill_partitions(cfg, as_of, [mine])
    touched = seen["keys"]
    assert filled["unn_rows"] > 0
    views = {k.split(":")[1] for k in touched}
    assert views <= {"unn", "nbr"} and "unn" in views
    users = np.array([int(k.rsplit(":", 1)[1].rstrip("}")) for k in touched])
    assert set(parts.of(users).tolist()) == {mine}
    changed = {Path(p).name for p in seen["files"]}
    assert changed <= {f"batch-cycle-{as_of}-p{mine:05d}.parquet"}, changed


def test_a_partitions_selection_rerun_touches_only_its_own_stream_and_files(
    partitioned_cycle,
) -> None:
    """One partition's selection of the last interval, rerun: it drains only its own
    stream (nothing is left there: no key changes) and rewrites only its own request-log
    file, ledger and drain record, with the same ledger (a rerun selects what the run
    selected)."""
    from solaris.orchestration.candidates import select_partitions
    from solaris.orchestration.resources import read_parquet

    cfg, summary = partitioned_cycle
    namespace = Namespace.of(cfg)
    layout = CycleLayout(namespace)
    interval = Interval(*max(_interval(r) for r in summary["airflow"]["candidates_intervals"]))
    ledgers = [read_parquet(layout.selections(interval, k)) for k in range(8)]
    mine = max(range(8), key=lambda k: len(ledgers[k]))  # the busiest partition
    ledger = ledgers[mine]
    assert len(ledger)
    with _watching(namespace) as seen:
        figures = select_partitions(cfg, interval, [mine])
    assert seen["keys"] == set()
    assert seen["files"] == {
        str(layout.request_log(interval, mine)),
        str(layout.selections(interval, mine)),
        str(layout.drained(interval, mine)),
    }
    assert figures["selected"] == len(ledger)
    assert read_parquet(layout.selections(interval, mine)).equals(ledger)


@contextlib.contextmanager
def _watching(namespace: Namespace) -> Iterator[dict[str, set[str]]]:
    """What the block writes in ``namespace``, filled in when it ends: ``keys``, the keys
    Redis's keyspace notifications name, and ``files``, the cycle and offline files whose
    size or mtime changed."""
    client = redis_client(REDIS)
    db = client.connection_pool.connection_kwargs.get("db", 0)
    client.config_set("notify-keyspace-events", "KA")
    pubsub = client.pubsub()
    pubsub.psubscribe(f"__keyspace@{db}__:{namespace.project}:*")
    before = _files(namespace.cycle_root, namespace.offline_root)
    seen: dict[str, set[str]] = {"keys": set(), "files": set()}
    try:
        yield seen
    finally:
        client.config_set("notify-keyspace-events", "")
    seen["keys"] |= _keys_touched(pubsub)
    after = _files(namespace.cycle_root, namespace.offline_root)
    seen["files"] |= {p for p in after if before.get(p) != after[p]}


def _keys_touched(pubsub) -> set[str]:
    """The keys named by the keyspace notifications ``pubsub`` received (drained for up to
    two seconds), then closes it."""
    import time

    touched = set()
    deadline = time.monotonic() + 2
    while (message := pubsub.get_message(timeout=0.2)) or time.monotonic() < deadline:
        if message and message["type"] == "pmessage":
            touched.add(message["channel"].decode().split("__:", 1)[1])
    pubsub.close()
    return touched


def _interval(record: dict) -> tuple[int, int]:
    return record["interval_start"], record["interval_end"]


def _shards(layout: CycleLayout, interval: Interval) -> tuple[tuple, tuple]:
    codes = layout.published_codes(interval)
    assert codes is not None and codes.coverage is not None
    return codes.files, codes.coverage


def test_the_daily_table_path_fills_what_the_per_interval_index_filled(partitioned_cycle) -> None:
    """With ``cycle.neighbours_every_interval`` off, the fill reads the clustering DAG's
    table (kept partition by partition) and filters it per partition: rebuilt as of the
    last interval, it gives the nbr and unn keys the per-interval index built over every
    user as of that interval gives, byte for byte."""
    from solaris.orchestration.enrichment import (
        build_neighbour_index,
        fill_partitions,
        rebuild_user_neighbours,
    )

    cfg, summary = partitioned_cycle
    namespace = Namespace.of(cfg)
    layout = CycleLayout(namespace)
    as_of = max(r["interval_end"] for r in summary["airflow"]["candidates_intervals"])
    every = cfg.model_copy(
        update={"cycle": cfg.cycle.model_copy(update={"neighbour_index_hours": 0.0})}
    )
    build_neighbour_index(every, as_of)  # over every user as of the last interval
    fill_partitions(every, as_of, range(8))
    daily = cfg.model_copy(
        update={"cycle": cfg.cycle.model_copy(update={"neighbours_every_interval": False})}
    )
    client = redis_client(REDIS)
    before = _served_values(client, namespace.project)
    record = rebuild_user_neighbours(daily, as_of)
    assert record["rows_written"]["unn"] > 0 and layout.neighbours(as_of).is_file()
    filled = fill_partitions(daily, as_of, range(8))
    assert filled["nbr_rows"] > 0 and filled["unn_rows"] == 0  # unn came from the table
    after = _served_values(client, namespace.project)
    views = {k.split(":")[0] for k in after}
    assert {"nbr", "unn"} <= views
    assert {k for k in after if after[k] != before.get(k)} == set()
