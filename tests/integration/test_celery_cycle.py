"""The cycle through real Celery workers: ``scripts/airflow_celery.sh`` (``make airflow-celery``)
with the local RabbitMQ as broker and a PostgreSQL metadata DB, a ``default`` and a ``gpu``
worker, the real scheduler starting each interval's embeddings and enrichment runs from the
asset events of its candidates run.

One module-scoped run on the tiny fake MovieLens: the offline stage of ``solaris demo``
trains the models, then the launcher starts every Airflow component on a temporary
AIRFLOW_HOME, a throwaway PostgreSQL database and queues of this run's own (so nothing else
on the broker takes its tasks), and the window of the ``dag.test`` test is replayed interval
by interval (candidates triggered, clustering triggered after each midnight). The workers
share nothing on disk that they write: the cycle's state (``cycle.state_uri``) and Feast's
offline rows (``store.offline_uri``) live in a bucket of the local S3 endpoint (see
``conftest.py``), the Feast registry is the SQL registry in a PostgreSQL database of its
own, the online store is Redis. The tests read back the run records, the metadata DB
(which worker ran which task), the bucket and the task logs.

RabbitMQ (``amqp://guest:guest@127.0.0.1:5672//``; ``SOLARIS_TEST_BROKER``) and PostgreSQL
(``SOLARIS_TEST_POSTGRES``) must answer: otherwise the tests skip, except under ``CI``, where
they fail (CI starts both before the tests, ``.ci/run``).
"""

from __future__ import annotations

import os
import re
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import psycopg2
import pytest
import yaml

from solaris.config import SolarisConfig
from solaris.connection import redis_client
from solaris.local.cycle import CycleReport, export_config, window_intervals
from solaris.local.scheduler import CHAIN, AirflowServices, IntervalTiming
from solaris.namespace import Namespace
from solaris.orchestration.candidates import DAG_ID as CANDIDATES_DAG
from solaris.orchestration.embeddings import DAG_ID as EMBEDDINGS_DAG
from solaris.orchestration.enrichment import CLUSTERING_DAG_ID
from solaris.orchestration.layout import CycleLayout, read_run_records
from solaris.orchestration.resources import reset_namespace
from solaris.store.feast_store import delete_project_keys

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
REDIS = "127.0.0.1:6379,db=9"  # this module's own database number
BROKER = os.environ.get("SOLARIS_TEST_BROKER", "amqp://guest:guest@127.0.0.1:5672//")
POSTGRES = os.environ.get("SOLARIS_TEST_POSTGRES", "postgresql+psycopg2://postgres@127.0.0.1:5432")
DAY = 86_400
NEVER = "2100-01-01T00:00:00+00:00"  # the DAGs' schedules start then: only triggered runs run


@dataclass
class CeleryCycle:
    cfg: SolarisConfig  # the settings the task runs read
    services: AirflowServices
    timings: list[IntervalTiming]
    since: int  # the first whole test-period interval
    library: object  # the library replay of the same intervals
    default_queue: str
    gpu_queue: str
    airflow_home: Path
    artifacts: Path  # the local artifacts folder: models and the Airflow home, no cycle state


def _needs(service: str, reason: str) -> None:
    message = f"the Celery cycle test needs {service}: {reason}"
    if os.environ.get("CI"):
        pytest.fail(f"{message} (CI starts it in .ci/run)", pytrace=False)
    pytest.skip(message)


def _check_broker() -> None:
    url = urlsplit(BROKER)
    try:
        socket.create_connection((url.hostname, url.port or 5672), timeout=3).close()
    except OSError as exc:
        _needs(f"a broker at {url.hostname}:{url.port}", str(exc))


def _admin() -> psycopg2.extensions.connection:
    server = POSTGRES.replace("postgresql+psycopg2://", "postgresql://", 1)
    try:
        conn = psycopg2.connect(f"{server}/postgres", connect_timeout=3)
    except psycopg2.OperationalError as exc:
        _needs("PostgreSQL", str(exc).strip())
    conn.autocommit = True  # CREATE/DROP DATABASE cannot run in a transaction
    return conn


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _delete_queues(*names: str) -> None:
    from kombu import Connection

    with Connection(BROKER, connect_timeout=5) as conn:
        channel = conn.channel()
        for name in names:
            channel.queue_delete(name)


@pytest.fixture(scope="module")
def celery_cycle(
    tmp_path_factory: pytest.TempPathFactory, write_movielens, tiny_config, s3_endpoint
) -> Iterator[CeleryCycle]:
    import s3fs

    from solaris.examples.movielens.demo import run_demo
    from solaris.local.demo import library_replay

    _check_broker()
    admin = _admin()
    tmp = tmp_path_factory.mktemp("celery")
    write_movielens(tmp / "ml-100k")
    token = uuid.uuid4().hex[:8]
    project = f"celery_{token}"
    config = tiny_config(tmp, project, REDIS)
    # As the dag.test test: a budget and TTL under which the tiny log gives pair hits.
    config["selection"] = {"cadence_minutes": 360, "ttl_hours": 72, "share": 0.5}
    # Partitioned, with small selection units: busy intervals map their selection over the
    # workers (the enrichment's mapped tasks are tested under dag.test, test_dag_runs.py:
    # through the broker each task costs seconds).
    config["cycle"] = {
        "shard_rows": 40,
        "training_window_days": 10,
        "partitions": 4,
        "select_requests": 3,
    }
    (tmp / "solaris.yaml").write_text(yaml.safe_dump(config))
    cfg = SolarisConfig.load(tmp / "solaris.yaml")
    summary = run_demo(cfg, airflow=False, echo=lambda _: None)  # the offline stage: models

    artifacts = Path(cfg.artifacts_dir).resolve()
    bucket = f"solaris-celery-{token}"
    s3 = s3fs.S3FileSystem(endpoint_url=s3_endpoint.url, skip_instance_cache=True)
    s3.mkdir(bucket)
    registry_db = f"solaris_registry_{token}"
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{registry_db}"')
    state = cfg.cycle.model_copy(update={"state_uri": f"s3://{bucket}/state"})
    store = cfg.store.model_copy(
        update={
            "registry": f"{POSTGRES}/{registry_db}",
            "offline_uri": f"s3://{bucket}/offline",
            "offline_s3_endpoint": s3_endpoint.url,
        }
    )
    run_cfg = cfg.model_copy(
        update={"artifacts_dir": artifacts, "replay": True, "cycle": state, "store": store}
    )
    config_path = export_config(run_cfg, artifacts / "airflow" / "solaris.yaml")
    cadence = round(run_cfg.selection.cadence_minutes * 60)
    eval_from = int(summary["models"]["val_end"])
    # Six intervals, about half a minute each through the broker: two before the measured
    # day and four in it (with two on each side the tiny log gave no pair hit to compare).
    intervals = window_intervals(eval_from - DAY // 2, eval_from + DAY, cadence)
    since = -(-eval_from // cadence) * cadence

    database = f"solaris_celery_{token}"
    with admin.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{database}"')
    db_url = f"{POSTGRES}/{database}"
    port = _free_port()
    default_queue, gpu_queue = f"default_{token}", f"gpu_{token}"
    home = tmp / "airflow"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "SOLARIS_"))},
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__OPERATORS__DEFAULT_QUEUE": default_queue,
        "SOLARIS_AIRFLOW_DB_URL": db_url,
        "SOLARIS_CELERY_BROKER_URL": BROKER,
        "SOLARIS_CONFIG": str(config_path),
        "SOLARIS_NAMESPACE": project,
        "SOLARIS_ARTIFACTS_DIR": str(artifacts),
        "SOLARIS_CYCLE__START": NEVER,
        "SOLARIS_CYCLE__GPU_QUEUE": gpu_queue,
        **s3_endpoint.env,
    }
    services = AirflowServices(
        REPO / "scripts" / "airflow_celery.sh",
        env,
        db_url,
        tmp / "services.log",
        f"http://127.0.0.1:{port}",
    )
    redis = run_cfg.store.redis
    reset_namespace(run_cfg, redis)
    try:
        with services:
            services.wait_ready((*CHAIN, CLUSTERING_DAG_ID))
            conf = {"namespace": project, "replay": True}
            timings = []
            for interval in intervals:
                timings.append(services.run_interval(interval, conf, timeout_s=300))
                if interval.end % DAY == 0:  # the daily clustering, as run_window runs it
                    run_id = services.trigger(CLUSTERING_DAG_ID, {**conf, **interval.as_dict()})
                    services.wait_run(CLUSTERING_DAG_ID, run_id=run_id, timeout_s=300)
        library = library_replay(run_cfg, intervals[0].start, intervals[-1].end, since)
        yield CeleryCycle(
            run_cfg, services, timings, since, library, default_queue, gpu_queue, home, artifacts
        )
    finally:
        services.stop()
        delete_project_keys(redis_client(REDIS), Namespace.of(run_cfg).project)
        with admin.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
            cur.execute(f'DROP DATABASE IF EXISTS "{registry_db}" WITH (FORCE)')
        admin.close()
        _delete_queues(default_queue, gpu_queue)
        s3.rm(bucket, recursive=True)


def test_celery_workers_ran_every_interval_through_the_three_dags(celery_cycle) -> None:
    assert celery_cycle.timings
    for timing in celery_cycle.timings:
        assert set(timing.runs) == set(CHAIN)
        assert timing.seconds > 0


def test_pair_coverage_equals_the_library_replay(celery_cycle) -> None:
    layout = CycleLayout(Namespace.of(celery_cycle.cfg))
    report = CycleReport(candidates=read_run_records(layout.root)[CANDIDATES_DAG])
    n, coverage = report.coverage(since=celery_cycle.since)
    library = celery_cycle.library

    assert n == library.n_eval_impressions > 0
    assert coverage["pair"] > 0
    assert coverage["pair"] == pytest.approx(library.coverage, abs=1e-12)


def test_the_workers_wrote_their_state_and_offline_rows_to_the_bucket_only(celery_cycle) -> None:
    namespace = Namespace.of(celery_cycle.cfg)
    layout = CycleLayout(namespace)
    kinds = {p.name for p in layout.root.iterdir()}
    embedded = layout.embedded_intervals(ending_after=-1, ending_by=2**40)
    offline = {p.name: any(p.rglob("batch-*.parquet")) for p in namespace.offline_root.iterdir()}
    repo = Path(celery_cycle.cfg.store.repo_path)

    assert str(layout.root).startswith("s3://")
    assert {"request_log", "selections", "shards", "pair_embeddings", "runs"} <= kinds
    assert embedded and all(layout.codes_dir(i) is not None for i in embedded)
    assert str(namespace.offline_root).startswith("s3://")
    assert offline.keys() >= {"pair", "uagg", "iagg", "unn"} and all(offline.values())
    # Nothing went to local disk: no cycle folder, no offline rows, no registry file.
    assert not (celery_cycle.artifacts / "namespaces").exists()
    assert not (repo / "data" / "offline" / namespace.name).exists()
    assert celery_cycle.cfg.store.registry.startswith("postgresql")


def test_embed_shard_ran_on_the_gpu_worker_and_every_other_task_on_default(
    celery_cycle,
) -> None:
    queues = celery_cycle.services._query(
        "SELECT DISTINCT task_id, queue FROM task_instance WHERE state = 'success'"
    )
    # Which worker ran a task: its "Executing workload" line, prefixed with the worker's name
    # by the launcher (task_instance.hostname is the machine's, the same for both).
    executed = re.findall(
        r"^\[(worker|worker-gpu)\] .*Executing workload in Celery: .*?task_id='(\w+)'",
        celery_cycle.services.log_tail(chars=10**9),
        flags=re.MULTILINE,
    )

    assert dict(queues)["embed_shard"] == celery_cycle.gpu_queue
    assert {q for task, q in queues if task != "embed_shard"} == {celery_cycle.default_queue}
    assert {worker for worker, task in executed if task == "embed_shard"} == {"worker-gpu"}
    assert {worker for worker, task in executed if task != "embed_shard"} == {"worker"}
    assert {task for _, task in executed} >= {"select_candidates", "embed_shard", "publish"}
    # Busy intervals mapped the partitions' selection over the workers.
    assert "select_partitions" in {task for _, task in executed}


def test_both_workers_imported_the_task_libraries_before_forking(celery_cycle) -> None:
    log = celery_cycle.services.log_tail(chars=10**9)

    for worker in ("worker", "worker-gpu"):
        assert re.search(rf"^\[{worker}\] .*preloaded \d+ modules", log, flags=re.MULTILINE)


def test_task_logs_say_what_each_task_did(celery_cycle) -> None:
    logs = celery_cycle.airflow_home / "logs"
    # The interval's record is written by the sensor (a quiet interval) or by publish.
    records = [
        *logs.glob(f"dag_id={CANDIDATES_DAG}/*/task_id=select_candidates/*"),
        *logs.glob(f"dag_id={CANDIDATES_DAG}/*/task_id=publish/*"),
    ]
    [shard_log, *_] = sorted(logs.glob(f"dag_id={EMBEDDINGS_DAG}/*/task_id=embed_shard/*/*"))

    assert any("; out selected " in p.read_text() for p in records if p.is_file())
    assert "pairs embedded in" in shard_log.read_text()
