"""docker/compose.yaml, read as data: Docker is not available in CI, so the file is checked
for what the stack relies on (the CeleryExecutor, its broker and result backend, a worker per
queue, shared settings and volumes, start order, the GPU worker), for what it must not hold (a
secret, a port open beyond the host's loopback), against scripts/compose_secrets.sh, which
writes the docker/.env the file reads its secrets from, and against docker/Dockerfile, whose
entrypoint turns the services' commands into Airflow commands."""

from __future__ import annotations

import os
import re
import shlex
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from solaris.config import NON_SETTING_ENV, CycleConfig, SolarisConfig
from solaris.connection import RedisTarget
from solaris.examples.movielens.settings import environment as example_environment

REPO = Path(__file__).resolve().parents[3]
COMPOSE_FILE = REPO / "docker" / "compose.yaml"
DOCKERFILE = REPO / "docker" / "Dockerfile"
SECRETS_SCRIPT = REPO / "scripts" / "compose_secrets.sh"

WORKERS = ("airflow-worker", "airflow-worker-gpu")
AIRFLOW_SERVICES = (
    "airflow-init",
    "airflow-apiserver",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
    *WORKERS,
)
NEARLINE = "solaris-nearline"
LONG_RUNNING = tuple(s for s in AIRFLOW_SERVICES if s != "airflow-init")
COMMANDS = {
    "airflow-apiserver": "api-server",
    "airflow-scheduler": "scheduler",
    "airflow-dag-processor": "dag-processor",
    "airflow-triggerer": "triggerer",
}
# Every service that runs task code talks to the api-server's Execution API.
RUN_TASKS = (*WORKERS, "airflow-triggerer")
CELERY_APP = "airflow.providers.celery.executors.celery_executor.app"
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
}
SECRET_VARIABLES = {
    "AIRFLOW_JWT_SECRET",
    "AIRFLOW_API_SECRET_KEY",
    "AIRFLOW_FERNET_KEY",
    "POSTGRES_PASSWORD",
    "RABBITMQ_PASSWORD",
}
# The one variable with a default: the queue of the FM embeddings (docker/README.md).
QUEUE_VARIABLE = "SOLARIS_CYCLE__GPU_QUEUE"
# Names of settings that hold a credential.
_SECRET_NAME = re.compile(
    r"SECRET|PASSWORD|PASSWD|(^|_)PASS($|_)|TOKEN|FERNET|JWT|(^|_)KEY$", re.IGNORECASE
)
# `$$` is compose's escaped dollar, passed to the container as `$`.
_VARIABLE = re.compile(r"\$\$|\$\{(?P<name>\w+)(?:(?P<op>:-|:\?|-|\?)(?P<arg>[^}]*))?\}")
_REQUIRED = re.compile(r"\$\{(?P<name>\w+):\?[^}]+\}")
# The user-info password of a URL (scheme://user:password@host).
_URL_PASSWORD = re.compile(r"://[^:/@\s]*:([^@\s]+)@")


class MissingVariable(KeyError):
    """Compose stops with ``required variable ... is missing a value``."""


def _interpolate(value: str, env: dict[str, str] | None = None) -> str:
    """Compose's ``${NAME}``, ``${NAME:-default}`` and ``${NAME:?error}`` substitution."""
    env = env or {}

    def one(match: re.Match[str]) -> str:
        if match["name"] is None:
            return "$"
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


def _variables(value: str) -> list[re.Match[str]]:
    """The ``${...}`` references of a value (not the escaped ``$$``)."""
    return [m for m in _VARIABLE.finditer(value) if m["name"]]


def _queues(command: list[str]) -> list[str]:
    """The queues of an ``airflow celery worker`` command line."""
    args = command[command.index("--queues") + 1]
    return args.split(",")


def _option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


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


def test_compose_file_defines_the_stores_the_broker_and_every_airflow_service(services):
    assert set(services) == {"postgres", "rabbitmq", "redis", *AIRFLOW_SERVICES, NEARLINE}


def test_each_airflow_service_runs_its_airflow_component(services):
    for name, command in COMMANDS.items():
        assert services[name]["command"] == command, name
    for name in (*COMMANDS, *WORKERS):
        assert "entrypoint" not in services[name], f"{name} must keep the image's entrypoint"
    for name in WORKERS:  # the image's entrypoint makes it `airflow celery worker ...`
        assert services[name]["command"][:2] == ["celery", "worker"], name


def test_only_the_scheduler_schedules_and_only_the_workers_run_celery(services):
    """The LocalExecutor layout (a second scheduler as the GPU worker) is gone: one service
    runs `scheduler`, and the Celery workers are the only ones to run tasks."""
    commands = {name: services[name]["command"] for name in LONG_RUNNING}
    assert [name for name, c in commands.items() if c == "scheduler"] == ["airflow-scheduler"]
    celery = [name for name, c in commands.items() if isinstance(c, list) and "celery" in c]
    assert sorted(celery) == sorted(WORKERS)


def test_every_airflow_service_is_built_from_the_project_dockerfile(services):
    for name in AIRFLOW_SERVICES:
        build = services[name]["build"]
        context = (COMPOSE_FILE.parent / build["context"]).resolve()
        assert context == REPO, name
        assert (context / build["dockerfile"]).is_file(), name


def test_dockerfile_copies_dags_plugins_and_feature_repo_into_airflow_home(services):
    build = services["airflow-scheduler"]["build"]
    assert (COMPOSE_FILE.parent / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE
    dockerfile = DOCKERFILE.read_text()
    copies = {
        tuple(line.split()[-2:])
        for line in dockerfile.splitlines()
        if line.startswith("COPY ") and "--from" not in line
    }
    for folder in ("dags", "plugins", "feature_repo"):
        assert (folder, f"/opt/airflow/{folder}") in copies, folder
    assert "AIRFLOW_HOME=/opt/airflow" in dockerfile
    assert 'ENTRYPOINT ["/entrypoint"]' in dockerfile


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


def test_airflow_uses_postgres_with_the_celery_executor_and_no_examples(services, common_env):
    env = {"POSTGRES_PASSWORD": "from-env-file"}
    url = _interpolate(common_env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"], env)
    pg = {k: _interpolate(v, env) for k, v in services["postgres"]["environment"].items()}
    assert pg["POSTGRES_PASSWORD"] == "from-env-file"
    assert url == (
        f"postgresql+psycopg2://{pg['POSTGRES_USER']}:{pg['POSTGRES_PASSWORD']}"
        f"@postgres:5432/{pg['POSTGRES_DB']}"
    )
    assert common_env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    # The workers import the cycle's libraries once, before their pools fork.
    assert common_env["AIRFLOW__CELERY__CELERY_CONFIG_OPTIONS"] == (
        "solaris.orchestration.warm.CELERY_CONFIG"
    )
    assert common_env["AIRFLOW__CORE__LOAD_EXAMPLES"] == "False"
    assert common_env["AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION"] == "False"


def test_celery_results_go_to_the_metadata_db_through_an_installed_driver(common_env):
    from sqlalchemy.engine import make_url

    env = {"POSTGRES_PASSWORD": "from-env-file"}
    backend = _interpolate(common_env["AIRFLOW__CELERY__RESULT_BACKEND"], env)
    metadata = _interpolate(common_env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"], env)
    assert backend.startswith("db+")  # Celery's SQLAlchemy result backend
    assert make_url(backend.removeprefix("db+")) == make_url(metadata)
    # A bare postgresql:// would pick SQLAlchemy's default DBAPI, which must then be installed.
    make_url(backend.removeprefix("db+")).get_dialect().import_dbapi()


def test_the_broker_is_the_rabbitmq_service_with_its_own_account(services, common_env):
    from kombu.utils.url import url_to_parts

    env = {"RABBITMQ_PASSWORD": "from-env-file"}
    broker = url_to_parts(_interpolate(common_env["AIRFLOW__CELERY__BROKER_URL"], env))
    rabbit = services["rabbitmq"]
    rabbit_env = {k: _interpolate(v, env) for k, v in rabbit["environment"].items()}
    assert (broker.scheme, broker.hostname, broker.port) == ("amqp", "rabbitmq", 5672)
    assert broker.username == rabbit_env["RABBITMQ_DEFAULT_USER"] != "guest"
    assert broker.password == rabbit_env["RABBITMQ_DEFAULT_PASS"] == "from-env-file"
    assert broker.path == "/"  # RabbitMQ's default virtual host
    # Not a database of the online store's Redis (docker/README.md says why).
    assert broker.hostname != common_env["SOLARIS_STORE__REDIS"].split(":")[0]


def test_rabbitmq_keeps_its_queues_in_a_named_volume_under_a_fixed_node_name(compose, services):
    rabbit = services["rabbitmq"]
    assert rabbit["image"].split(":")[0] == "rabbitmq"
    # The node, and its directory in the volume, are named after the host name.
    assert rabbit["hostname"] == "rabbitmq"
    assert _volumes(rabbit) == {"rabbitmq-data": "/var/lib/rabbitmq"}
    assert "rabbitmq-data" in compose["volumes"]
    assert rabbit["healthcheck"]["test"][:2] == ["CMD", "rabbitmq-diagnostics"]


def test_the_default_worker_consumes_airflows_default_queue(services, common_env, airflow_options):
    default_queue = airflow_options["operators"]["default_queue"]["default"]
    assert "AIRFLOW__OPERATORS__DEFAULT_QUEUE" not in common_env  # Airflow's default holds
    assert _queues(services["airflow-worker"]["command"]) == [default_queue]


def test_the_gpu_worker_consumes_exactly_the_embedding_queue_one_task_at_a_time(
    services, common_env
):
    command = [_interpolate(arg) for arg in services["airflow-worker-gpu"]["command"]]
    assert _queues(command) == [CycleConfig().gpu_queue]
    assert _option(command, "--concurrency") == "1"
    # The DAG files are parsed with the same queue, and a renamed queue moves both.
    for env in ({}, {QUEUE_VARIABLE: "renamed"}):
        routed = _interpolate(common_env[QUEUE_VARIABLE], env)
        consumed = [_interpolate(arg, env) for arg in services["airflow-worker-gpu"]["command"]]
        assert _queues(consumed) == [routed], env


def test_each_queue_has_exactly_one_worker(services):
    queues = [
        q for name in WORKERS for q in _queues([_interpolate(a) for a in services[name]["command"]])
    ]
    assert sorted(queues) == sorted(set(queues)), queues
    assert len(queues) == len(WORKERS)


def test_workers_get_time_for_a_warm_shutdown(services):
    for name in WORKERS:
        grace = services[name]["stop_grace_period"]
        assert grace.endswith("m") and int(grace[:-1]) >= 1, name


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


def test_broker_and_result_backend_credentials_are_required_variables(common_env):
    for key, variable in (
        ("AIRFLOW__CELERY__BROKER_URL", "RABBITMQ_PASSWORD"),
        ("AIRFLOW__CELERY__RESULT_BACKEND", "POSTGRES_PASSWORD"),
        ("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "POSTGRES_PASSWORD"),
    ):
        marked = _interpolate(common_env[key], {variable: "MARK"})
        assert _URL_PASSWORD.findall(marked) == ["MARK"], key
        with pytest.raises(MissingVariable, match=variable):
            _interpolate(common_env[key])


def test_compose_holds_no_secret_literal_and_no_default_for_a_secret(compose):
    text = COMPOSE_FILE.read_text()
    used = [m for _, _, value in _strings(compose) for m in _variables(value)]
    # Every variable stands for itself: a URL's password must be nothing but one of them.
    marks = {m["name"]: f"MARK{k}" for k, m in enumerate(used)}
    for where, key, value in _strings(compose):
        if _SECRET_NAME.search(key):
            assert _REQUIRED.fullmatch(value), f"{where}: {value!r} is not a required variable"
        for password in _URL_PASSWORD.findall(_interpolate(value, marks)):
            assert password in marks.values(), f"{where}: a password in a URL"
    for match in used:
        if _SECRET_NAME.search(match["name"]):
            assert match["op"] == ":?", f"{match[0]} has a default or may be empty"
    assert {m["name"] for m in used} == SECRET_VARIABLES | {QUEUE_VARIABLE} | set(
        example_environment()
    )
    assert "change-me" not in text and "airflow:airflow@" not in text and "guest" not in text


def test_the_variables_with_a_default_are_the_queue_and_the_examples_adapters(compose):
    defaults = {
        m["name"]: m["arg"]
        for _, _, value in _strings(compose)
        for m in _variables(value)
        if m["op"] != ":?"
    }
    assert defaults == {QUEUE_VARIABLE: CycleConfig().gpu_queue, **example_environment()}


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
        assert check and check["test"][0] in ("CMD", "CMD-SHELL"), name
        assert check.get("disable") is not True, name


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


def test_celery_workers_are_checked_by_a_ping_to_their_own_node(services):
    for name in WORKERS:
        check = services[name]["healthcheck"]
        kind, script = check["test"]
        assert kind == "CMD-SHELL", name
        # The container's shell sees `$HOSTNAME`: Celery's node is celery@<hostname>.
        assert shlex.split(_interpolate(script)) == [
            "celery",
            "--app",
            CELERY_APP,
            "inspect",
            "ping",
            "-d",
            "celery@${HOSTNAME}",
        ], name
        assert int(check["timeout"].rstrip("s")) >= 20, name


def test_the_celery_app_of_the_worker_health_check_imports(tmp_path, common_env):
    """What `celery --app ... inspect ping` and `airflow celery worker` load, in the locked
    environment, with the compose file's settings (no broker is contacted)."""
    module, attribute = CELERY_APP.rsplit(".", 1)
    env = {name: "from-env-file" for name in SECRET_VARIABLES}
    done = subprocess.run(
        [sys.executable, "-c", f"import {module} as m; print(type(m.{attribute}).__name__)"],
        env={
            **os.environ,
            "AIRFLOW_HOME": str(tmp_path),
            **{k: _interpolate(v, env) for k, v in common_env.items() if k.startswith("AIRFLOW")},
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "Celery"


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


# -- docker/Dockerfile: /entrypoint ----------------------------------------------------------


@pytest.fixture(scope="module")
def entrypoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The image's /entrypoint (a heredoc of the Dockerfile), with stand-ins for the programs
    it starts on PATH: each prints its name and arguments instead of running."""
    dockerfile = DOCKERFILE.read_text()
    found = re.search(
        r"^COPY --chmod=0755 <<'EOF' /entrypoint\n(.*?)^EOF$", dockerfile, re.M | re.S
    )
    assert found, "no /entrypoint heredoc in the Dockerfile"
    folder = tmp_path_factory.mktemp("entrypoint")
    script = folder / "entrypoint"
    script.write_text(found[1])
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    for program in ("airflow", "python", "solaris"):
        stub = bin_dir / program
        stub.write_text(f'#!/bin/sh\necho {program} "$@"\n')
        stub.chmod(0o755)
    return script


def _entry(entrypoint: Path, *args: str) -> str:
    done = subprocess.run(
        ["bash", str(entrypoint), *args],
        env={"PATH": f"{entrypoint.parent / 'bin'}:/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return done.stdout.strip()


def test_entrypoint_turns_compose_commands_into_airflow_commands(entrypoint, services):
    assert _entry(entrypoint) == "airflow version"
    assert _entry(entrypoint, "scheduler") == "airflow scheduler"
    worker = services["airflow-worker"]["command"]
    assert _entry(entrypoint, *worker) == "airflow " + " ".join(worker)


def test_entrypoint_runs_the_official_charts_commands_as_given(entrypoint):
    # Containers, init containers and probes of the official Helm chart.
    assert _entry(entrypoint, "bash", "-c", "exec airflow scheduler") == "airflow scheduler"
    assert _entry(entrypoint, "airflow", "db", "check-migrations") == "airflow db check-migrations"
    assert _entry(entrypoint, "python", "-m", "celery") == "python -m celery"
    assert _entry(entrypoint, "solaris", "demo") == "solaris demo"


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
    assert len(set(one.values())) == len(one)  # five different secrets
    assert not set(one.values()) & set(two.values())  # random, not fixed
    for value in (*one.values(), *two.values()):
        assert value not in done.stdout + done.stderr  # never printed
    # Airflow signs task tokens with HS512: at least 64 bytes of secret.
    assert len(bytes.fromhex(one["AIRFLOW_JWT_SECRET"])) == 64
    assert len(bytes.fromhex(one["AIRFLOW_API_SECRET_KEY"])) == 32
    from cryptography.fernet import Fernet

    Fernet(one["AIRFLOW_FERNET_KEY"].encode())  # a valid Fernet key
    # Usable as written inside the SQLAlchemy and broker URLs.
    assert re.fullmatch(r"[0-9a-f]{48}", one["POSTGRES_PASSWORD"])
    assert re.fullmatch(r"[0-9a-f]{48}", one["RABBITMQ_PASSWORD"])


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
    unfilled = {
        m["name"]
        for _, _, value in _strings(compose)
        for m in _variables(value)
        if m["name"] not in env and m["op"] != ":-"
    }
    assert not unfilled
    resolved = {where: _interpolate(value, env) for where, _, value in _strings(compose)}
    from sqlalchemy.engine import make_url

    url = make_url(resolved[".x-airflow-env.AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    assert url.password == env["POSTGRES_PASSWORD"]
    assert resolved[".services.postgres.environment.POSTGRES_PASSWORD"] == url.password
    backend = make_url(resolved[".x-airflow-env.AIRFLOW__CELERY__RESULT_BACKEND"][3:])
    assert backend.password == url.password
    from kombu.utils.url import url_to_parts

    broker = url_to_parts(resolved[".x-airflow-env.AIRFLOW__CELERY__BROKER_URL"])
    assert broker.password == env["RABBITMQ_PASSWORD"]
    assert resolved[".services.rabbitmq.environment.RABBITMQ_DEFAULT_PASS"] == broker.password


def test_the_env_file_compose_reads_is_ignored_by_git():
    done = subprocess.run(
        ["git", "check-ignore", "--no-index", "-q", "docker/.env"], cwd=REPO, check=False
    )
    assert done.returncode == 0, "docker/.env must be listed in .gitignore"


def test_every_airflow_setting_in_the_environment_is_an_airflow_option(common_env, airflow_options):
    options = airflow_options
    for key in (k for k in common_env if k.startswith("AIRFLOW__")):
        section, option = key.removeprefix("AIRFLOW__").lower().split("__", 1)
        assert option in options[section], key


def test_solaris_settings_in_the_environment_are_read_by_solaris_config(
    services, monkeypatch: pytest.MonkeyPatch
):
    for name in AIRFLOW_SERVICES:
        env = services[name]["environment"]
        with monkeypatch.context() as patch:
            for key in [k for k in os.environ if k.startswith("SOLARIS_")]:
                patch.delenv(key)
            for key, value in env.items():
                if key.startswith("SOLARIS_") and key not in NON_SETTING_ENV:
                    patch.setenv(key, _interpolate(value))
            cfg = SolarisConfig()
        assert cfg.store.redis == RedisTarget.parse("redis:6379"), name
        assert cfg.artifacts_dir == Path("/opt/airflow/artifacts"), name
        assert cfg.device == ("cuda" if name == "airflow-worker-gpu" else "auto"), name
        assert cfg.cycle.gpu_queue == CycleConfig().gpu_queue, name
    assert cfg.store.redis.nodes[0][0] in services


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


def test_only_the_gpu_worker_and_the_near_line_embedder_need_a_profile(services):
    profiled = {name for name, service in services.items() if service.get("profiles")}
    assert profiled == {"airflow-worker-gpu", NEARLINE}


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
    for name in ("postgres", "rabbitmq", "redis"):
        sources = set(_volumes(services[name]))
        assert sources and sources <= set(compose["volumes"]), name


def test_airflow_init_waits_only_for_a_healthy_postgres(services):
    assert _depends_on(services["airflow-init"]) == {"postgres": "service_healthy"}


def test_airflow_services_wait_for_healthy_stores_a_healthy_broker_and_a_completed_init(
    services,
):
    for name in LONG_RUNNING:
        depends = _depends_on(services[name])
        assert depends["postgres"] == "service_healthy", name
        assert depends["redis"] == "service_healthy", name
        assert depends["rabbitmq"] == "service_healthy", name
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


def test_the_near_line_embedder_runs_solaris_nearline_beside_the_gpu_worker(services):
    nearline, gpu = services[NEARLINE], services["airflow-worker-gpu"]
    assert nearline["entrypoint"] == ["solaris"] and nearline["command"] == ["nearline"]
    assert nearline["profiles"] == gpu["profiles"] == ["gpu"]
    assert nearline["image"] == gpu["image"]
    assert nearline["build"]["args"]["TORCH_VARIANT"] == "cuda"
    assert nearline["deploy"] == gpu["deploy"]  # the same NVIDIA device reservation
    env = nearline["environment"]
    assert env["SOLARIS_DEVICE"] == "cuda"
    assert env["SOLARIS_STORE__REDIS"] == "redis:6379"
    assert env["SOLARIS_ARTIFACTS_DIR"] == "/opt/airflow/artifacts"  # the cycle's models
    assert "ports" not in nearline
    assert nearline["healthcheck"]["test"][:2] == ["CMD", "python"]
    assert {"redis", "airflow-init"} <= set(nearline["depends_on"])


def test_the_scheduler_admits_the_capacity_tables_concurrency_and_the_cycles_mapped_tasks(
    common_env,
):
    """32 tasks at once, all of one DAG if need be (docs/scaling.md, "Capacity": 16 two-core
    workers of 2 tasks each), and a mapped task as long as the cycle's plans can make."""
    from solaris.config import CycleConfig

    assert int(common_env["AIRFLOW__CORE__PARALLELISM"]) == 32
    assert int(common_env["AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG"]) == 32
    assert int(common_env["AIRFLOW__CORE__MAX_MAP_LENGTH"]) >= CycleConfig().max_mapped_tasks
    assert common_env["AIRFLOW__CELERY__WORKER_CONCURRENCY"] == "2"
