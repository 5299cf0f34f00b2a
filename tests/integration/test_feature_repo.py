"""`feast plan` and `apply` on the repo; which Redis is used (configured, local, embedded)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from solaris.connection import RedisTarget
from solaris.store.local_redis import answers, embedded_redis, redis_for

pytestmark = pytest.mark.integration
REPO_ROOT = Path(__file__).resolve().parents[2]
FEAST = Path(sys.executable).with_name("feast")


def _feast(repo: Path, *args: str, project_env: dict) -> subprocess.CompletedProcess:
    env = {**os.environ, **project_env}
    return subprocess.run(
        [str(FEAST), "-c", str(repo), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        check=False,
    )


def test_feast_cli_plans_and_applies_the_repo(tmp_path: Path) -> None:
    repo = tmp_path / "feature_repo"
    shutil.copytree(REPO_ROOT / "feature_repo", repo, ignore=shutil.ignore_patterns("data"))
    env = {"SOLARIS_STORE__REDIS": "127.0.0.1:6379,db=11", "SOLARIS_NAMESPACE": "live"}
    plan = _feast(repo, "plan", project_env=env)
    assert plan.returncode == 0, plan.stderr[-2000:]
    for name in ("pair", "nbr", "uagg", "iagg", "unn", "solaris_serving"):
        assert name in plan.stdout
    applied = _feast(repo, "apply", project_env=env)
    assert applied.returncode == 0, applied.stderr[-2000:]
    listed = _feast(repo, "feature-views", "list", project_env=env)
    assert {"pair", "nbr", "uagg", "iagg", "unn"} <= set(listed.stdout.split())


def test_embedded_redis_starts_on_a_free_port_and_stops() -> None:
    with embedded_redis() as connection:
        assert answers(connection)
    assert not answers(connection)


def test_a_configured_redis_is_always_preferred() -> None:
    configured = RedisTarget.parse("127.0.0.1:1,db=3")
    with redis_for(configured) as (connection, origin):
        assert (connection, origin) == (configured, "configured")


def test_with_nothing_configured_and_no_local_redis_an_embedded_one_is_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from solaris.store import local_redis

    nothing = RedisTarget.parse("127.0.0.1:1")  # nothing listens there
    monkeypatch.setattr(local_redis, "LOCAL_REDIS", nothing)
    with redis_for(None) as (connection, origin):
        assert origin == "embedded"
        assert answers(connection)
    assert not answers(connection)


def test_the_feast_cli_reads_a_password_with_quotes_colons_and_hashes_and_never_shows_it(
    monkeypatch,
) -> None:
    """The CLI's config names the variable (connection_env), the store reads it when it
    connects: the connection string comes through whole, whatever its password holds, and
    Feast's RepoConfig (which keeps the section as a dict) never holds the password."""
    from feast.repo_config import load_repo_config

    from solaris.errors import ConfigError

    password = 'a"b:c#d e'
    connection = f"127.0.0.1:6379,db=11,password={password}"
    monkeypatch.setenv("SOLARIS_STORE__REDIS", connection)
    monkeypatch.setenv("SOLARIS_NAMESPACE", "replay_1998")
    repo = REPO_ROOT / "feature_repo"
    config = load_repo_config(repo, repo / "feature_store.yaml")
    assert config.online_store.connection == connection
    assert config.project == "replay_1998"  # the namespace, with no edit of the file
    assert password not in repr(config) and password not in str(config)
    assert password not in repr(config.online_store)

    monkeypatch.delenv("SOLARIS_STORE__REDIS")
    with pytest.raises(ConfigError, match="SOLARIS_STORE__REDIS, which is not set"):
        _ = config.online_store.connection
