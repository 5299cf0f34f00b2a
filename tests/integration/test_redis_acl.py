"""An ACL user with a password YAML and URLs choke on, against the real local Redis.

Every Redis client SOLARIS opens goes through ``solaris.connection.redis_client``: the
tasks' health check (``cycle_redis``), the Feast online store (its settings built by
``open_feature_store``) and the serving client's miss stream. Each must log in as the
string's ``username``, not as the default user with the password: the default user of the
test Redis has no password, so a client that dropped ``username`` would still get in. Each
check is therefore made twice: allowed, and with the one command it needs taken from the
ACL user, where only a client logged in as that user fails.

The user (``solaris_test_<uuid>``, keys ``<namespace>:*`` only) is deleted after each test,
with the namespace's keys. A one-node Redis Cluster on an embedded server shows the same for
``RedisCluster``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
import redis as redis_py

from solaris.config import SolarisConfig
from solaris.connection import ConnectionStringError, RedisTarget, redis_client
from solaris.errors import ConfigError
from solaris.namespace import Namespace
from solaris.orchestration.resources import CycleInputError, cycle_redis
from solaris.serving.client import SolarisFeatures
from solaris.store.feast_store import (
    apply_definitions,
    delete_project_keys,
    online_store_of,
    open_feature_store,
)
from solaris.store.local_redis import _free_port, embedded_redis

pytestmark = [pytest.mark.integration]

NOW = 1_700_000_000
FM_VERSION = "fm-test-1"


@dataclass(frozen=True)
class AclUser:
    name: str
    password: str
    connection: str  # the test Redis, logged in as this user

    def with_password(self, password: str) -> str:
        return self.connection.replace(self.password, password)


def _host_port(connection: str) -> str:
    return connection.split(",")[0]


def _set(admin: redis_py.Redis, user: AclUser, *rules: str) -> None:
    admin.execute_command("ACL", "SETUSER", user.name, *rules)


@pytest.fixture
def acl_user(redis_connection: str, solaris_cfg: SolarisConfig) -> Iterator[AclUser]:
    """A Redis user allowed every command on the test namespace's keys only; its password
    holds '"', ':' and '=' (characters a connection string can carry; ',' it cannot)."""
    name = f"solaris_test_{uuid.uuid4().hex}"
    password = f'pa"ss:{uuid.uuid4().hex[:8]}=w0rd'
    namespace = Namespace.of(solaris_cfg)
    db = redis_connection.partition(",db=")[2].split(",")[0] or "0"
    connection = f"{_host_port(redis_connection)},db={db},username={name},password={password}"
    admin = redis_client(redis_connection, timeout_s=2.0)
    admin.execute_command(
        "ACL", "SETUSER", name, "on", f">{password}", f"~{namespace.key_prefix}*", "+@all"
    )
    try:
        yield AclUser(name, password, connection)
    finally:
        admin.execute_command("ACL", "DELUSER", name)
        delete_project_keys(admin, namespace.project)
        admin.delete(namespace.miss_stream, namespace.request_stream)
        admin.close()


@pytest.fixture
def admin(redis_connection: str) -> Iterator[redis_py.Redis]:
    client = redis_client(redis_connection, timeout_s=2.0)
    yield client
    client.close()


def _cfg(cfg: SolarisConfig, connection: str) -> SolarisConfig:
    target = RedisTarget.parse(connection)
    return cfg.model_copy(update={"store": cfg.store.model_copy(update={"redis": target})})


def test_health_check_logs_in_as_the_acl_user(acl_user, admin, solaris_cfg) -> None:
    cfg = _cfg(solaris_cfg, acl_user.connection)
    assert cycle_redis(cfg).connection_string == acl_user.connection
    # Without PING for this user, only a client logged in as it fails the check.
    _set(admin, acl_user, "-ping")
    with pytest.raises(CycleInputError, match="does not answer") as refused:
        cycle_redis(cfg)
    assert acl_user.password not in str(refused.value)
    assert "password=***" in str(refused.value)
    _set(admin, acl_user, "+ping")
    assert cycle_redis(cfg).connection_string == acl_user.connection


def test_health_check_with_a_wrong_password_fails_without_showing_it(acl_user, solaris_cfg) -> None:
    wrong = f"wrong-{uuid.uuid4().hex}"
    cfg = _cfg(solaris_cfg, acl_user.with_password(wrong))
    with pytest.raises(CycleInputError, match="does not answer") as refused:
        cycle_redis(cfg)
    assert wrong not in str(refused.value) and acl_user.password not in str(refused.value)


def test_feast_store_and_miss_stream_log_in_as_the_acl_user(acl_user, admin, solaris_cfg) -> None:
    cfg = _cfg(solaris_cfg, acl_user.connection)
    store = open_feature_store(cfg, acl_user.connection)  # '"' and ':' in the YAML's value
    apply_definitions(store, cfg)
    online = online_store_of(store)
    assert store.config.online_store.connection_string == acl_user.connection
    assert online.client(store.config).acl_whoami() == acl_user.name

    stream = Namespace.of(cfg).miss_stream
    with SolarisFeatures(cfg, redis=acl_user.connection, fm_version=FM_VERSION) as features:
        out = features.fetch(7, [70, 71], now=NOW)  # nothing stored: both items miss
        assert features.flush()
        assert out.mask.sum() == 0
        assert features.stats.failures == 0
        assert features.stats.misses_logged == 1 and features.stats.misses_dropped == 0
    assert admin.xlen(stream) == 1

    # Without XADD for this user, only a miss client logged in as it loses the entry.
    _set(admin, acl_user, "-xadd")
    with SolarisFeatures(cfg, redis=acl_user.connection, fm_version=FM_VERSION) as features:
        features.fetch(7, [72], now=NOW)  # the read still works
        features.flush()
        assert features.stats.failures == 0
        assert features.stats.misses_dropped == 1
    assert admin.xlen(stream) == 1


def test_the_store_settings_repr_never_shows_the_password(acl_user, solaris_cfg) -> None:
    """A repr lands in logs and tracebacks: Feast's RepoConfig and the online store's
    settings show the connection string redacted, and the store still logs in."""
    cfg = _cfg(solaris_cfg, acl_user.connection)
    store = open_feature_store(cfg, acl_user.connection)
    for shown in (repr(store.config), str(store.config), repr(store.config.online_store)):
        assert acl_user.password not in shown
        assert "password=***" in shown
    assert online_store_of(store).client(store.config).acl_whoami() == acl_user.name


def test_a_password_with_a_comma_is_refused_naming_the_option(acl_user, solaris_cfg) -> None:
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    connection = acl_user.with_password(f"pa,{secret}")
    for attempt in (
        lambda: open_feature_store(solaris_cfg, connection),
        lambda: redis_client(connection),
        lambda: _cfg(solaris_cfg, connection),
    ):
        with pytest.raises(ConnectionStringError, match="the value of password contains ','") as e:
            attempt()
        assert secret not in str(e.value)
    # Settings never hold it: they are refused when built, naming the setting.
    with pytest.raises(ConfigError, match=r"store\.redis.*value of password") as e:
        SolarisConfig.load(None, store={"redis": connection})
    assert secret not in str(e.value)


# -- RedisCluster ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def one_node_cluster() -> Iterator[str]:
    """A one-node Redis Cluster (every slot on it) on an embedded server."""
    bus = _free_port()
    with embedded_redis(
        extra_args=("--cluster-enabled", "yes", "--cluster-port", str(bus))
    ) as node:
        client = redis_py.Redis.from_url(f"redis://{node}", socket_timeout=2)
        client.execute_command("CLUSTER ADDSLOTSRANGE", 0, 16383)
        deadline = time.monotonic() + 30
        while str(client.cluster("INFO").get("cluster_state")) != "ok":
            if time.monotonic() > deadline:
                pytest.fail("the one-node test cluster did not form")
            time.sleep(0.1)
        client.close()
        yield node


def test_a_cluster_client_logs_in_as_the_acl_user(one_node_cluster: str) -> None:
    name, password = f"solaris_test_{uuid.uuid4().hex}", f'c"l:{uuid.uuid4().hex[:8]}'
    node = redis_py.Redis.from_url(f"redis://{one_node_cluster}", socket_timeout=2)
    node.execute_command("ACL", "SETUSER", name, "on", f">{password}", "~solaris_test:*", "+@all")
    connection = f"{one_node_cluster},username={name},password={password}"
    try:
        client = redis_client(connection, redis_type="redis_cluster", timeout_s=2.0, retries=0)
        try:
            assert client.acl_whoami() == name
            client.set("solaris_test:k", b"v")
            with pytest.raises(redis_py.exceptions.NoPermissionError):
                client.set("elsewhere:k", b"v")  # the user's key pattern applies
        finally:
            client.close()
    finally:
        node.execute_command("ACL", "DELUSER", name)
        node.delete("solaris_test:k")
        node.close()


def test_a_database_the_server_lacks_is_named_by_the_health_check(solaris_cfg) -> None:
    """The drill's case: db=99999 read only "does not answer a PING"."""
    host = "127.0.0.1:6379"
    cfg = _cfg(solaris_cfg, f"{host},db=99999")
    with pytest.raises(CycleInputError, match=r"does not answer a PING .*DB index is out of range"):
        cycle_redis(cfg)
