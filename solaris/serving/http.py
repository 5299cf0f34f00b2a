"""The binary feature endpoint: one HTTP call per request for callers that are not Python.

``solaris serve`` runs it (``docs/serving_http.md`` is the reference, with a reader in Go).
Each call is one :meth:`~solaris.serving.client.SolarisFeatures.fetch`, so it answers what
the Python client answers, under the same configuration, freshness, version and leakage
rules, and it counts in the same metrics::

    POST /v1/features          {"user_id": 42, "item_ids": [7, 9, ...], "now": 1717000000}
    POST /v1/features?user_id=42[&now=1717000000]
                               body: the item ids, little-endian int64 (application/octet-stream)
    POST /v1/requests          {"request_id": 1, "user_id": 42, "item_ids": [7, 9, ...],
                                "scores": [0.9, 0.2, ...], "now": 1717000000}
    POST /v1/requests?request_id=1&user_id=42[&now=1717000000]
                               body: n item ids, little-endian int64, then their n scores,
                               little-endian float32 (application/octet-stream)
    GET  /metrics              Prometheus text, summed over every worker process
    GET  /healthz              "ok" (header Solaris-Worker: the answering worker's pid)

The answer is one Arrow IPC stream (``application/vnd.apache.arrow.stream``) of one record
batch with a row per item, in the request's order (:func:`response_schema`):

* ``item_id`` int64;
* ``tier`` the first present tier (``pair``, ``nbr``, ``uagg``, ``iagg``, ``none``),
  dictionary-encoded;
* one ``fixed_size_list<d>`` column per tier, **null where the tier is missing** (the VM's
  mask): ``pair`` and ``nbr`` float16 (as the store keeps them: exact), ``uagg`` (the
  user's mean without the item) and ``iagg`` float32;
* ``<view>_status`` int32 per view, Feast's ``FieldStatus`` of the row as ``feast serve``
  reports it (1 PRESENT, 3 NOT_FOUND, 4 OUTSIDE_MAX_AGE) on the same rule.

The header ``Solaris-Fetch`` says ``ok``, or ``failed`` / ``shed`` when the store could not
answer within its bound: then every tier is null, as the Python client serves zeros.

``/v1/requests`` logs one served request (its candidates and the verifier's scores) through
:meth:`~solaris.serving.client.SolarisFeatures.log_request`, so a service in any language
feeds the cycle's request log as the Python client does: the arguments are checked at once
(``400`` naming the bad one; nothing is written), the entry is queued on the worker's writer
thread and the answer is ``202`` with an empty body; a slow or dead Redis drops the entry
and counts it (``solaris_serving_stream_writes_total{stream="requests"}``), never delaying
the answer.

**Workers.** A worker process answers one request at a time (the fetch is a few hundred
microseconds of CPU); ``--workers N`` runs ``N`` of them, each a uvicorn server on a
``SO_REUSEPORT`` socket of its own, so the kernel spreads connections over them. Each
writes its metric counts to a shared folder every :data:`METRICS_EVERY_S` seconds and on
every scrape, so a scrape of any worker sums all of them, each at most that old (what
Prometheus's multiprocess mode does for its own metric types, done for this package's
collectors).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

import numpy as np
import pyarrow as pa

from solaris.connection import ENDPOINT_PORT, RedisTarget
from solaris.errors import SolarisError
from solaris.serving.tiers import NONE, TIERS, TierFeatures

if TYPE_CHECKING:
    from solaris.config import SolarisConfig
    from solaris.serving.client import SolarisFeatures
    from solaris.serving.metrics import Snapshot

__all__ = [
    "ARROW_STREAM",
    "DEFAULT_HEADER_TIMEOUT_S",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_PORT",
    "METRICS_EVERY_S",
    "FeatureApp",
    "RequestError",
    "ServeSettings",
    "UnsupportedMediaType",
    "check_port",
    "decode_logged_request",
    "decode_request",
    "encode_response",
    "is_loopback",
    "media_type",
    "response_schema",
    "run",
    "token_digest",
]

log = logging.getLogger(__name__)

ARROW_STREAM = "application/vnd.apache.arrow.stream"
METRICS_EVERY_S = 1.0
_SETTINGS_ENV = "SOLARIS_SERVE_SETTINGS"  # how the supervisor hands the settings to workers
_F16_TIERS = frozenset({"pair", "nbr"})  # stored float16: sent as they are kept
_TIER_TYPE = pa.dictionary(pa.int8(), pa.utf8())
_TIER_NAMES = pa.array([*TIERS, NONE], pa.utf8())
_MAX_BODY = 1 << 20
_BODY_TIMEOUT_S = 10.0  # a body that trickles in slower than this is answered 408
DEFAULT_HEADER_TIMEOUT_S = 10.0  # a request line and headers not in by then: 408, closed
_KEEP_ALIVE_S = 5.0  # an idle kept-alive connection is closed after this
DEFAULT_PORT = ENDPOINT_PORT
DEFAULT_MAX_CONNECTIONS = 1024  # per worker; more are answered 503
_JSON, _BINARY = "application/json", "application/octet-stream"
_FEATURES, _REQUESTS = "/v1/features", "/v1/requests"
_GUARDED = frozenset({_FEATURES, _REQUESTS, "/metrics"})  # need the token when one is set
_LOGGED_FIELDS = ("request_id", "user_id", "item_ids", "scores", "now")
_LOGGED_SHAPE = (
    '{"request_id": ..., "user_id": ..., "item_ids": [...], "scores": [...], "now": ...}'
)
_LOGGED_ENTRY = 12  # bytes per item of a binary body: an int64 id and a float32 score
_Headers = list[tuple[bytes, bytes]]  # an answer's extra headers
_LOOPBACK = ("127.", "::1", "localhost")
_EARLY_EXIT_S, _EARLY_EXITS = 30.0, 3  # workers that keep dying at start stop the server


class RequestError(SolarisError, ValueError):
    """A request the endpoint refuses (HTTP 400); the message names what is wrong."""

    status = 400


class UnsupportedMediaType(RequestError):
    """A body of a media type the endpoint does not read (HTTP 415)."""

    status = 415


def media_type(content_type: str) -> str:
    """The media type of a ``Content-Type`` value: parameters dropped, lower-cased (media
    types are case-insensitive; ``application/octet-streamz`` is not ``octet-stream``)."""
    return content_type.split(";", 1)[0].strip().lower()


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        repeated = sorted({k for k in keys if keys.count(k) > 1})
        raise RequestError(f"the body repeats the keys {repeated}: each is read once")
    return dict(pairs)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine's loopback (only local processes reach it)."""
    return host.startswith(_LOOPBACK)


def token_digest(token: str) -> str:
    """The SHA-256 of a bearer token, as the workers compare it."""
    import hashlib

    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class ServeSettings:
    """What each worker process needs: built once by ``solaris serve`` and handed to the
    workers as JSON (they are fresh interpreters)."""

    config_json: str
    redis: str  # the connection string: each worker parses it once, in its own process
    fm_version: str
    metrics_dir: str | None = None
    token_sha256: str | None = None  # the bearer token's digest: the token is never handed on
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls) -> ServeSettings:
        raw = os.environ.get(_SETTINGS_ENV)
        if not raw:
            raise SolarisError(f"{_SETTINGS_ENV} is not set: start workers with `solaris serve`")
        return cls(**json.loads(raw))


def response_schema(z_dim: int) -> pa.Schema:
    """The answer's columns (module docstring)."""
    fields = [pa.field("item_id", pa.int64(), nullable=False), pa.field("tier", _TIER_TYPE)]
    for tier in TIERS:
        value = pa.float16() if tier in _F16_TIERS else pa.float32()
        fields.append(pa.field(tier, pa.list_(value, z_dim)))
    fields += [pa.field(f"{tier}_status", pa.int32(), nullable=False) for tier in TIERS]
    return pa.schema(fields)


def _narrow(z: np.ndarray) -> np.ndarray:
    """float32 values that are float16 values (the pair and nbr blocks) as float16, exactly;
    torch converts with the CPU's half-precision instructions (see ``codec.widen``)."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(z)).half().numpy()


def encode_response(
    items: np.ndarray, out: TierFeatures, statuses: Mapping[str, np.ndarray]
) -> bytes:
    """The Arrow IPC stream of one answer: ``out`` for ``items``, ``statuses[view]`` the
    ``[N]`` FieldStatus of each serving view."""
    n, d = len(out), out.z_dim
    tz = out.tier_z
    columns: list[pa.Array] = [
        pa.array(items, pa.int64()),
        pa.DictionaryArray.from_arrays(pa.array(_tier_index(out.tier), pa.int8()), _TIER_NAMES),
    ]
    for k, tier in enumerate(TIERS):
        block = tz[:, k]
        values = _narrow(block) if tier in _F16_TIERS else np.ascontiguousarray(block)
        missing = ~out.mask[:, k]
        columns.append(
            pa.FixedSizeListArray.from_arrays(
                pa.array(values.reshape(-1)), d, mask=pa.array(missing) if missing.any() else None
            )
        )
    columns += [pa.array(np.asarray(statuses[t], np.int32)) for t in TIERS]
    batch = pa.RecordBatch.from_arrays(columns, schema=response_schema(d))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    assert batch.num_rows == n
    return sink.getvalue().to_pybytes()


_TIER_CODE = {name: k for k, name in enumerate([*TIERS, NONE])}


def _tier_index(tier: np.ndarray) -> np.ndarray:
    codes = np.empty(len(tier), np.int8)
    for name, code in _TIER_CODE.items():
        codes[tier == name] = code
    return codes


def _number(raw: str, name: str) -> int | float:
    try:
        value = float(raw) if any(c in raw for c in ".eE") else int(raw)
    except ValueError:
        raise RequestError(f"{name} must be a number, got {raw!r}") from None
    return value


def _is_binary(content_type: str) -> bool:
    """Whether a body is ``application/octet-stream`` (True) or JSON (False: ``application/json``
    or no ``Content-Type``); :class:`UnsupportedMediaType` for anything else."""
    media = media_type(content_type)
    if media == _BINARY:
        return True
    if media not in ("", _JSON):
        raise UnsupportedMediaType(f"Content-Type {content_type!r}: send {_JSON} or {_BINARY}")
    return False


def _json_body(body: bytes, shape: str) -> Any:
    """The JSON document of a body; :class:`RequestError` when it is not JSON, repeats a key
    or nests too deep (``shape``: what the body should be, for the message)."""
    try:
        return json.loads(body, object_pairs_hook=_unique_keys)
    except RecursionError:
        raise RequestError(f"the body nests too deep: it is {shape}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        if isinstance(exc, RequestError):
            raise
        raise RequestError(f"the body is not JSON: {exc}") from None


def decode_request(query: bytes, content_type: str, body: bytes) -> tuple[Any, Any, Any]:
    """``(user_id, item_ids, now)`` of a request (module docstring); the values go to
    :meth:`SolarisFeatures.fetch`, which checks them. :class:`RequestError` for a body or a
    query that cannot be read."""
    if _is_binary(content_type):
        params = parse_qs(query.decode("latin-1"))
        if "user_id" not in params:
            raise RequestError("a binary body needs ?user_id=<id> in the query")
        if len(body) % 8:
            raise RequestError(
                f"the body must be little-endian int64 item ids (a multiple of 8 bytes), got "
                f"{len(body)} bytes"
            )
        now = params.get("now")
        return (
            _number(params["user_id"][0], "user_id"),
            np.frombuffer(body, "<i8").astype(np.int64),
            _number(now[0], "now") if now else None,
        )
    doc = _json_body(body, "one object of three fields")
    if not isinstance(doc, dict) or "user_id" not in doc or "item_ids" not in doc:
        raise RequestError('the body must be {"user_id": ..., "item_ids": [...], "now": ...}')
    unknown = sorted(set(doc) - {"user_id", "item_ids", "now"})
    if unknown:
        raise RequestError(f"unknown fields {unknown}: user_id, item_ids and now are read")
    if not isinstance(doc["item_ids"], list):
        raise RequestError("item_ids must be a list of integers")
    return doc["user_id"], doc["item_ids"], doc.get("now")


def decode_logged_request(
    query: bytes, content_type: str, body: bytes
) -> tuple[Any, Any, Any, Any, Any]:
    """``(request_id, user_id, item_ids, scores, now)`` of a request to log (module
    docstring); the values go to :meth:`SolarisFeatures.log_request`, which checks them.
    :class:`RequestError` naming the field for a body or a query that cannot be read.

    A binary body is ``n`` little-endian int64 item ids followed by their ``n``
    little-endian float32 scores (``12 · n`` bytes), with ``request_id``, ``user_id`` and
    ``now`` in the query."""
    if _is_binary(content_type):
        params = parse_qs(query.decode("latin-1"))
        missing = [name for name in _LOGGED_FIELDS[:2] if name not in params]
        if missing:
            raise RequestError(
                f"a binary body needs ?request_id=<id>&user_id=<id> in the query: "
                f"{' and '.join(missing)} missing"
            )
        if len(body) % _LOGGED_ENTRY:
            raise RequestError(
                "the body must be n little-endian int64 item ids then their n little-endian "
                f"float32 scores (a multiple of {_LOGGED_ENTRY} bytes), got {len(body)} bytes"
            )
        n = len(body) // _LOGGED_ENTRY
        now = params.get("now")
        return (
            _number(params["request_id"][0], "request_id"),
            _number(params["user_id"][0], "user_id"),
            np.frombuffer(body, "<i8", count=n).astype(np.int64),
            np.frombuffer(body, "<f4", offset=8 * n).astype(np.float32),
            _number(now[0], "now") if now else None,
        )
    doc = _json_body(body, "one object of five fields")
    if not isinstance(doc, dict):
        raise RequestError(f"the body must be {_LOGGED_SHAPE}")
    missing = [name for name in _LOGGED_FIELDS[:4] if name not in doc]
    if missing:
        raise RequestError(f"the body lacks {', '.join(missing)}: send {_LOGGED_SHAPE}")
    unknown = sorted(set(doc) - set(_LOGGED_FIELDS))
    if unknown:
        raise RequestError(
            f"unknown fields {unknown}: request_id, user_id, item_ids, scores and now are read"
        )
    if not isinstance(doc["item_ids"], list):
        raise RequestError("item_ids must be a list of integers")
    if not isinstance(doc["scores"], list):
        raise RequestError("scores must be a list of numbers, one per item")
    return doc["request_id"], doc["user_id"], doc["item_ids"], doc["scores"], doc.get("now")


# -- metrics over several worker processes ---------------------------------------------------


def _snapshot_json(snap: Snapshot) -> str:
    doc = asdict(snap)
    doc["stream_writes"] = [[*k, v] for k, v in snap.stream_writes.items()]
    return json.dumps(doc)


def _snapshot_of(raw: str) -> Snapshot:
    from solaris.serving.metrics import Snapshot

    doc = json.loads(raw)
    doc["latency"] = tuple(doc["latency"])
    doc["stream_writes"] = {(a, b): v for a, b, v in doc["stream_writes"]}
    return Snapshot(**doc)


class _SharedCounts:
    """This worker's counts in ``<folder>/<pid>.json`` (written atomically), and the sum of
    every worker's on a scrape. A worker that exited keeps its file: its counts stay in the
    totals, as counters must."""

    def __init__(self, folder: Path, features: SolarisFeatures) -> None:
        self.folder = folder
        self.features = features
        self.path = folder / f"{os.getpid()}.json"
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def write(self) -> None:
        with self._lock:
            temporary = self.path.with_suffix(".tmp")
            temporary.write_text(_snapshot_json(self.features.metrics.snapshot()))
            os.replace(temporary, self.path)

    def start(self) -> None:
        """Write now and then every :data:`METRICS_EVERY_S` seconds from a daemon thread,
        so an idle worker's last counts reach the folder too."""
        self.write()
        self._stop = threading.Event()
        threading.Thread(target=self._loop, name="solaris-serve-metrics", daemon=True).start()

    def _loop(self) -> None:
        while not self._stop.wait(METRICS_EVERY_S):
            try:
                self.write()
            except OSError as exc:  # a full or vanished folder: the next scrape says so
                log.warning("metrics counts not written to %s: %s", self.path, exc)

    def stop(self) -> None:
        self._stop.set()
        self.write()

    def exposition(self) -> bytes:
        from prometheus_client.exposition import generate_latest

        from solaris.serving.metrics import families

        self.write()
        snapshots = []
        for path in sorted(self.folder.glob("*.json")):
            try:
                snapshots.append(_snapshot_of(path.read_text()))
            except (OSError, ValueError, TypeError, KeyError) as exc:  # a torn or odd file
                log.warning("metrics file %s skipped: %s", path, exc)
        namespace = self.features.metrics.namespace

        class _Sum:
            def collect(self):
                return families({namespace: snapshots})

        return generate_latest(_Sum())  # type: ignore[arg-type]


# -- the ASGI application ----------------------------------------------------------------------


class FeatureApp:
    """The endpoint as an ASGI application over one :class:`SolarisFeatures` (module
    docstring). The fetch runs on the event loop's thread: a worker is CPU-bound on it,
    and more workers, not more threads, use more cores. A logged request is checked there
    too; its write runs on the client's writer thread."""

    def __init__(
        self,
        features: SolarisFeatures,
        metrics_dir: Path | None = None,
        token_sha256: str | None = None,
    ) -> None:
        self.features = features
        self.counts = _SharedCounts(metrics_dir, features) if metrics_dir else None
        self.token_sha256 = token_sha256

    def _authorized(self, headers: Mapping[bytes, bytes]) -> bool:
        """Whether the request carries the bearer token (always, when none is set)."""
        import hmac

        if self.token_sha256 is None:
            return True
        scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
        given = token_digest(token.strip()) if scheme.lower() == "bearer" else ""
        return hmac.compare_digest(given, self.token_sha256)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path, method = scope["path"], scope["method"]
        headers = dict(scope["headers"])
        if path in _GUARDED and not self._authorized(headers):
            await _reply(
                send, 401, b"a bearer token is needed\n", [(b"www-authenticate", b"Bearer")]
            )
            return
        if path in (_FEATURES, _REQUESTS) and method == "POST":
            try:
                body = await _body(receive)
            except TimeoutError:
                await _reply(send, 408, b"the body did not arrive in time\n")
                return
            if body is None:
                await _reply(send, 413, b"request body over 1 MiB\n")
                return
            handle = self.answer if path == _FEATURES else self.log
            status, extra, payload = handle(
                scope.get("query_string", b""),
                headers.get(b"content-type", b"").decode("latin-1"),
                body,
            )
            await _reply(send, status, payload, extra)
        elif path == "/metrics" and method == "GET":
            if self.counts is not None:
                text = self.counts.exposition()
            else:
                text = self.features.metrics.exposition().encode()
            await _reply(send, 200, text, [(b"content-type", b"text/plain; version=0.0.4")])
        elif path == "/healthz" and method == "GET":  # which worker answered, in a header
            await _reply(send, 200, b"ok\n", [(b"solaris-worker", str(os.getpid()).encode())])
        else:
            await _reply(
                send,
                404,
                b"not found: POST /v1/features, POST /v1/requests, GET /metrics, GET /healthz\n",
            )

    def answer(self, query: bytes, content_type: str, body: bytes) -> tuple[int, _Headers, bytes]:
        """``(HTTP status, extra headers, body)`` of one feature request."""
        from solaris.serving.client import FetchArgumentError

        try:
            user, items, now = decode_request(query, content_type, body)
            out, statuses, outcome = self.features.fetch_with_statuses(user, items, now)
        except RequestError as exc:
            return exc.status, [], f"{exc}\n".encode()
        except FetchArgumentError as exc:
            return 400, [], f"{exc}\n".encode()
        payload = encode_response(np.asarray(items, np.int64), out, statuses)
        return 200, [(b"content-type", ARROW_STREAM.encode()), (b"solaris-fetch", outcome)], payload

    def log(self, query: bytes, content_type: str, body: bytes) -> tuple[int, _Headers, bytes]:
        """``(HTTP status, extra headers, body)`` of one request to log: ``202`` once
        :meth:`SolarisFeatures.log_request` has checked and queued it (the write happens
        off the request path; a dropped one is counted, never answered), ``400``/``415``
        with what is wrong, and then nothing is written."""
        from solaris.serving.client import FetchArgumentError

        try:
            request_id, user, items, scores, now = decode_logged_request(query, content_type, body)
            self.features.log_request(request_id, user, items, scores, now)
        except RequestError as exc:
            return exc.status, [], f"{exc}\n".encode()
        except FetchArgumentError as exc:
            return 400, [], f"{exc}\n".encode()
        return 202, [], b""

    async def _lifespan(self, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                self.features.warm_up()
                if self.counts is not None:
                    self.counts.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self.counts is not None:
                    self.counts.stop()
                self.features.close()
                await send({"type": "lifespan.shutdown.complete"})
                return


async def _body(receive: Any) -> bytes | None:
    """The request body (None: over the size limit); ``TimeoutError`` when a part of it
    takes more than :data:`_BODY_TIMEOUT_S` to arrive."""
    parts, size = [], 0
    while True:
        async with asyncio.timeout(_BODY_TIMEOUT_S):  # a timer, not a task per part
            message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > _MAX_BODY:
            return None
        parts.append(chunk)
        if not message.get("more_body"):
            return b"".join(parts)


async def _reply(send: Any, status: int, body: bytes, headers: _Headers | None = None) -> None:
    head = [(b"content-length", str(len(body)).encode())]
    if not any(k == b"content-type" for k, _ in headers or []):
        head.append((b"content-type", b"text/plain; charset=utf-8"))
    await send({"type": "http.response.start", "status": status, "headers": head + (headers or [])})
    await send({"type": "http.response.body", "body": body})


def _features_of(settings: ServeSettings) -> SolarisFeatures:
    from solaris.config import SolarisConfig
    from solaris.serving.client import SolarisFeatures

    cfg = SolarisConfig.model_validate_json(settings.config_json)
    return SolarisFeatures(cfg, redis=settings.redis, fm_version=settings.fm_version)


def app_from_environment() -> FeatureApp:
    """The application of one worker process (uvicorn's factory), from the settings
    ``solaris serve`` left in the environment."""
    settings = ServeSettings.from_env()
    folder = Path(settings.metrics_dir) if settings.metrics_dir else None
    return FeatureApp(_features_of(settings), folder, settings.token_sha256)


def _listener(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` with ``SO_REUSEPORT``: every worker listens on one of
    its own, and the kernel spreads new connections over them (a shared socket lets the
    first idle worker's event loop accept every pending connection at once)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def check_port(host: str, port: int) -> int:
    """``port`` (a free one for 0) if nothing listens on ``host:port``, else a
    :class:`SolarisError` in one line. Bound without ``SO_REUSEPORT``: the workers' sockets
    share the port with each other, and this makes sure with nothing else (another
    ``solaris serve`` would silently take half the connections)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise SolarisError(
                f"cannot listen on {host}:{port}: {exc.strerror or exc} (is another server on "
                "it? choose another --port)"
            ) from None
        return int(probe.getsockname()[1])


def _late_head_answer(limit_s: float) -> bytes:
    body = f"the request line and headers did not arrive within {limit_s:g} s\n".encode()
    return (
        b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
        b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body)
    )


def _headers_in_time(limit_s: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP/1.1 protocol (httptools) with a time limit on each request's head.

    uvicorn bounds the time between requests (keep-alive) but not the time a request line
    and its headers take to arrive: a client that trickles them, or opens a connection and
    sends nothing, holds the connection (and a place under ``--max-connections``) for good.
    Here the head must be complete within ``limit_s`` of the connection opening (its first
    request) or of the request's first byte (the next ones); the timer stops when the
    request reaches the application, which bounds its body itself (``_BODY_TIMEOUT_S``).
    A late head is answered ``408`` and the connection closed; a connection that sent
    nothing is closed without an answer."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    late = _late_head_answer(limit_s)

    class HeadersInTime(HttpToolsProtocol):
        _head_timer: asyncio.TimerHandle | None = None
        _head_begun = False  # a byte of the awaited request arrived

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)  # type: ignore[arg-type]
            self._head_timer = self.loop.call_later(limit_s, self._head_late)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._head_begun = True
            if self._head_timer is None:  # a later request: its own time from its first byte
                self._head_timer = self.loop.call_later(limit_s, self._head_late)

        def on_headers_complete(self) -> None:
            self._stop_head_timer()
            super().on_headers_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_head_timer()
            super().connection_lost(exc)

        def _stop_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            self._head_begun = False

        def _head_late(self) -> None:
            self._head_timer = None
            if self.transport.is_closing():
                return
            answering = self.cycle is not None and not self.cycle.response_complete
            if self._head_begun and not answering:  # never inside an answer still going out
                self.transport.write(late)
            self.transport.close()

    return HeadersInTime


def _serve_one(host: str, port: int, environment: str) -> None:
    """One worker process: its own listening socket, one uvicorn server until SIGTERM."""
    import uvicorn

    os.environ[_SETTINGS_ENV] = environment
    settings = ServeSettings.from_env()
    config = uvicorn.Config(
        "solaris.serving.http:app_from_environment",
        factory=True,
        log_level="warning",
        access_log=False,
        lifespan="on",
        http=_headers_in_time(settings.header_timeout_s),
        limit_concurrency=settings.max_connections,
        timeout_keep_alive=int(_KEEP_ALIVE_S),
    )
    sock = _listener(host, port)
    # uvicorn stops gracefully on SIGINT/SIGTERM and then raises the signal again, to exit
    # by it; handled here, that returns, and a stop asked for is a clean exit (0).
    for stop in (signal.SIGINT, signal.SIGTERM):
        signal.signal(stop, lambda *_: None)
    uvicorn.Server(config).run(sockets=[sock])


def run(
    cfg: SolarisConfig,
    *,
    redis: str | RedisTarget,
    fm_version: str,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    workers: int = 1,
    metrics_dir: Path | None = None,
    token: str | None = None,
    allow_unauthenticated: bool = False,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    header_timeout_s: float = DEFAULT_HEADER_TIMEOUT_S,
    on_listening: Callable[[int], None] | None = None,
) -> None:
    """Serve until SIGINT or SIGTERM: ``workers`` processes on ``host:port`` (loopback by
    default), each on a ``SO_REUSEPORT`` socket of its own; a worker that dies is started
    again. The metric counts of several workers meet in ``metrics_dir`` (a fresh temporary
    folder when not given; its earlier files are removed first).

    ``token``: the bearer token ``/v1/features``, ``/v1/requests`` and ``/metrics`` require
    (``/healthz`` stays open); a ``host`` other than the loopback is refused without one unless
    ``allow_unauthenticated``. A request's line and headers must arrive within
    ``header_timeout_s`` (``_headers_in_time``). A taken port is a one-line
    :class:`SolarisError`, before anything starts; ``on_listening`` is called with the port
    once it is known free."""
    import multiprocessing
    import tempfile

    if workers < 1:
        raise SolarisError(f"workers must be >= 1, got {workers}")
    if not (math.isfinite(header_timeout_s) and header_timeout_s > 0):
        raise SolarisError(
            f"header_timeout_s must be a finite number of seconds > 0, got {header_timeout_s!r}"
        )
    if token is not None and not token.strip():
        raise SolarisError("the bearer token is empty")
    if not is_loopback(host) and token is None and not allow_unauthenticated:
        raise SolarisError(
            f"--host {host} would serve every user's features to the network without a "
            "token: set SOLARIS_SERVE_TOKEN or --token-file, or pass --allow-unauthenticated"
        )
    port = check_port(host, port)
    if on_listening is not None:
        on_listening(port)
    if workers > 1 and metrics_dir is None:
        metrics_dir = Path(tempfile.mkdtemp(prefix="solaris-serve-metrics-"))
    if metrics_dir is not None:
        metrics_dir.mkdir(parents=True, exist_ok=True)
        for old in metrics_dir.glob("*.json"):
            old.unlink()
    connection = RedisTarget.of(redis).connection_string
    environment = ServeSettings(
        cfg.model_dump_json(),
        connection,
        fm_version,
        str(metrics_dir) if metrics_dir else None,
        token_digest(token.strip()) if token is not None else None,
        max_connections,
        header_timeout_s,
    ).to_env()
    if workers == 1:
        _serve_one(host, port, environment)
        return
    # The port is held (bound, never listening: no connection waits on it) while workers
    # come and go, and port 0 becomes one port for all of them.
    holder = _listener(host, port)
    port = holder.getsockname()[1]
    spawn = multiprocessing.get_context("spawn")
    stopping = threading.Event()

    def start() -> multiprocessing.process.BaseProcess:
        worker = spawn.Process(
            target=_serve_one, args=(host, port, environment), name="solaris-serve-worker"
        )
        worker.start()
        return worker

    def stop(*_: object) -> None:
        stopping.set()

    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    running = [start() for _ in range(workers)]
    started = [time.monotonic()] * workers
    early = 0  # workers in a row that died within _EARLY_EXIT_S of their start
    try:
        while not stopping.wait(0.5):
            for k, worker in enumerate(running):
                if worker.is_alive():
                    continue
                early = early + 1 if time.monotonic() - started[k] < _EARLY_EXIT_S else 0
                if early >= _EARLY_EXITS:
                    raise SolarisError(
                        f"{early} workers in a row exited within {_EARLY_EXIT_S:.0f} s of their "
                        f"start (the last with {worker.exitcode}): see their errors above"
                    )
                log.warning(
                    "worker %s exited with %s: starting another", worker.pid, worker.exitcode
                )
                running[k], started[k] = start(), time.monotonic()
    finally:
        for worker in running:
            if worker.is_alive():
                os.kill(worker.pid, signal.SIGTERM)
        for worker in running:
            worker.join(timeout=30)
            if worker.is_alive():
                worker.kill()
                worker.join()
        holder.close()
        for s, handler in previous.items():
            signal.signal(s, handler)
