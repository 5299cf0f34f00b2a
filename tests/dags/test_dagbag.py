"""The DAG files parse cleanly, quickly, without side effects, and wire what the cycle needs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
DAG_IDS = {
    "solaris_candidates",
    "solaris_embeddings",
    "solaris_enrichment",
    "solaris_clustering",
    "solaris_training",
    "solaris_maintenance",
    "solaris_training_set",
}

# Parses dags/ in a fresh interpreter and reports what the parse cost and pulled in.
_PARSE = """
import json, sys, time
start = time.perf_counter()
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(sys.argv[1])
print(json.dumps({
    "seconds": time.perf_counter() - start,
    "errors": {k: str(v) for k, v in bag.import_errors.items()},
    "dag_ids": sorted(bag.dags),
    "heavy": sorted(m for m in ("torch", "feast", "sklearn", "redis") if m in sys.modules),
}))
"""


@pytest.fixture
def parsed(tmp_path: Path) -> dict:
    """Parse with settings that would fail any I/O: missing artifacts, no Redis."""
    artifacts = tmp_path / "not-there"
    env = {
        **os.environ,
        "SOLARIS_ARTIFACTS_DIR": str(artifacts),
        "SOLARIS_STORE__REDIS": "127.0.0.1:1",
        "SOLARIS_SELECTION__CADENCE_MINUTES": "7",
    }
    env.pop("SOLARIS_CONFIG", None)
    done = subprocess.run(
        [sys.executable, "-c", _PARSE, str(DAGS)],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["artifacts"] = artifacts
    return result


def test_dag_files_import_without_errors_and_define_the_seven_dags(parsed: dict) -> None:
    assert parsed["errors"] == {}
    assert set(parsed["dag_ids"]) == DAG_IDS


def test_parsing_does_no_work_and_imports_nothing_heavy(parsed: dict) -> None:
    assert parsed["heavy"] == []  # torch, feast, sklearn, redis load in the tasks only
    assert not parsed["artifacts"].exists()  # nothing was written
    assert parsed["seconds"] < 20  # the whole folder, Airflow's own imports included


@pytest.fixture
def dags(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SOLARIS_SELECTION__CADENCE_MINUTES", "7")
    monkeypatch.setenv("SOLARIS_CYCLE__EMBED_RETRIES", "4")
    monkeypatch.setenv("SOLARIS_CYCLE__CLUSTERING_CRON", "15 3 * * *")
    monkeypatch.setenv("SOLARIS_CYCLE__MAINTENANCE_CRON", "45 4 * * *")
    monkeypatch.delenv("SOLARIS_CONFIG", raising=False)
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(str(DAGS))
    assert bag.import_errors == {}
    return bag.dags


def _scheduled_on(dag) -> set[str]:
    return {asset.name for asset in dag.timetable.asset_condition.objects}


def test_candidates_runs_on_the_cadence_after_the_previous_interval_and_emits_both_assets(
    dags,
) -> None:
    from airflow.sdk import DeltaDataIntervalTimetable

    dag = dags["solaris_candidates"]
    # Time only: it emits request_log itself, so it must not be scheduled on it.
    assert isinstance(dag.timetable, DeltaDataIntervalTimetable)
    assert dag.timetable.delta == timedelta(minutes=7)
    # A sensor waits for the previous interval, then selects (or plans the partitions'
    # mapped selections); the last task publishes both events.
    assert [t.task_id for t in dag.tasks] == ["select_candidates", "select_partitions", "publish"]
    select = dag.get_task("select_candidates")
    assert select.mode == "poke" and select.timeout == 60 * 60  # cycle.wait_previous_minutes
    assert dag.get_task("select_partitions").upstream_task_ids == {"select_candidates"}
    publish = dag.get_task("publish")
    assert publish.upstream_task_ids == {"select_partitions"}
    assert publish.trigger_rule == "all_success"  # skipped when nothing was mapped
    # Whichever of the two finished the selection emits the events, through one alias.
    assert [o.name for o in select.outlets] == [o.name for o in publish.outlets]
    assert [type(o).__name__ for o in publish.outlets] == ["AssetAlias"]


def test_embeddings_map_shards_on_the_gpu_pool_with_backoff_retries(dags) -> None:
    dag = dags["solaris_embeddings"]
    assert _scheduled_on(dag) == {"solaris://candidates"}
    embed = dag.get_task("embed_shard")
    assert embed.is_mapped
    assert embed.partial_kwargs["pool"] == "gpu"
    assert embed.partial_kwargs["retries"] == 4
    assert embed.partial_kwargs["retry_exponential_backoff"]
    publish = dag.get_task("publish")
    assert [o.name for o in publish.outlets] == ["solaris://pair_embeddings"]
    assert publish.trigger_rule == "none_failed"  # an interval with nothing selected


def test_enrichment_follows_pair_embeddings_and_daily_dags_follow_their_crons(dags) -> None:
    enrichment = dags["solaris_enrichment"]
    assert _scheduled_on(enrichment) == {"solaris://pair_embeddings"}
    assert {t.task_id for t in enrichment.tasks} == {
        "enrich",
        "partition_aggregates",
        "aggregates",
        "partition_neighbours",
        "neighbours",
    }
    # Partitions: mapped aggregates, the reduction (and index), mapped neighbour fills.
    assert enrichment.get_task("partition_aggregates").upstream_task_ids == {"enrich"}
    assert enrichment.get_task("aggregates").upstream_task_ids == {"partition_aggregates"}
    assert enrichment.get_task("partition_neighbours").upstream_task_ids == {"aggregates"}
    assert enrichment.get_task("neighbours").upstream_task_ids == {"partition_neighbours"}
    aliases = {
        task: [type(o).__name__ for o in enrichment.get_task(task).outlets]
        for task in ("enrich", "aggregates", "neighbours")
    }
    assert all(kinds == ["AssetAlias"] for kinds in aliases.values())
    assert enrichment.get_task("aggregates").trigger_rule == "all_success"
    assert dags["solaris_clustering"].timetable.expression == "15 3 * * *"
    # In a replay, clustering waits for the enrichment as of its time.
    assert dags["solaris_clustering"].get_task("cluster_users").upstream_task_ids == {
        "enrichment_published"
    }
    assert dags["solaris_training"].timetable.expression == "30 0 * * *"


def test_maintenance_runs_on_its_cron_one_run_at_a_time_with_three_independent_tasks(
    dags,
) -> None:
    dag = dags["solaris_maintenance"]
    assert dag.timetable.expression == "45 4 * * *"  # cycle.maintenance_cron
    assert not dag.catchup and dag.max_active_runs == 1 and "solaris" in dag.tags
    assert sorted(t.task_id for t in dag.tasks) == [
        "clean_airflow_db",
        "prune_offline",
        "prune_state",
    ]
    # One failing (the metadata DB unreachable) does not keep the others from their part.
    assert all(not t.upstream_task_ids and not t.outlets for t in dag.tasks)
    assert set(dag.params) == {"namespace", "replay", "interval_start", "interval_end", "intervals"}


def test_training_set_runs_on_demand_with_one_task_and_its_own_conf(dags) -> None:
    dag = dags["solaris_training_set"]
    assert type(dag.timetable).__name__ == "NullTimetable"  # manual runs only
    assert not dag.catchup and "solaris" in dag.tags
    assert [t.task_id for t in dag.tasks] == ["write_training_set"]
    assert not dag.tasks[0].outlets
    assert set(dag.params) == {
        "namespace",
        "impressions",
        "out",
        "fm_version",
        "chunk_rows",
        "overwrite",
    }
    # A conf of the wrong shape is refused when the run is created.
    import copy

    def checked(conf: dict) -> dict:
        params = copy.deepcopy(dag.params)
        params.update(conf)
        return params.validate()

    good = {"impressions": "s3://b/imp/", "out": "s3://b/train/", "chunk_rows": 7}
    assert checked(good)["chunk_rows"] == 7
    for bad in ({"chunk_rows": 0}, {"overwrite": "yes"}, {"namespace": "Not A Name"}):
        with pytest.raises(Exception, match=next(iter(bad))):
            checked(bad)


def test_every_task_body_is_one_call_into_solaris() -> None:
    """DAG files only wire: each task body is a single statement calling the module of
    its DAG (``solaris.orchestration.<dag>``)."""
    import ast

    for path in DAGS.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef):
                continue
            decorators = [ast.unparse(d) for d in node.decorator_list]
            if not any(d.startswith("task") for d in decorators):
                continue
            body = [
                s
                for s in node.body
                if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))
            ]
            assert len(body) == 1, f"{path.name}:{node.name} has {len(body)} statements"
            calls = [ast.unparse(c.func) for c in ast.walk(body[0]) if isinstance(c, ast.Call)]
            module = path.stem.removeprefix("solaris_") + "."
            assert calls and all(c.startswith(module) for c in calls), (path.name, calls)
