"""deploy/helm/values.yaml, read as data: neither helm nor a cluster is available here, so the
values for the official Airflow chart are checked for what the deployment relies on (the
CeleryExecutor, a worker set per queue with the queue names of solaris.config and Airflow, the
GPU limit, the `gpu` pool, the project image and environment) and for what they must not hold
(a credential: every one is a Kubernetes Secret referenced by name)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from solaris.config import CycleConfig, SolarisConfig
from solaris.examples.movielens.settings import environment as example_environment

REPO = Path(__file__).resolve().parents[3]
VALUES_FILE = REPO / "deploy" / "helm" / "values.yaml"
DOCKERFILE = REPO / "docker" / "Dockerfile"

# The chart's values that name a Secret (and the key the chart reads from it).
SECRET_NAMES = {
    ("fernetKeySecretName",): "fernet-key",
    ("apiSecretKeySecretName",): "api-secret-key",
    ("jwtSecretName",): "jwt-secret",
    ("data", "metadataSecretName"): "connection",
    ("data", "resultBackendSecretName"): "connection",
    ("data", "brokerUrlSecretName"): "connection",
}
# The chart's values that would hold the same credentials inline (or make the chart generate
# them, or install a database or broker with a default password).
INLINE_SECRETS = (
    ("fernetKey",),
    ("apiSecretKey",),
    ("jwtSecret",),
    ("webserverSecretKey",),
    ("data", "metadataConnection"),
    ("data", "resultBackendConnection"),
    ("data", "brokerUrl"),
    ("redis", "password"),
    ("flower", "password"),
    ("postgresql", "auth"),
)
# Names of values that hold a credential, unless they name the Secret that holds it.
_SECRET_NAME = re.compile(r"password|passwd|secret|fernet|jwt|token|credential", re.IGNORECASE)
_URL_PASSWORD = re.compile(r"://[^:/@\s]*:([^@\s]+)@")


@pytest.fixture(scope="module")
def values() -> dict[str, Any]:
    return yaml.safe_load(VALUES_FILE.read_text())


@pytest.fixture(scope="module")
def celery(values: dict[str, Any]) -> dict[str, Any]:
    return values["workers"]["celery"]


def _get(node: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def _items(node: Any, path: str = "") -> Any:
    """Every ``(path, key, value)`` of the parsed file, leaves and branches."""
    if isinstance(node, dict):
        for key, value in node.items():
            yield f"{path}.{key}", str(key), value
            yield from _items(value, f"{path}.{key}")
    elif isinstance(node, list):
        for k, value in enumerate(node):
            yield f"{path}[{k}]", "", value
            yield from _items(value, f"{path}[{k}]")


def _worker_command(args: list[str]) -> list[str]:
    """The `airflow celery worker ...` line of a worker set's ``bash -c "exec ..."`` args."""
    assert args[:2] == ["bash", "-c"], args
    command = shlex.split(args[2])
    assert command[:4] == ["exec", "airflow", "celery", "worker"], command
    return command[1:]


def _option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_the_chart_runs_the_celery_executor_of_the_locked_airflow(values):
    assert values["executor"] == "CeleryExecutor"
    assert values["airflowVersion"] == importlib.metadata.version("apache-airflow")


def test_the_default_worker_set_consumes_airflows_default_queue(celery, airflow_options):
    default_queue = airflow_options["operators"]["default_queue"]["default"]
    assert celery["enableDefault"] is True
    assert celery["queue"] == default_queue
    assert _option(_worker_command(celery["args"]), "--queues") == default_queue


def test_one_worker_set_consumes_exactly_the_embedding_queue_one_task_at_a_time(celery):
    gpu_queue = CycleConfig().gpu_queue
    (gpu,) = [s for s in celery["sets"] if s["queue"] == gpu_queue]
    command = _worker_command(gpu["args"])
    assert _option(command, "--queues") == gpu_queue  # that queue alone
    assert _option(command, "--concurrency") == "1"
    assert gpu["replicas"] == 1


def test_each_queue_has_exactly_one_worker_set(celery):
    sets = [celery, *celery["sets"]]
    queues = [_option(_worker_command(s["args"]), "--queues") for s in sets]
    assert [s["queue"] for s in sets] == queues  # the chart's `queue` and the command agree
    assert sorted(queues) == sorted(set(queues)) and len(queues) == 2, queues
    assert len({s.get("name") for s in celery["sets"]}) == len(celery["sets"])


def test_the_gpu_worker_set_asks_for_an_nvidia_gpu_on_a_gpu_node(celery):
    (gpu,) = [s for s in celery["sets"] if s["queue"] == CycleConfig().gpu_queue]
    assert gpu["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert gpu["nodeSelector"]
    assert [t["key"] for t in gpu["tolerations"]] == ["nvidia.com/gpu"]
    env = {e["name"]: e["value"] for e in gpu["env"]}
    assert env == {"SOLARIS_DEVICE": "cuda"}  # fail loudly without a GPU
    # The default set asks for none.
    assert "nvidia.com/gpu" not in str(celery.get("resources", {}))


def test_the_migration_hook_creates_the_gpu_pool(values):
    args = values["migrateDatabaseJob"]["args"]
    assert args[:2] == ["bash", "-c"]
    commands = [shlex.split(part) for part in args[2].split("&&")]
    assert commands[0] == ["airflow", "db", "migrate"]
    assert commands[1][:3] == ["airflow", "pools", "set"]
    pool, slots = commands[1][3:5]
    assert pool == CycleConfig().gpu_pool
    assert slots == "1"  # one GPU worker, one task at a time
    assert len(commands) == 2 and "exec" not in args[2]  # `exec` would end the shell early


def test_every_secret_is_a_kubernetes_secret_named_by_the_values(values):
    for path, key in SECRET_NAMES.items():
        name = _get(values, path)
        assert isinstance(name, str) and re.fullmatch(r"[a-z0-9][a-z0-9.-]*", name), (path, key)
    names = [_get(values, path) for path in SECRET_NAMES]
    assert len(set(names)) == len(names)
    for path in INLINE_SECRETS:
        assert _get(values, path) is None, f"{'.'.join(path)} holds a credential inline"


def test_values_hold_no_credential_inline(values):
    text = VALUES_FILE.read_text()
    for where, key, value in _items(values):
        # `secret:` is the chart's list of Secrets by name (checked below), not a value.
        named = key.endswith(("SecretName", "secretName")) or where.startswith(".secret")
        if _SECRET_NAME.search(key) and not named:
            pytest.fail(f"{where} may hold a credential: name its Secret instead")
        if isinstance(value, str):
            assert not _URL_PASSWORD.search(value), f"{where}: a password in a URL"
    for entry in values.get("env", []):
        assert not _SECRET_NAME.search(entry["name"]), f"{entry['name']} belongs in `secret:`"
    for entry in values.get("secret", []):
        assert set(entry) == {"envName", "secretName", "secretKey"}, entry
    # Comments show the secrets' URLs with a <placeholder> for the password, never a value.
    passwords = _URL_PASSWORD.findall(text)
    assert all(re.fullmatch(r"<[a-z ]+>", p) for p in passwords), passwords


def test_the_chart_installs_no_database_or_broker_of_its_own(values):
    assert values["postgresql"]["enabled"] is False
    assert values["redis"]["enabled"] is False


def test_solaris_settings_in_the_environment_are_read_by_solaris_config(
    values, monkeypatch: pytest.MonkeyPatch
):
    env = {e["name"]: e["value"] for e in values["env"] if e["name"].startswith("SOLARIS_")}
    assert set(env) == {
        "SOLARIS_STORE__REDIS",
        "SOLARIS_ARTIFACTS_DIR",
        "SOLARIS_CYCLE__STATE_URI",
        "SOLARIS_STORE__OFFLINE_URI",
        *example_environment(),  # the adapters: the product has no default
    }
    with monkeypatch.context() as patch:
        for key in [k for k in os.environ if k.startswith("SOLARIS_")]:
            patch.delenv(key)
        for key, value in env.items():
            patch.setenv(key, value)
        cfg = SolarisConfig()
    assert cfg.store.redis is not None
    ((host, port),) = cfg.store.redis.nodes
    assert host and port > 0
    assert cfg.artifacts_dir == Path(env["SOLARIS_ARTIFACTS_DIR"])
    assert cfg.cycle.gpu_queue == CycleConfig().gpu_queue
    assert cfg.model.foundation == example_environment()["SOLARIS_MODEL__FOUNDATION"]
    # What tasks hand each other goes through a bucket, not a volume.
    assert cfg.cycle.state_uri.startswith("s3://")
    assert cfg.store.offline_uri.startswith("s3://")


def test_the_feast_registry_is_the_sql_registry_from_a_kubernetes_secret(values):
    [entry] = [e for e in values["secret"] if e["envName"] == "SOLARIS_STORE__REGISTRY"]
    assert entry == {
        "envName": "SOLARIS_STORE__REGISTRY",
        "secretName": "solaris-feast-registry",
        "secretKey": "connection",
    }
    assert all(e["name"] != "SOLARIS_STORE__REGISTRY" for e in values["env"])


def test_every_airflow_container_mounts_the_input_claims_and_no_feast_data(values):
    volumes = {v["name"]: v for v in values["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in values["volumeMounts"]}
    assert set(mounts.values()) == set(volumes)
    for volume in volumes.values():
        assert volume["persistentVolumeClaim"]["claimName"], volume
    env = {e["name"]: e["value"] for e in values["env"]}
    # What every worker reads: the models (artifacts) and the download cache. The Feast data
    # is in PostgreSQL (registry) and the bucket (offline rows), never on a shared volume.
    assert env["SOLARIS_ARTIFACTS_DIR"] in mounts
    dockerfile = DOCKERFILE.read_text()
    assert "/opt/airflow/feature_repo/data" not in mounts
    assert "XDG_CACHE_HOME=/opt/airflow/cache" in dockerfile and "/opt/airflow/cache" in mounts


def test_the_image_is_the_projects_with_the_official_images_entrypoint(values):
    image = values["images"]["airflow"]
    assert image["repository"] and image["tag"] == "cuda"  # one image, CUDA torch
    dockerfile = DOCKERFILE.read_text()
    # The chart's commands (`bash -c "exec airflow ..."`), init containers (`airflow db
    # check-migrations`) and probes (`/entrypoint ...`) rely on the official entrypoint.
    assert 'ENTRYPOINT ["/entrypoint"]' in dockerfile
    assert 'TORCH_VARIANT" = "cuda"' in dockerfile


def test_log_groomers_are_off_because_the_image_has_no_clean_logs_script(values):
    assert "clean-logs" not in DOCKERFILE.read_text()
    for component in ("scheduler", "triggerer", "dagProcessor", "workers"):
        assert values[component]["logGroomerSidecar"]["enabled"] is False, component


def test_the_ui_uses_the_installed_auth_manager_and_no_fab_user_job(values):
    core = values["config"]["core"]
    module, name = core["auth_manager"].rsplit(".", 1)
    assert importlib.util.find_spec(module) is not None
    assert name == "SimpleAuthManager"
    # `airflow users create` is a FAB command, and the lock has no FAB provider.
    assert importlib.util.find_spec("airflow.providers.fab") is None
    assert values["createUserJob"]["enabled"] is False
    assert values["apiServer"]["replicas"] == 1  # the generated password lives in the pod


def test_every_airflow_setting_in_config_is_an_airflow_option(values, airflow_options):
    options = airflow_options
    for section, settings in values["config"].items():
        for option in settings:
            assert option in options[section], f"[{section}] {option}"


def test_workers_use_the_warm_celery_config_which_imports(values):
    from airflow.providers.celery.executors.default_celery import DEFAULT_CELERY_CONFIG
    from airflow.sdk.module_loading import import_string

    env = {e["name"]: e["value"] for e in values["env"]}
    config = import_string(env["AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS"])
    assert config == DEFAULT_CELERY_CONFIG


NEARLINE_FILE = REPO / "deploy" / "helm" / "nearline.yaml"


def test_the_near_line_embedder_runs_on_the_gpu_nodes_with_the_workers_settings(values, celery):
    deployment = yaml.safe_load(NEARLINE_FILE.read_text())
    assert deployment["kind"] == "Deployment"
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["solaris", "nearline"]
    assert container["image"].endswith(":" + values["images"]["airflow"]["tag"])
    env = {e["name"]: e for e in container["env"]}
    assert env["SOLARIS_DEVICE"]["value"] == "cuda"
    shared = {e["name"]: e["value"] for e in values["env"]}
    for name in ("SOLARIS_STORE__REDIS", "SOLARIS_ARTIFACTS_DIR", "SOLARIS_STORE__OFFLINE_URI"):
        assert env[name]["value"] == shared[name], name
    (registry,) = [s for s in values["secret"] if s["envName"] == "SOLARIS_STORE__REGISTRY"]
    assert env["SOLARIS_STORE__REGISTRY"]["valueFrom"]["secretKeyRef"] == {
        "name": registry["secretName"],
        "key": registry["secretKey"],
    }
    (gpu,) = celery["sets"]
    assert container["resources"]["limits"] == gpu["resources"]["limits"]
    assert pod["nodeSelector"] == gpu["nodeSelector"]
    assert pod["tolerations"] == gpu["tolerations"]
    claims = {v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]}
    assert claims == {v["persistentVolumeClaim"]["claimName"] for v in values["volumes"]}
    assert "password" not in NEARLINE_FILE.read_text().lower()


def test_the_scheduler_and_workers_ship_the_capacity_tables_concurrency(values, celery):
    """32 tasks at once, all of one DAG if need be, the cycle's mapped tasks within Airflow's
    limit, and default workers of two tasks each on 2-core pods, more than one of them
    (docs/scaling.md, "Capacity")."""
    core = values["config"]["core"]
    assert int(core["parallelism"]) == int(core["max_active_tasks_per_dag"]) == 32
    assert int(core["max_map_length"]) >= CycleConfig().max_mapped_tasks
    assert _option(_worker_command(celery["args"]), "--concurrency") == "2"
    assert celery["resources"]["requests"]["cpu"] == "2"
    assert celery["replicas"] >= 2
