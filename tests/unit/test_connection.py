"""Feast-style Redis connection strings: parsing, redacted descriptions, and the clients built
from them (constructed only; nothing here connects)."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from solaris import connection
from solaris.connection import RedisTarget, redis_client

SECRET = "s3cr3t-Pa55"


def test_parse_single_node() -> None:
    target = RedisTarget.parse("redis.example:6380")
    assert target.nodes == (("redis.example", 6380),)
    assert target.options == {}


def test_parse_host_without_port_defaults_to_6379_and_empty_host_to_localhost() -> None:
    assert RedisTarget.parse("cache").nodes == (("cache", 6379),)
    assert RedisTarget.parse(":6390").nodes == (("localhost", 6390),)


def test_parse_several_nodes_in_order() -> None:
    target = RedisTarget.parse("a:7000, b:7001 ,c:7002,db=0")
    assert target.nodes == (("a", 7000), ("b", 7001), ("c", 7002))
    assert target.options == {"db": 0}


def test_parse_json_decodes_option_values() -> None:
    target = RedisTarget.parse(
        "h:1,db=3,ssl=true,socket_timeout=0.05,health_check_interval=10,client_name=svc"
    )
    assert target.options == {
        "db": 3,
        "ssl": True,
        "socket_timeout": 0.05,
        "health_check_interval": 10,
        "client_name": "svc",
    }
    assert isinstance(target.options["db"], int)
    assert target.options["ssl"] is True


def test_parse_ignores_empty_parts() -> None:
    assert RedisTarget.parse("h:1,,db=2,").options == {"db": 2}


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("123", "123"),
        ("true", "true"),
        ("null", "null"),
        ('"quoted"', '"quoted"'),
        ('pa"ss', 'pa"ss'),
        ("a=b=c", "a=b=c"),
        ("[1]", "[1]"),
    ],
)
@pytest.mark.parametrize("key", ["password", "username"])
def test_parse_keeps_password_and_username_as_the_literal_string(
    key: str, raw: str, expected: str
) -> None:
    target = RedisTarget.parse(f"h:1,{key}={raw}")
    assert target.options[key] == expected
    assert isinstance(target.options[key], str)


def test_parse_keeps_ssl_certificate_paths_as_strings() -> None:
    target = RedisTarget.parse(
        "h:1,ssl=true,ssl_ca_certs=/etc/ssl/ca.pem,ssl_certfile=1,ssl_keyfile=/k.pem"
    )
    assert target.options["ssl_ca_certs"] == "/etc/ssl/ca.pem"
    assert target.options["ssl_certfile"] == "1"
    assert target.options["ssl_keyfile"] == "/k.pem"


@pytest.mark.parametrize("text", ["", "   ", ",", "db=1", "db=1,password=x"])
def test_parse_rejects_a_string_without_nodes(text: str) -> None:
    with pytest.raises(ValueError, match="Redis connection string"):
        RedisTarget.parse(text)


@pytest.mark.parametrize("text", ["host:notaport", "h:1,other:xyz", "h:6379:1x"])
def test_parse_rejects_a_port_that_is_not_a_number(text: str) -> None:
    with pytest.raises(ValueError, match="is not host:port"):
        RedisTarget.parse(text)


@pytest.mark.parametrize("text", ["h:0", "h:65536", "a:7000,b:-1", "h:99999,db=1"])
def test_parse_rejects_a_port_outside_1_to_65535(text: str) -> None:
    with pytest.raises(connection.ConnectionStringError, match=r"port of '.*' is outside"):
        RedisTarget.parse(text)


def test_parse_accepts_the_ports_at_both_ends_of_the_range() -> None:
    assert RedisTarget.parse("a:1,b:65535").nodes == (("a", 1), ("b", 65535))


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        (f"redis://svc:{SECRET}@cache:6379/0", "a redis:// URL"),
        (f"REDISS://:{SECRET}@cache:6380", "a rediss:// URL"),
        (f"unix:///run/redis.sock?password={SECRET}", "a unix:// URL"),
        (f"  {SECRET}://cache", "a URL"),
    ],
)
def test_parse_refuses_a_url_asking_for_host_port_never_echoing_it(text: str, shown: str) -> None:
    with pytest.raises(connection.ConnectionStringError) as info:
        RedisTarget.parse(text)
    message = str(info.value)
    assert shown in message and "host:port[,option=value" in message
    assert SECRET not in message


def test_parse_accepts_a_password_that_contains_a_scheme_separator() -> None:
    target = RedisTarget.parse(f"h:1,password=redis://{SECRET}")
    assert target.options["password"] == f"redis://{SECRET}"


@pytest.mark.parametrize("db", ["first", "1.5", "-1", "true", '"2"', "[1]"])
def test_parse_rejects_a_db_that_is_not_a_database_number(db: str) -> None:
    with pytest.raises(connection.ConnectionStringError, match=r"db must be a database number"):
        RedisTarget.parse(f"h:1,db={db},password={SECRET}")


def test_parse_rejects_something_that_is_not_a_string() -> None:
    with pytest.raises(ValueError):
        RedisTarget.parse(None)  # type: ignore[arg-type]


def test_describe_names_nodes_and_option_names_but_never_the_password() -> None:
    target = RedisTarget.parse(f"a:1,b:2,db=1,username=svc-user,password={SECRET},ssl=true")
    text = target.describe()
    assert SECRET not in text
    assert "svc-user" not in text
    assert text.startswith("a:1,b:2")
    assert "password" in text and "db" in text


def test_describe_of_a_bare_node_is_the_node() -> None:
    assert RedisTarget.parse("h:1").describe() == "h:1"


def test_redis_client_for_one_node_passes_options_to_the_connection_pool() -> None:
    client = redis_client(
        f"cache:6380,db=2,username=svc,password={SECRET},ssl=true,ssl_ca_certs=/ca.pem",
        retries=0,
    )
    try:
        kwargs = client.connection_pool.connection_kwargs
        assert isinstance(client, redis.Redis)
        assert (kwargs["host"], kwargs["port"], kwargs["db"]) == ("cache", 6380, 2)
        assert kwargs["username"] == "svc"
        assert kwargs["password"] == SECRET
        assert kwargs["ssl_ca_certs"] == "/ca.pem"
        assert client.connection_pool.connection_class is redis.connection.SSLConnection
    finally:
        client.close()


def test_redis_client_keeps_a_numeric_password_a_string() -> None:
    client = redis_client("h:1,password=123")
    try:
        assert client.connection_pool.connection_kwargs["password"] == "123"
    finally:
        client.close()


def test_redis_client_uses_only_the_first_node_of_several() -> None:
    client = redis_client("first:1,second:2")
    try:
        kwargs = client.connection_pool.connection_kwargs
        assert (kwargs["host"], kwargs["port"]) == ("first", 1)
    finally:
        client.close()


def test_redis_client_timeout_applies_unless_the_string_sets_its_own() -> None:
    client = redis_client("h:1,socket_timeout=0.5", timeout_s=0.05)
    try:
        kwargs = client.connection_pool.connection_kwargs
        assert kwargs["socket_timeout"] == 0.5
        assert kwargs["socket_connect_timeout"] == 0.05
    finally:
        client.close()


@pytest.mark.parametrize("retries", [0, 3])
def test_redis_client_retries_as_asked(retries: int) -> None:
    client = redis_client("h:1", retries=retries)
    try:
        assert client.connection_pool.connection_kwargs["retry"].get_retries() == retries
    finally:
        client.close()


def test_redis_client_accepts_an_already_parsed_target() -> None:
    client = redis_client(RedisTarget.parse("h:9,db=4"))
    try:
        kwargs = client.connection_pool.connection_kwargs
        assert (kwargs["host"], kwargs["port"], kwargs["db"]) == ("h", 9, 4)
    finally:
        client.close()


class _RecordingCluster(RedisCluster):
    """A ``RedisCluster`` that records its arguments instead of connecting (a real one asks
    the start-up nodes for the slot map and ``COMMAND`` while it is constructed)."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


def test_redis_client_for_a_cluster_builds_a_redis_cluster_over_every_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(redis.cluster, "RedisCluster", _RecordingCluster)  # imported on use
    client = redis_client(
        f"a:7000,b:7001,db=0,password={SECRET},ssl=true",
        redis_type="redis_cluster",
        timeout_s=0.1,
        retries=0,
    )
    assert isinstance(client, RedisCluster)
    kwargs = client.kwargs  # type: ignore[attr-defined]
    nodes = [(n.host, n.port) for n in kwargs.pop("startup_nodes")]
    assert nodes == [("a", 7000), ("b", 7001)]
    assert kwargs.pop("retry").get_retries() == 0
    assert kwargs == {
        "password": SECRET,
        "ssl": True,
        "socket_timeout": 0.1,
        "socket_connect_timeout": 0.1,
    }  # no db: a cluster has database 0 only


def test_redis_client_does_not_change_the_parsed_target_options() -> None:
    target = RedisTarget.parse("h:1,db=1")
    redis_client(target, timeout_s=0.2).close()
    assert target.options == {"db": 1}


# -- every documented option reaches redis-py; nothing is dropped silently -------------------


class _NoCommands:
    """Stands in for ``CommandsParser``, which asks the cluster for ``COMMAND`` when built."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass


@pytest.fixture
def offline_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """Real ``RedisCluster``s built without the network: slot discovery and ``COMMAND`` are
    skipped; everything redis-py does with the keyword arguments still runs."""
    from redis import cluster

    monkeypatch.setattr(cluster.NodesManager, "initialize", lambda self, *a, **k: None)
    monkeypatch.setattr(cluster, "CommandsParser", _NoCommands)


TLS_ACL = f'cache:6380,username=svc,password=p"a:s={SECRET},ssl=true,ssl_ca_certs=/ca/private.pem'


def test_username_password_and_ssl_ca_certs_reach_a_redis_node_connection() -> None:
    client = redis_client(TLS_ACL, retries=0)
    try:
        kwargs = client.connection_pool.connection_kwargs
        assert kwargs["username"] == "svc"
        assert kwargs["password"] == f'p"a:s={SECRET}'
        assert kwargs["ssl_ca_certs"] == "/ca/private.pem"
        assert client.connection_pool.connection_class is redis.connection.SSLConnection
    finally:
        client.close()


def test_username_password_and_ssl_ca_certs_reach_every_cluster_node_connection(
    offline_cluster: None,
) -> None:
    client = redis_client(TLS_ACL, redis_type="redis_cluster", retries=0)
    try:
        manager = client.nodes_manager
        # What redis-py keeps for the nodes it discovers, and a node built from it.
        node = manager.create_redis_node("cache", 6380, **manager.connection_kwargs)
        kwargs = node.connection_pool.connection_kwargs
        assert kwargs["username"] == "svc"
        assert kwargs["password"] == f'p"a:s={SECRET}'
        assert kwargs["ssl_ca_certs"] == "/ca/private.pem"
        assert node.connection_pool.connection_class is redis.connection.SSLConnection
    finally:
        client.close()


@pytest.mark.parametrize(
    "option", ["ssl_ca_certs=/ca.pem", "ssl_certfile=/c.pem", "ssl_cert_reqs=none"]
)
@pytest.mark.parametrize("ssl", ["", ",ssl=false"])
def test_a_tls_option_without_ssl_true_is_an_error_not_a_clear_text_connection(
    option: str, ssl: str
) -> None:
    name = option.split("=")[0]
    with pytest.raises(connection.ConnectionStringError, match=f"{name} given without ssl=true"):
        redis_client(f"h:1,{option}{ssl}")


@pytest.mark.parametrize("text", ["h:1,pasword=x", "h:1,db=1,sockettimeout=1"])
def test_an_unknown_option_is_an_error_naming_it(text: str) -> None:
    with pytest.raises(connection.ConnectionStringError, match="unknown option"):
        RedisTarget.parse(text)


def test_an_option_a_cluster_would_drop_is_an_error_for_a_cluster_only() -> None:
    redis_client("h:1,health_check_interval=5").close()  # redis.Redis takes it
    with pytest.raises(connection.ConnectionStringError, match="health_check_interval"):
        redis_client("h:1,health_check_interval=5", redis_type="redis_cluster")
    with pytest.raises(connection.ConnectionStringError, match="db must be 0"):
        redis_client("h:1,db=3", redis_type="redis_cluster")


@pytest.mark.parametrize("key", ["password", "username"])
@pytest.mark.parametrize("value", [f"a,{SECRET}", f"{SECRET},b=c", f"x,{SECRET}:1"])
def test_a_value_with_a_comma_is_an_error_naming_the_option_never_the_value(
    key: str, value: str
) -> None:
    with pytest.raises(connection.ConnectionStringError) as raised:
        RedisTarget.parse(f"h:1,db=0,{key}={value},ssl=false")
    message = str(raised.value)
    assert f"the value of {key} contains ','" in message
    assert SECRET not in message


def test_a_password_may_hold_quotes_colons_equals_and_hashes() -> None:
    password = f"\"'{SECRET}:=#{{}}[]"
    assert RedisTarget.parse(f"h:1,password={password}").options["password"] == password


def test_connection_string_errors_are_solaris_value_errors() -> None:
    from solaris.errors import SolarisError

    assert issubclass(connection.ConnectionStringError, SolarisError)
    assert issubclass(connection.ConnectionStringError, ValueError)


# -- redacted: what logs, summaries and errors show ------------------------------------------


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("h:1", "h:1"),
        (
            f"a:1,b:2,db=1,username=svc,password={SECRET},ssl=true",
            "a:1,b:2,db=1,username=svc,password=***,ssl=true",
        ),
        (f"h:1,password={SECRET},db=2", "h:1,password=***,db=2"),
        (f"h:1,ssl=true,ssl_password={SECRET}", "h:1,ssl=true,ssl_password=***"),
        # A password with commas (unparseable): hidden up to the next known option.
        (f"h:1,password=a,{SECRET},z={SECRET},db=2", "h:1,password=***,db=2"),
        # A typo'd option may be a password: its value is hidden.
        (f"h:1,pasword={SECRET}", "h:1,pasword=***"),
    ],
)
def test_redacted_keeps_nodes_and_options_but_no_secret(text: str, shown: str) -> None:
    assert connection.redacted(text) == shown
    assert SECRET not in connection.redacted(text)


def test_redacted_of_no_connection_is_none() -> None:
    assert connection.redacted(None) is None


def test_a_target_keeps_its_string_and_its_repr_shows_no_option_value() -> None:
    text = f"h:1,db=2,username=svc,password={SECRET}"
    target = RedisTarget.parse(text)
    assert target.connection_string == text
    assert SECRET not in repr(target) and SECRET not in target.describe()
    assert repr(target) == "RedisTarget('h:1 (db, password, username)')"


def test_targets_parsed_from_equal_strings_are_equal_and_hash_alike() -> None:
    one, two = RedisTarget.parse("h:1,db=2"), RedisTarget.parse(" h:1 , db=2 ")
    assert one == two and hash(one) == hash(two)
    assert one != RedisTarget.parse("h:1,db=3")
    assert {one: "store"}[two] == "store"  # settings holding it are cache keys


def test_a_target_built_from_parts_writes_its_string() -> None:
    target = RedisTarget((("a", 1), ("b", 2)), {"db": 3, "ssl": True, "password": "p"})
    assert target.connection_string == "a:1,b:2,db=3,ssl=true,password=p"
    assert RedisTarget.parse(target.connection_string) == target
    assert connection.LOCAL_REDIS.connection_string == "localhost:6379"


def test_of_parses_a_string_and_returns_a_target_as_it_is() -> None:
    target = RedisTarget.parse("h:1")
    assert RedisTarget.of(target) is target
    assert RedisTarget.of("h:1") == target
    with pytest.raises(connection.ConnectionStringError):
        RedisTarget.of("redis://h:1")


def test_with_defaults_adds_only_the_options_the_target_does_not_set() -> None:
    target = RedisTarget.parse("h:1,socket_timeout=2")
    out = target.with_defaults(socket_timeout=0.05, socket_connect_timeout=0.05)
    assert out.options == {"socket_timeout": 2, "socket_connect_timeout": 0.05}
    assert out.connection_string == "h:1,socket_timeout=2,socket_connect_timeout=0.05"
    assert RedisTarget.parse(out.connection_string) == out
    assert target.with_defaults(socket_timeout=1) is target


def test_redacted_takes_a_target_too() -> None:
    target = RedisTarget.parse(f"h:1,password={SECRET}")
    assert connection.redacted(target) == "h:1,password=***"


def test_the_options_checked_without_redis_py_are_taken_by_both_clients() -> None:
    single, cluster = connection.client_options()
    assert single & cluster >= connection.COMMON_OPTIONS


def test_targets_equal_by_their_option_values_hash_alike() -> None:
    one, two = (
        RedisTarget.parse("h:1,socket_timeout=1"),
        RedisTarget.parse("h:1,socket_timeout=1.0"),
    )
    assert one == two and hash(one) == hash(two)
