"""One Redis connection: the Feast-style connection string, parsed once, for every client.

::

    host:port[,host:port...][,db=N][,username=..][,password=..][,ssl=true]
             [,ssl_ca_certs=/path/ca.pem][,socket_timeout=0.05][,<any redis-py option>=..]

Each ``key=value`` is JSON-decoded when it can be (``db=1`` → 1, ``ssl=true`` → True) and
passed to ``redis.Redis`` (or ``redis.RedisCluster``, which takes every listed node as a
start-up node); ``password``, ``username`` and the TLS file options always stay strings.
This is the parsing Feast's own Redis store applies, so the same string works for the Feast
CLI, the online store, the miss stream and every health check: each of them builds its
client with :func:`redis_client`.

Nothing is dropped silently. The string splits on ``,``, so a value cannot contain one: a
password with a comma leaves a piece that is neither ``host:port`` nor an option, and that
is an error naming the option it broke (never the piece, which is part of the password). An
option redis-py does not know, an option ``RedisCluster`` would not pass to its nodes, and
a TLS option without ``ssl=true`` (which would connect in clear text) are errors too, and so
are a port outside 1..65535, a ``db`` that is not a database number and a ``redis://`` URL
(not this format; its message never repeats the URL, which may carry the password). Log
the connection with :func:`redacted`, which keeps the nodes and options but not the
password.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from solaris.errors import SolarisError

if TYPE_CHECKING:
    import redis as redis_py
    from redis.cluster import RedisCluster

__all__ = [
    "COMMON_OPTIONS",
    "ENDPOINT_PORT",
    "LOCAL_REDIS",
    "ConnectionStringError",
    "RedisTarget",
    "RedisType",
    "answers",
    "client_options",
    "ping_failure",
    "redacted",
    "redis_client",
    "unlink_matching",
]

# Where `solaris serve` listens by default: not Airflow's 8080 nor Feast's 6566.
ENDPOINT_PORT = 8650

RedisType = Literal["redis", "redis_cluster"]
_STRINGS = frozenset(
    {
        "password",
        "username",
        "ssl_password",
        "ssl_ca_certs",
        "ssl_ca_path",
        "ssl_certfile",
        "ssl_keyfile",
    }
)
# Options whose values never appear in a log line, a summary or an error message.
SECRET_OPTIONS = frozenset({"password", "ssl_password"})
# Set by redis_client itself, or objects a string cannot spell.
_NOT_OPTIONS = frozenset(
    {"self", "kwargs", "host", "port", "retry", "connection_pool", "startup_nodes", "url"}
)


# A URL (``redis://user:pw@host:6379/0``) is not this format: refused, never echoed.
_URL = re.compile(r"\s*([A-Za-z][A-Za-z0-9+.-]*)://")
_URL_SCHEMES = frozenset({"redis", "rediss", "unix"})


def _parameters(cls: type) -> frozenset[str]:
    return frozenset(inspect.signature(cls.__init__).parameters) - _NOT_OPTIONS


# Options both clients take (a test checks it against redis-py): a string that uses only
# these is checked without importing redis, as settings are where DAG files are parsed.
COMMON_OPTIONS = frozenset(
    {
        "username",
        "password",
        "ssl",
        "ssl_ca_certs",
        "ssl_ca_path",
        "ssl_certfile",
        "ssl_keyfile",
        "ssl_password",
        "ssl_cert_reqs",
        "ssl_check_hostname",
        "socket_timeout",
        "socket_connect_timeout",
        "socket_keepalive",
        "decode_responses",
        "client_name",
        "max_connections",
        "retry_on_timeout",
        "encoding",
        "protocol",
    }
)


@functools.cache
def client_options() -> tuple[frozenset[str], frozenset[str]]:
    """What each client type accepts: redis.Redis its keyword arguments; RedisCluster its
    own plus those it hands to every node's client (the others it drops without a word).

    Read from redis-py on first use, not at import (see :data:`COMMON_OPTIONS`).
    """
    import redis as redis_py
    from redis.cluster import REDIS_ALLOWED_KEYS, RedisCluster

    single = _parameters(redis_py.Redis)
    cluster = (_parameters(RedisCluster) | frozenset(REDIS_ALLOWED_KEYS)) - _NOT_OPTIONS
    return single, cluster


def _known(key: str) -> bool:
    if key in COMMON_OPTIONS or key == "db":
        return True
    single, cluster = client_options()
    return key in single or key in cluster


class ConnectionStringError(SolarisError, ValueError):
    """A Redis connection string that cannot be used as written; the message names the
    option or node at fault, never a password."""


# What the options redis-py would take without a word, then fail on later (a TypeError in
# a socket call, "does not answer a PING"), must be: checked when the string is parsed.
_SECONDS = ("socket_timeout", "socket_connect_timeout")
_BOOLEANS = (
    "ssl",
    "socket_keepalive",
    "retry_on_timeout",
    "decode_responses",
    "ssl_check_hostname",
)


def _check_value(key: str, value: Any) -> None:
    """:class:`ConnectionStringError` naming ``key`` when its value cannot work."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if key in _SECONDS and not (number and math.isfinite(value) and value > 0):
        raise ConnectionStringError(
            f"Redis connection string: {key} must be seconds > 0 (e.g. 0.05), got {value!r}"
        )
    if key in _BOOLEANS and not isinstance(value, bool):
        raise ConnectionStringError(
            f"Redis connection string: {key} must be true or false, got {value!r}"
        )
    if key == "protocol" and (value not in (2, 3) or isinstance(value, bool)):
        raise ConnectionStringError(
            f"Redis connection string: protocol must be 2 or 3 (RESP2, RESP3), got {value!r}"
        )
    if key == "max_connections" and not (isinstance(value, int) and not isinstance(value, bool)
                                         and value > 0):  # fmt: skip
        raise ConnectionStringError(
            f"Redis connection string: max_connections must be a count > 0, got {value!r}"
        )


@dataclass(frozen=True, repr=False)
class RedisTarget:
    """A parsed connection string: the nodes, the client options, and the string itself.

    Parsed once where a string comes in (the configuration's ``store.redis``, a
    ``--redis`` option, :class:`~solaris.serving.SolarisFeatures`'s ``redis``) and handed
    down as this object. The string stays for the one consumer that wants text, Feast's
    ``connection_string``; ``repr`` and :meth:`describe` never show option values.
    """

    nodes: tuple[tuple[str, int], ...]
    options: dict[str, Any] = field(default_factory=dict)
    # The text it was parsed from (built from nodes and options when constructed directly).
    connection_string: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not self.connection_string:
            parts = [f"{host}:{port}" for host, port in self.nodes]
            parts += [f"{key}={_option_text(value)}" for key, value in self.options.items()]
            object.__setattr__(self, "connection_string", ",".join(parts))

    def __repr__(self) -> str:
        return f"RedisTarget({self.describe()!r})"

    def __hash__(self) -> int:  # settings are hashed (cached stores); options is a dict
        # Values hash as == compares them (1 and 1.0 alike); an unhashable one by its repr.
        items = frozenset(
            (k, v if isinstance(v, str | int | float | bool | None) else repr(v))
            for k, v in self.options.items()
        )
        return hash((self.nodes, items))

    @classmethod
    def of(cls, connection: str | RedisTarget) -> RedisTarget:
        """``connection`` parsed, or as it is when it already is a target."""
        return connection if isinstance(connection, RedisTarget) else cls.parse(connection)

    def with_defaults(self, **defaults: Any) -> RedisTarget:
        """This target with the ``defaults`` it does not set itself (the string too)."""
        added = {k: v for k, v in defaults.items() if k not in self.options}
        if not added:
            return self
        text = ",".join(
            [self.connection_string, *(f"{k}={_option_text(v)}" for k, v in added.items())]
        )
        return RedisTarget(self.nodes, {**self.options, **added}, text)

    @classmethod
    def parse(cls, connection: str) -> RedisTarget:
        """The nodes and options of ``connection``.

        Raises:
            ConnectionStringError: no node, a bad ``host:port`` (or a port outside
                1..65535), a URL instead of this format, an unknown option, a ``db`` that is
                not a database number, or a value that contained ``,`` (named by its option).
        """
        if not isinstance(connection, str) or not connection.strip():
            raise ConnectionStringError("the Redis connection string is empty")
        url = _URL.match(connection)
        if url:
            # Never echo the URL: its user-info part may hold the password.
            scheme = url.group(1).lower()
            shown = f"a {scheme}:// URL" if scheme in _URL_SCHEMES else "a URL"
            raise ConnectionStringError(
                f"the Redis connection string is {shown}; write host:port[,option=value...], "
                "e.g. 'cache:6379,db=1,username=app,password=...,ssl=true'"
            )
        nodes: list[tuple[str, int]] = []
        options: dict[str, Any] = {}
        last: str | None = None  # the option before this part
        literal = False  # whether that option's value is a literal string (a password)
        for part in (p.strip() for p in connection.split(",")):
            if not part:
                continue
            key, eq, raw = part.partition("=")
            key = key.strip()
            if last is not None and (not eq or (not _known(key) and literal)):
                # Options come after the nodes: this is the rest of the previous value (after
                # a password, a piece of the password: never shown).
                raise ConnectionStringError(
                    f"Redis connection string: the value of {last} contains ',' or is "
                    "followed by something that is neither an option nor host:port; a value "
                    "cannot carry ',' (the string is split on it)"
                )
            if eq:
                if not _known(key):
                    raise ConnectionStringError(
                        f"Redis connection string: unknown option {key!r} (the options are "
                        "redis-py's Redis/RedisCluster keyword arguments)"
                    )
                literal = key in _STRINGS
                options[key] = raw if key in _STRINGS else _json_or_text(raw)
                last = key
                continue
            host, _, port = part.rpartition(":") if ":" in part else (part, "", "6379")
            try:
                number = int(port or 6379)
            except ValueError:
                raise ConnectionStringError(
                    f"Redis connection string: {part!r} is not host:port"
                ) from None
            if not 1 <= number <= 65535:
                raise ConnectionStringError(
                    f"Redis connection string: the port of {part!r} is outside 1..65535"
                )
            nodes.append((host or "localhost", number))
        if not nodes:
            raise ConnectionStringError("the Redis connection string names no host:port")
        for key, value in options.items():
            _check_value(key, value)
        db = options.get("db", 0)
        if isinstance(db, bool) or not isinstance(db, int) or db < 0:
            raise ConnectionStringError(
                f"Redis connection string: db must be a database number (0, 1, ...), got {db!r}"
            )
        return cls(tuple(nodes), options, connection)

    def check(self, redis_type: RedisType = "redis") -> None:
        """Raise :class:`ConnectionStringError` for an option the ``redis_type`` client would
        not use: one it does not take, or a TLS option without ``ssl=true``."""
        unused = sorted(set(self.options) - COMMON_OPTIONS - {"db"})
        if unused:  # rare options: ask redis-py which client takes them
            single, cluster = client_options()
            accepted = cluster if redis_type == "redis_cluster" else single
            unused = sorted(set(unused) - accepted)
        if unused:
            raise ConnectionStringError(
                f"Redis connection string: {', '.join(unused)} is not used by a "
                f"{redis_type} client (store.redis_type)"
            )
        if redis_type == "redis_cluster" and self.options.get("db", 0) != 0:
            raise ConnectionStringError(
                "Redis connection string: db must be 0 for a redis_cluster (a cluster has "
                "database 0 only)"
            )
        tls = sorted(k for k in self.options if k.startswith("ssl_"))
        if tls and self.options.get("ssl") is not True:
            raise ConnectionStringError(
                f"Redis connection string: {', '.join(tls)} given without ssl=true: the "
                "connection would not use TLS"
            )

    def describe(self) -> str:
        """The nodes and option names, never their values (passwords stay out of logs)."""
        hosts = ",".join(f"{h}:{p}" for h, p in self.nodes)
        return f"{hosts} ({', '.join(sorted(self.options))})" if self.options else hosts


# The Redis the cycle and the demo use when ``store.redis`` is unset.
LOCAL_REDIS = RedisTarget((("localhost", 6379),))


def redacted(connection: str | RedisTarget | None) -> str | None:
    """``connection`` for a log line, a summary or an error: the nodes and options with the
    value of every secret option (``password``, ``ssl_password``) and of any unknown one
    replaced by ``***``. Never raises: a string that does not parse is masked from its
    first secret on."""
    if connection is None:
        return None
    if isinstance(connection, RedisTarget):
        connection = connection.connection_string
    shown: list[str] = []
    hiding = False  # inside a secret value that contained ','
    for part in str(connection).split(","):
        key, eq, _ = part.partition("=")
        key = key.strip()
        if eq and _known(key) and key not in SECRET_OPTIONS:
            hiding = False
            shown.append(part)
        elif eq and key in SECRET_OPTIONS:
            hiding = True
            shown.append(f"{key}=***")
        elif hiding:
            continue
        else:
            shown.append(f"{key}=***" if eq else part)
    return ",".join(shown)


def _option_text(value: Any) -> str:
    """An option's value as the string spells it (the inverse of :func:`_json_or_text`)."""
    return value if isinstance(value, str) else json.dumps(value)


def _json_or_text(raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def redis_client(
    connection: str | RedisTarget,
    *,
    redis_type: RedisType = "redis",
    timeout_s: float | None = None,
    retries: int = 3,
) -> redis_py.Redis | RedisCluster:
    """A redis-py client for ``connection``: the one way SOLARIS opens Redis.

    Args:
        connection: the connection string (or an already parsed target).
        redis_type: ``redis`` (the first node) or ``redis_cluster`` (every node a start-up
            node).
        timeout_s: socket and connect timeout, unless the string sets its own.
        retries: retries on connection errors and timeouts (exponential back-off); 0 for
            the request path, where the caller's time bound is the retry policy.

    Raises:
        ConnectionStringError: see :meth:`RedisTarget.parse` and :meth:`RedisTarget.check`.
    """
    import redis as redis_py
    from redis.backoff import ExponentialBackoff, NoBackoff
    from redis.cluster import ClusterNode, RedisCluster
    from redis.retry import Retry

    target = RedisTarget.of(connection)
    target.check(redis_type)
    kwargs = dict(target.options)
    if timeout_s is not None:
        kwargs.setdefault("socket_timeout", timeout_s)
        kwargs.setdefault("socket_connect_timeout", timeout_s)
    backoff = ExponentialBackoff() if retries else NoBackoff()
    if redis_type == "redis_cluster":
        kwargs.pop("db", None)  # a cluster has database 0 only
        return RedisCluster(
            startup_nodes=[ClusterNode(h, p) for h, p in target.nodes],
            retry=Retry(backoff, retries),
            **kwargs,
        )
    host, port = target.nodes[0]
    return redis_py.Redis(host=host, port=port, retry=Retry(backoff, retries), **kwargs)


def unlink_matching(client, pattern: str, batch: int = 1000) -> int:
    """Delete every key matching ``pattern`` (``SCAN`` + ``UNLINK`` in batches, never
    ``KEYS``); returns how many were deleted."""
    removed = 0
    keys: list[bytes] = []
    for key in client.scan_iter(match=pattern, count=batch):
        keys.append(key)
        if len(keys) >= batch:
            removed += client.unlink(*keys)
            keys.clear()
    if keys:
        removed += client.unlink(*keys)
    return removed


def answers(
    connection: str | RedisTarget, timeout_s: float = 0.5, redis_type: RedisType = "redis"
) -> bool:
    """Whether Redis at ``connection`` answers a PING within ``timeout_s``."""
    return ping_failure(connection, timeout_s, redis_type) is None


def ping_failure(
    connection: str | RedisTarget, timeout_s: float = 0.5, redis_type: RedisType = "redis"
) -> str | None:
    """Why Redis at ``connection`` does not answer a PING within ``timeout_s`` (the error's
    type and message, e.g. a ``db`` the server does not have), or None when it does."""
    import redis as redis_py
    from redis.exceptions import RedisClusterException  # not a RedisError: no node answered

    try:
        client = redis_client(connection, redis_type=redis_type, timeout_s=timeout_s, retries=0)
        try:
            return None if client.ping() else "PING answered false"
        finally:
            client.close()
    except (redis_py.RedisError, RedisClusterException, OSError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
