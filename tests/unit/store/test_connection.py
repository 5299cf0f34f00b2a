"""Feast-style Redis connection strings: parsing, redacted descriptions, and the clients built
from them (constructed only; nothing here connects)."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from solaris.store import connection
from solaris.store.connection import RedisTarget, redis_client

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
    monkeypatch.setattr(connection, "RedisCluster", _RecordingCluster)
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
