"""docker/compose.yaml, read as data: Docker is not available in CI, so the file is checked
for what the stack relies on (shared settings and volumes, start order, the GPU worker), for
what it must not hold (a secret, a port open beyond the host's loopback), and against
scripts/compose_secrets.sh, which writes the docker/.env the file reads its secrets from."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from solaris.config import CycleConfig, SolarisConfig

REPO = Path(__file__).resolve().parents[3]
COMPOSE_FILE = REPO / "docker" / "compose.yaml"
SECRETS_SCRIPT = REPO / "scripts" / "compose_secrets.sh"

AIRFLOW_SERVICES = (
    "airflow-init",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
    "airflow-worker-gpu",
)
LONG_RUNNING = tuple(s for s in AIRFLOW_SERVICES if s != "airflow-init")
COMMANDS = {
    "airflow-apiserver": "api-server",
    "airflow-scheduler": "scheduler",
    "airflow-dag-processor": "dag-processor",
    "airflow-triggerer": "triggerer",
    "airflow-worker-gpu": "scheduler",
}
# Every service that runs task code talks to the api-server's Execution API.
RUN_TASKS = ("airflow-scheduler", "airflow-worker-gpu", "airflow-triggerer")
SHARED_VOLUMES = {
    "solaris-artifacts": "/opt/airflow/artifacts",
    "feast-data": "/opt/airflow/feature_repo/data",
    "solaris-cache": "/opt/airflow/cache",
    "airflow-logs": "/opt/airflow/logs",
}
# Every service's health check; airflow-init runs once (its dependants wait for it to
# complete), so it has none.
JOB_TYPES = {
    "airflow-scheduler": "SchedulerJob",
    "airflow-dag-processor": "DagProcessorJob",
    "airflow-triggerer": "TriggererJob",
    "airflow-worker-gpu": "SchedulerJob",
}
SECRET_VARIABLES = {
    "AIRFLOW_JWT_SECRET",
    "AIRFLOW_API_SECRET_KEY",
    "AIRFLOW_FERNET_KEY",
    "POSTGRES_PASSWORD",
}
# Names of settings that hold a credential.
_SECRET_NAME = re.compile(r"SECRET|PASSWORD|PASSWD|TOKEN|FERNET|JWT|(^|_)KEY$", re.IGNORECASE)
_VARIABLE = re.compile(r"\$\{(?P<name>\w+)(?:(?P<op>:-|:\?|-|\?)(?P<arg>[^}]*))?\}")
_REQUIRED = re.compile(r"\$\{(?P<name>\w+):\?[^}]+\}")


class MissingVariable(KeyError):
    """Compose stops with ``required variable ... is missing a value``."""


def _interpolate(value: str, env: dict[str, str] | None = None) -> str:
    """Compose's ``${NAME}``, ``${NAME:-default}`` and ``${NAME:?error}`` substitution."""
    env = env or {}

    def one(match: re.Match[str]) -> str:
        given = env.get(match["name"])
        if given:
            return given
        if match["op"] in (":?", "?"):
            raise MissingVariable(f"{match['name']}: {match['arg']}")
        return match["arg"] or ""

    return _VARIABLE.sub(one, value)


def _strings(node: Any, path: str = "") -> Any:
    """Every ``(path, key, string)`` of the parsed file (merge keys already resolved)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if isinstance(value, str):
                yield f"{path}.{key}", str(key), value
            else:
                yield from _strings(value, f"{path}.{key}")
    elif isinstance(node, list):
        for k, value in enumerate(node):
            if isinstance(value, str):
                yield f"{path}[{k}]", "", value
            else:
                yield from _strings(value, f"{path}[{k}]")


def _env_file(path: Path) -> dict[str, str]:
    lines = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    return dict(line.split("=", 1) for line in lines)


def _secrets(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SECRETS_SCRIPT), str(path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


@pytest.fixture(scope="module")
def common_env(compose: dict[str, Any]) -> dict[str, str]:
    return compose["x-airflow-common"]["environment"]


def _volumes(service: dict[str, Any]) -> dict[str, str]:
    """``source -> target`` of a service's short-syntax volume entries."""
    return dict(entry.split(":", 1) for entry in service.get("volumes", []))


def _depends_on(service: dict[str, Any]) -> dict[str, str]:
    return {name: spec["condition"] for name, spec in service.get("depends_on", {}).items()}


def test_compose_file_follows_the_compose_spec_without_a_version_key(compose):
    assert "version" not in compose
    assert set(compose) <= {"services", "volumes"} | {k for k in compose if k.startswith("x-")}


def test_compose_file_defines_the_database_redis_and_every_airflow_service(services):
    assert set(services) == {"postgres", "redis", *AIRFLOW_SERVICES}


def test_each_airflow_service_runs_its_airflow_component(services):
    for name, command in COMMANDS.items():
        assert services[name]["command"] == command, name
        assert "entrypoint" not in services[name], f"{name} must keep the image's `airflow`"


def test_every_airflow_service_is_built_from_the_project_dockerfile(services):
    for name in AIRFLOW_SERVICES:
        build = services[name]["build"]
        context = (COMPOSE_FILE.parent / build["context"]).resolve()
        assert context == REPO, name
        assert (context / build["dockerfile"]).is_file(), name


def test_dockerfile_copies_dags_plugins_and_feature_repo_into_airflow_home(services):
    build = services["airflow-scheduler"]["build"]
    dockerfile = (COMPOSE_FILE.parent / build["context"] / build["dockerfile"]).read_text()
    copies = {
        tuple(line.split()[-2:])
        for line in dockerfile.splitlines()
        if line.startswith("COPY ") and "--from" not in line
    }
    for folder in ("dags", "plugins", "feature_repo"):
        assert (folder, f"/opt/airflow/{folder}") in copies, folder
    assert "AIRFLOW_HOME=/opt/airflow" in dockerfile
    assert 'ENTRYPOINT ["airflow"]' in dockerfile


def test_cpu_services_share_the_cpu_image_and_the_gpu_worker_builds_the_cuda_one(services):
    cpu = [s for s in AIRFLOW_SERVICES if s != "airflow-worker-gpu"]
    assert {services[s]["image"] for s in cpu} == {"solaris-airflow:cpu"}
    assert {services[s]["build"]["args"]["TORCH_VARIANT"] for s in cpu} == {"cpu"}
    gpu = services["airflow-worker-gpu"]
    assert gpu["image"] == "solaris-airflow:cuda"
    assert gpu["build"]["args"] == {"TORCH_VARIANT": "cuda"}
    assert gpu["build"]["dockerfile"] == services["airflow-scheduler"]["build"]["dockerfile"]


def test_every_airflow_service_shares_the_same_environment(services, common_env):
    assert common_env, "the x-airflow-common anchor has no environment"
    for name in AIRFLOW_SERVICES:
        env = services[name]["environment"]
        assert {k: env.get(k) for k in common_env} == common_env, name
    extra = {
        name: set(services[name]["environment"]) - set(common_env) for name in AIRFLOW_SERVICES
    }
    assert extra == {name: set() for name in AIRFLOW_SERVICES} | {
        "airflow-worker-gpu": {"SOLARIS_DEVICE"}
    }


def test_airflow_uses_postgres_with_the_local_executor_and_no_examples(services, common_env):
    env = {"POSTGRES_PASSWORD": "from-env-file"}
    url = _interpolate(common_env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"], env)
    pg = {k: _interpolate(v, env) for k, v in services["postgres"]["environment"].items()}
    assert pg["POSTGRES_PASSWORD"] == "from-env-file"
    assert url == (
        f"postgresql+psycopg2://{pg['POSTGRES_USER']}:{pg['POSTGRES_PASSWORD']}"
        f"@postgres:5432/{pg['POSTGRES_DB']}"
    )
    assert common_env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
    assert common_env["AIRFLOW__CORE__LOAD_EXAMPLES"] == "False"
    assert common_env["AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION"] == "False"


def test_task_processes_reach_the_execution_api_of_the_apiserver_service(services, common_env):
    url = common_env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"]
    container_port = services["airflow-apiserver"]["ports"][0].split(":")[-1]
    assert url == f"http://airflow-apiserver:{container_port}/execution/"


def test_signing_keys_are_shared_required_variables_without_defaults(common_env):
    for key, variable in (
        ("AIRFLOW__API_AUTH__JWT_SECRET", "AIRFLOW_JWT_SECRET"),
        ("AIRFLOW__API__SECRET_KEY", "AIRFLOW_API_SECRET_KEY"),
        ("AIRFLOW__CORE__FERNET_KEY", "AIRFLOW_FERNET_KEY"),
    ):
        assert _REQUIRED.fullmatch(common_env[key]), f"{key} = {common_env[key]!r}"
        assert _interpolate(common_env[key], {variable: "from-env"}) == "from-env", key
        with pytest.raises(MissingVariable, match=r"compose_secrets\.sh"):
            _interpolate(common_env[key])


def test_compose_holds_no_secret_literal_and_no_default_for_a_secret(compose):
    text = COMPOSE_FILE.read_text()
    for where, key, value in _strings(compose):
        if _SECRET_NAME.search(key):
            assert _REQUIRED.fullmatch(value), f"{where}: {value!r} is not a required variable"
        for url_password in re.findall(r"://[^:/@\s]+:([^@\s]+)@", value):
            assert _REQUIRED.fullmatch(url_password), f"{where}: a password in a URL"
    used = [m for _, _, value in _strings(compose) for m in _VARIABLE.finditer(value)]
    for match in used:
        if _SECRET_NAME.search(match["name"]):
            assert match["op"] == ":?", f"{match[0]} has a default or may be empty"
    assert {m["name"] for m in used} == SECRET_VARIABLES
    assert "change-me" not in text and "airflow:airflow@" not in text


def test_every_published_port_is_bound_to_the_loopback(services):
    published = {name: s["ports"] for name, s in services.items() if "ports" in s}
    assert published == {"airflow-apiserver": ["127.0.0.1:8080:8080"]}
    for name, ports in published.items():
        for port in ports:
            assert isinstance(port, str) and port.startswith("127.0.0.1:"), (name, port)
            assert port.count(":") == 2, (name, port)  # host IP, host port, container port


def test_every_long_running_service_has_a_healthcheck(services):
    for name, service in services.items():
        if name == "airflow-init":
            assert "healthcheck" not in service and service["restart"] == "no"
            continue
        check = service.get("healthcheck")
        assert check and check["test"][0] == "CMD", name


def test_airflow_components_are_checked_by_their_own_job_heartbeat(services):
    for name, job_type in JOB_TYPES.items():
        check = services[name]["healthcheck"]
        assert check["test"] == [
            "CMD",
            "airflow",
            "jobs",
            "check",
            "--job-type",
            job_type,
            "--local",
        ], name
        # The check imports Airflow: it needs time to start and a timeout to match.
        assert int(check["timeout"].rstrip("s")) >= 20, name
        assert int(check["start_period"].rstrip("s")) >= 30, name


def test_the_health_checks_job_types_are_those_the_installed_airflow_knows(tmp_path):
    airflow = REPO / ".venv" / "bin" / "airflow"
    done = subprocess.run(
        [str(airflow), "jobs", "check", "--help"],
        env={**os.environ, "AIRFLOW_HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    choices = re.search(r"--job-type \{([^}]*)\}", done.stdout)
    assert choices, done.stdout
    assert set(JOB_TYPES.values()) <= set(choices[1].split(","))
    assert "--local" in done.stdout


# -- scripts/compose_secrets.sh: docker/.env ---------------------------------------------------


def test_secrets_script_writes_an_owner_only_env_file_of_distinct_random_values(tmp_path):
    first, second = tmp_path / "a" / ".env", tmp_path / "b" / ".env"
    for path in (first, second):
        path.parent.mkdir()
        done = _secrets(path)
        assert done.returncode == 0, done.stderr
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert [p.name for p in path.parent.iterdir()] == [".env"]  # no temp file left
    one, two = _env_file(first), _env_file(second)
    assert set(one) == set(two) == SECRET_VARIABLES
    assert len(set(one.values())) == len(one)  # four different secrets
    assert not set(one.values()) & set(two.values())  # random, not fixed
    for value in (*one.values(), *two.values()):
        assert value not in done.stdout + done.stderr  # never printed
    # Airflow signs task tokens with HS512: at least 64 bytes of secret.
    assert len(bytes.fromhex(one["AIRFLOW_JWT_SECRET"])) == 64
    assert len(bytes.fromhex(one["AIRFLOW_API_SECRET_KEY"])) == 32
    from cryptography.fernet import Fernet

    Fernet(one["AIRFLOW_FERNET_KEY"].encode())  # a valid Fernet key
    # Usable as written inside the SQLAlchemy URL.
    assert re.fullmatch(r"[0-9a-f]{48}", one["POSTGRES_PASSWORD"])


def test_secrets_script_refuses_to_overwrite_an_existing_file(tmp_path):
    path = tmp_path / ".env"
    assert _secrets(path).returncode == 0
    before = path.read_bytes()
    again = _secrets(path)
    assert again.returncode == 1
    assert "not overwriting" in again.stderr
    assert path.read_bytes() == before
    link = tmp_path / "link.env"
    link.symlink_to(tmp_path / "nowhere")  # a dangling link is not written through either
    assert _secrets(link).returncode == 1
    assert not (tmp_path / "nowhere").exists()


def test_the_env_file_fills_every_variable_compose_requires(compose, tmp_path):
    path = tmp_path / ".env"
    assert _secrets(path).returncode == 0
    env = _env_file(path)
    resolved = {where: _interpolate(value, env) for where, _, value in _strings(compose)}
    assert not [w for w, v in resolved.items() if "${" in v]
    from sqlalchemy.engine import make_url

    url = make_url(resolved[".x-airflow-env.AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    assert url.password == env["POSTGRES_PASSWORD"]
    assert resolved[".services.postgres.environment.POSTGRES_PASSWORD"] == url.password


def test_the_env_file_compose_reads_is_ignored_by_git():
    done = subprocess.run(
        ["git", "check-ignore", "--no-index", "-q", "docker/.env"], cwd=REPO, check=False
    )
    assert done.returncode == 0, "docker/.env must be listed in .gitignore"


def test_every_airflow_setting_in_the_environment_is_an_airflow_option(common_env):
    spec = importlib.util.find_spec("airflow")
    assert spec is not None and spec.submodule_search_locations
    template = Path(next(iter(spec.submodule_search_locations))) / "config_templates/config.yml"
    options = yaml.safe_load(template.read_text())
    for key in (k for k in common_env if k.startswith("AIRFLOW__")):
        section, option = key.removeprefix("AIRFLOW__").lower().split("__", 1)
        assert option in options[section]["options"], key


def test_solaris_settings_in_the_environment_are_read_by_solaris_config(
    services, monkeypatch: pytest.MonkeyPatch
):
    for name in AIRFLOW_SERVICES:
        env = services[name]["environment"]
        with monkeypatch.context() as patch:
            for key in [k for k in os.environ if k.startswith("SOLARIS_")]:
                patch.delenv(key)
            for key, value in env.items():
                if key.startswith("SOLARIS_"):
                    patch.setenv(key, value)
            cfg = SolarisConfig()
        assert cfg.store.redis == "redis:6379", name
        assert cfg.artifacts_dir == Path("/opt/airflow/artifacts"), name
        assert cfg.device == ("cuda" if name == "airflow-worker-gpu" else "auto"), name
    assert cfg.store.redis.split(":")[0] in services


def test_every_airflow_service_mounts_the_same_named_volumes(compose, services, common_env):
    assert set(SHARED_VOLUMES) <= set(compose["volumes"])
    for name in AIRFLOW_SERVICES:
        assert _volumes(services[name]) == SHARED_VOLUMES, name
    assert SHARED_VOLUMES["solaris-artifacts"] == common_env["SOLARIS_ARTIFACTS_DIR"]


def test_gpu_worker_reserves_an_nvidia_gpu_under_the_gpu_profile(services):
    gpu = services["airflow-worker-gpu"]
    assert gpu["profiles"] == ["gpu"]
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]
    assert gpu["environment"]["SOLARIS_DEVICE"] == "cuda"


def test_only_the_gpu_worker_needs_a_profile(services):
    profiled = {name for name, service in services.items() if service.get("profiles")}
    assert profiled == {"airflow-worker-gpu"}


def test_airflow_init_migrates_the_database_and_creates_the_gpu_pool(services):
    init = services["airflow-init"]
    assert init["entrypoint"] == ["/bin/bash", "-c"]
    (script,) = init["command"]
    commands = [shlex.split(part) for part in script.split("&&")]
    assert commands[0] == ["airflow", "db", "migrate"]
    assert commands[1][:3] == ["airflow", "pools", "set"]
    pool, slots = commands[1][3:5]
    assert pool == CycleConfig().gpu_pool == "gpu"
    assert slots == "1"
    assert init["restart"] == "no"


def test_apiserver_publishes_port_8080_on_the_loopback(services):
    assert services["airflow-apiserver"]["ports"] == ["127.0.0.1:8080:8080"]
    others = [name for name in AIRFLOW_SERVICES if name != "airflow-apiserver"]
    assert not any("ports" in services[name] for name in others)


def test_postgres_and_redis_have_healthchecks_and_named_volumes(compose, services):
    assert services["postgres"]["image"] == "postgres:16"
    assert services["postgres"]["healthcheck"]["test"][:2] == ["CMD", "pg_isready"]
    assert services["redis"]["image"] == "redis:7"
    assert services["redis"]["healthcheck"]["test"] == ["CMD", "redis-cli", "ping"]
    for name in ("postgres", "redis"):
        sources = set(_volumes(services[name]))
        assert sources and sources <= set(compose["volumes"]), name


def test_airflow_init_waits_only_for_a_healthy_postgres(services):
    assert _depends_on(services["airflow-init"]) == {"postgres": "service_healthy"}


def test_airflow_services_wait_for_healthy_stores_and_a_completed_init(services):
    for name in LONG_RUNNING:
        depends = _depends_on(services[name])
        assert depends["postgres"] == "service_healthy", name
        assert depends["redis"] == "service_healthy", name
        assert depends["airflow-init"] == "service_completed_successfully", name


def test_services_that_run_tasks_wait_for_a_healthy_apiserver(services):
    assert "healthcheck" in services["airflow-apiserver"]
    for name in LONG_RUNNING:
        waits = _depends_on(services[name]).get("airflow-apiserver")
        assert waits == ("service_healthy" if name in RUN_TASKS else None), name


def test_redis_runs_with_the_online_store_settings(services):
    from solaris.store.keys import SERVER_SETTINGS

    command = services["redis"]["command"]
    assert command[0] == "redis-server"
    given = dict(zip(command[1::2], command[2::2], strict=True))
    assert given == {f"--{name}": value for name, value in SERVER_SETTINGS.items()}
