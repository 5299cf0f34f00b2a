"""Section 1: fetch latency of the client, Feast, stock Feast and the floors (1b, 1c too)."""

from __future__ import annotations

import gc
import random
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import hiredis
import numpy as np

from bench.feature_store.context import (
    FM_VERSION,
    Bench,
    RequestData,
    as_text,
    hash_settings,
    open_solaris_project,
    percentile,
    say,
    share_registry,
    verdict,
    write_request,
)
from solaris.config import SolarisConfig
from solaris.connection import RedisTarget, redis_client
from solaris.serving.client import SolarisFeatures
from solaris.store import keys
from solaris.store.codec import decode_records, f16_round
from solaris.store.contract import FEATURE_SERVICE, PAIR, SERVING_VIEWS
from solaris.store.feast_store import (
    online_store_of,
)
from solaris.store.local_redis import embedded_redis

if TYPE_CHECKING:
    import redis as redis_py
    from feast import FeatureStore


# --------------------------------------------------------------------------------------------
# 1. Fetch latency
# --------------------------------------------------------------------------------------------

Command = tuple[bytes, str, np.ndarray | None]  # (command, key, member ids): _pack's input
Args = tuple[Any, ...]  # one command's arguments for redis-py's execute_command
Fetch = Callable[[], Any]

FLOOR = "raw pipeline (floor)"
WIRE = "wire (raw socket + hiredis)"


def read_commands(project: str, data: RequestData) -> list[Command]:
    """The commands the store sends for the request: one per serving view, in service
    order; the item ids are one array shared by the three HMGETs, as in the store (so
    ``_pack`` frames their fields once)."""
    out: list[Command] = []
    for spec in SERVING_VIEWS:
        prefix = keys.view_key(project, spec)
        key = keys.partition_key(prefix, spec, data.user) if spec.partition else prefix
        if spec.member is None:
            out.append((b"GET", key, None))
        else:
            out.append((b"HMGET", key, data.items))
    return out


def command_args(commands: Sequence[Command]) -> list[Args]:
    """redis-py arguments of ``commands``: each member id as its 8-byte hash field."""
    return [
        (command, key) if members is None else (command, key, *keys.member_fields(members).tolist())
        for command, key, members in commands
    ]


def store_commands(store: FeatureStore, data: RequestData) -> list[bytes]:
    """What the store's request path sends for the request, one packed command per view
    (``SolarisOnlineStore.request_commands``)."""
    packed = online_store_of(store).request_commands(
        store.config,
        store.registry,
        store.project,
        store.get_feature_service(FEATURE_SERVICE),
        data.user,
        data.items,
    )
    if packed is None:
        raise RuntimeError("the store would not take its request path for the request")
    return packed


def pipeline_bytes(client: redis_py.Redis, args: Sequence[Args]) -> bytes:
    """The bytes a redis-py pipeline sends for ``args`` (its connection's own packer)."""
    pool = client.connection_pool
    conn = pool.get_connection()
    try:
        return b"".join(bytes(chunk) for chunk in conn.pack_commands(args))
    finally:
        pool.release(conn)


def checked_commands(
    client: redis_py.Redis, store: FeatureStore, project: str, data: RequestData
) -> tuple[list[Command], list[bytes]]:
    """The raw variants' commands and the store's own bytes for them, after checking that
    they are the same request: redis-py's pipeline packs the raw commands to the bytes the
    store's request path sends."""
    commands = read_commands(project, data)
    packed = store_commands(store, data)
    if pipeline_bytes(client, command_args(commands)) != b"".join(packed):
        raise RuntimeError("redis-py packs the raw commands to other bytes than the store's")
    return commands, packed


def entity_rows(data: RequestData) -> dict[str, list[int]]:
    items = data.items.tolist()
    return {"user_id": [data.user] * len(items), "item_id": items}


def open_client(cfg: SolarisConfig, redis_url: str) -> SolarisFeatures:
    """A ``SolarisFeatures`` that opens its own store (``store=None``), warmed up."""
    client = SolarisFeatures(cfg, redis=redis_url, fm_version=FM_VERSION)
    client.warm_up()
    return client


def client_fetch(data: RequestData, now: int, client: SolarisFeatures) -> Fetch:
    user, items = data.user, data.items.copy()
    return lambda: client.fetch(user, items, now=now)


def feast_fetch(store: FeatureStore, rows: dict[str, list[int]], *, to_dict: bool) -> Fetch:
    """One ``get_online_features`` through the serving FeatureService."""
    service = store.get_feature_service(FEATURE_SERVICE)

    def fetch() -> Any:
        response = store.get_online_features(
            features=service, entity_rows=rows, full_feature_names=True
        )
        return response.to_dict() if to_dict else response

    return fetch


def raw_pipeline(client: redis_py.Redis, args: Sequence[Args]) -> Fetch:
    """The floor: a redis-py pipeline of the store's commands (fields as 8-byte ``bytes``,
    built once), no decoding."""

    def fetch() -> list:
        pipe = client.pipeline(transaction=False)
        for command in args:
            pipe.execute_command(*command)
        return pipe.execute()

    return fetch


def raw_packed(client: redis_py.Redis, packed: Sequence[bytes]) -> Fetch:
    """The store's own bytes sent on one pooled redis-py connection, its replies read by
    redis-py's parser, no decoding: the floor without redis-py's pipeline packing."""
    payload, count = b"".join(packed), len(packed)
    pool = client.connection_pool

    def fetch() -> list:
        conn = pool.get_connection()
        try:
            conn.send_packed_command([payload], check_health=False)
            return [conn.read_response(disable_decoding=True) for _ in range(count)]
        finally:
            pool.release(conn)

    return fetch


class Wire:
    """The wire floor: the store's exact request bytes written on a plain TCP socket and
    every reply read back with hiredis until all are parsed, nothing else (no pool, no
    decoding). Plain TCP only: a TLS connection string has no such floor here."""

    def __init__(self, redis_url: str, packed: list[bytes], count: int) -> None:
        target = RedisTarget.parse(redis_url)
        if target.options.get("ssl"):
            raise RuntimeError("the wire floor needs a plain TCP connection string")
        (host, port), options = target.nodes[0], target.options
        self.sock = socket.create_connection((host, port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        hello = []
        if options.get("password"):
            user = options.get("username")
            hello.append(("AUTH", *((user,) if user else ()), options["password"]))
        hello.append(("SELECT", int(options.get("db", 0))))
        for command in hello:
            self.sock.sendall(hiredis.pack_command(command))
            if self._replies(1)[0] is False:
                raise RuntimeError(f"{command[0]} refused by the server")
        self.payload = b"".join(packed)
        self.count = count

    def _replies(self, count: int) -> list:
        reader = hiredis.Reader()
        out: list = []
        while len(out) < count:
            reply = reader.gets()
            if reply is False:
                reader.feed(self.sock.recv(1 << 20))
            else:
                out.append(reply)
        return out

    def __call__(self) -> list:
        self.sock.sendall(self.payload)
        return self._replies(self.count)

    def close(self) -> None:
        self.sock.close()


def fetch_variants(b: Bench, client: SolarisFeatures) -> dict[str, Fetch]:
    """The timed variants on the ``--redis`` server. The Feast ones use the client's own
    FeatureStore (and stock Feast its Registry object, :func:`share_registry`), as one
    serving process would."""
    commands, packed = checked_commands(b.redis, b.store, b.project, b.data)
    rows = entity_rows(b.data)
    share_registry(b.stock, client.store)
    return {
        "client": client_fetch(b.data, b.now, client),
        "feast get_online_features": feast_fetch(client.store, rows, to_dict=False),
        "feast + to_dict": feast_fetch(client.store, rows, to_dict=True),
        "stock feast + to_dict": feast_fetch(b.stock, rows, to_dict=True),
        FLOOR: raw_pipeline(b.redis, command_args(commands)),
        "raw packed": raw_packed(b.redis, packed),
        WIRE: b.wire(Wire(b.redis_url, packed, len(packed))),
    }


def check_values(b: Bench, variants: dict[str, Fetch]) -> None:
    """Every variant returns the written rows (so nobody benchmarks zeros); raises if not.
    Checks the variants present (the embedded block has no stock Feast, no ``to_dict``)."""
    n, d = b.n, b.d
    z_pair, z_item = f16_round(b.data.z_pair), b.data.z_item
    problems = []
    out = variants["client"]()
    if not (out.mask.shape == (n, 4) and out.mask.all()):
        problems.append(f"client: not every tier present ({out.counts()})")
    if not np.array_equal(out.tier_z[:, 0], z_pair):
        problems.append("client: pair z differs from what was written")
    feast: list[tuple[str, dict]] = [
        ("feast get_online_features", variants["feast get_online_features"]().to_dict())
    ]
    if "feast + to_dict" in variants:
        feast.append(("feast + to_dict", variants["feast + to_dict"]()))
    for name, cols in feast:
        if not np.array_equal(np.asarray(cols["pair__z"], np.float32), z_pair):
            problems.append(f"{name}: pair z differs")
        if not np.array_equal(np.asarray(cols["iagg__z_mean"], np.float32), z_item):
            problems.append(f"{name}: iagg z_mean differs")
        if any(v is None for v in cols["uagg__z_sum"] + cols["nbr__z_top1"]):
            problems.append(f"{name}: uagg or nbr rows missing")
    if "stock feast + to_dict" in variants:
        stock = variants["stock feast + to_dict"]()
        stock_z = np.frombuffer(b"".join(stock["pair__z"]), "<f2").reshape(n, d)
        if not np.array_equal(stock_z.astype(np.float32), z_pair):
            problems.append("stock feast: pair z differs")
        if not np.array_equal(
            np.frombuffer(b"".join(stock["iagg__z_mean"]), "<f4").reshape(n, d), z_item
        ):
            problems.append("stock feast: iagg z_mean differs")
    for name in (FLOOR, "raw packed", WIRE):
        replies = variants[name]()
        rows = decode_records(PAIR, b.pair_params, replies[0])
        if not (rows.found.all() and np.array_equal(rows.values["z"].astype(np.float32), z_pair)):
            problems.append(f"{name}: pair records differ")
        if replies[2] is None or any(v is None for v in replies[1] + replies[3]):
            problems.append(f"{name}: nbr, uagg or iagg records missing")
    if problems:
        raise RuntimeError("set-up check failed: " + "; ".join(problems))


def interleaved(
    variants: dict[str, Fetch], reps: int, warmup: int, seed: int
) -> dict[str, np.ndarray]:
    """Milliseconds per call; every repetition runs each variant once, in shuffled order."""
    for _ in range(warmup):
        for fetch in variants.values():
            fetch()
    order = list(variants)
    rng = random.Random(seed)
    times: dict[str, list[int]] = {k: [] for k in variants}
    clock = time.perf_counter_ns
    for _ in range(reps):
        rng.shuffle(order)
        for name in order:
            fetch = variants[name]
            t0 = clock()
            fetch()
            times[name].append(clock() - t0)
    return {k: np.asarray(v) / 1e6 for k, v in times.items()}


@contextmanager
def gc_counter() -> Iterator[list[int]]:
    """Garbage collections per generation while the block runs (counted, not changed)."""
    counts = [0, 0, 0]

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            counts[info["generation"]] += 1

    gc.callbacks.append(callback)
    try:
        yield counts
    finally:
        gc.callbacks.remove(callback)


def key_encodings(client: redis_py.Redis, project: str, data: RequestData) -> dict[str, str]:
    """``OBJECT ENCODING`` of the request's key of each serving view."""
    out = {}
    for spec in SERVING_VIEWS:
        prefix = keys.view_key(project, spec)
        key = keys.partition_key(prefix, spec, data.user) if spec.partition else prefix
        out[spec.name] = as_text(client.object("encoding", key))
    return out


def server_line(client: redis_py.Redis, project: str, data: RequestData) -> dict[str, Any]:
    """The server's version, small-hash limits and the request keys' encodings."""
    return {
        "redis_version": as_text(client.info("server")["redis_version"]),
        "config": hash_settings(client),
        "encodings": key_encodings(client, project, data),
    }


def say_block(title: str, server: dict[str, Any], collections: list[int]) -> None:
    """A fetch block's header: its title, the server, and the collections of its run."""
    say(title)
    say_server(server)
    gens = "/".join(map(str, collections))
    say(f"   garbage collections during the timed run (gen 0/1/2): {gens}")


def say_server(server: dict[str, Any]) -> None:
    config = ", ".join(f"{k} {v}" for k, v in server["config"].items())
    encodings = ", ".join(f"{k} {v}" for k, v in server["encodings"].items())
    say(f"   redis {server['redis_version']}; CONFIG GET: {config}")
    say(f"   encodings of the request's keys: {encodings}")


def latency_table(times: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """Print p50/p99/mean per variant and its p50 over the floor's; returns the figures."""
    f50 = percentile(times[FLOOR], 50)
    say(f"   {'variant':<28} {'p50 ms':>8} {'p99 ms':>8} {'mean ms':>8} {'/floor p50':>11}")
    out = {}
    for name, t in times.items():
        p50, p99 = percentile(t, 50), percentile(t, 99)
        out[name] = {"p50_ms": p50, "p99_ms": p99, "mean_ms": float(t.mean())}
        say(f"   {name:<28} {p50:8.3f} {p99:8.3f} {t.mean():8.3f} {p50 / f50:10.2f}x")
    return out


def floor_ratios(times: dict[str, np.ndarray]) -> dict[str, float]:
    """client/floor at p50 and p99 (printed with the targets) and raw packed/floor."""
    ratios = {
        "client_over_floor_p50": percentile(times["client"], 50) / percentile(times[FLOOR], 50),
        "client_over_floor_p99": percentile(times["client"], 99) / percentile(times[FLOOR], 99),
        "packed_over_floor_p50": percentile(times["raw packed"], 50) / percentile(times[FLOOR], 50),
    }
    say(
        f"   client/floor    p50 {ratios['client_over_floor_p50']:6.2f}x  (target <= 2: "
        f"{verdict(ratios['client_over_floor_p50'], 2, at_most=True)})"
    )
    say(
        f"   client/floor    p99 {ratios['client_over_floor_p99']:6.2f}x  (target <= 3: "
        f"{verdict(ratios['client_over_floor_p99'], 3, at_most=True)})"
    )
    if WIRE in times:
        ratios["client_over_wire_p50"] = percentile(times["client"], 50) / percentile(
            times[WIRE], 50
        )
        ratios["client_over_wire_p99"] = percentile(times["client"], 99) / percentile(
            times[WIRE], 99
        )
        say(
            f"   client/wire     p50 {ratios['client_over_wire_p50']:6.2f}x  (target <= 2: "
            f"{verdict(ratios['client_over_wire_p50'], 2, at_most=True)})"
        )
        say(
            f"   client/wire     p99 {ratios['client_over_wire_p99']:6.2f}x  (target <= 2.5: "
            f"{verdict(ratios['client_over_wire_p99'], 2.5, at_most=True)})"
        )
    return ratios


def report_fetch(
    b: Bench,
    times: dict[str, np.ndarray],
    stats: dict[str, int],
    collections: list[int],
    server: dict[str, Any],
) -> dict:
    say_block(
        f"\n1. Fetch latency: one user x N={b.n} candidates, d={b.d}, all four views present; "
        f"{len(times['client'])} interleaved reps per variant; the --redis server",
        server,
        collections,
    )
    out: dict[str, Any] = {"server": server, "variants": latency_table(times)}
    ratios = floor_ratios(times)
    c50, c99 = percentile(times["client"], 50), percentile(times["client"], 99)
    s50, s99 = (
        percentile(times["stock feast + to_dict"], 50),
        percentile(times["stock feast + to_dict"], 99),
    )
    ratios["stock_over_client_p50"] = s50 / c50
    ratios["stock_over_client_p99"] = s99 / c99
    worst = min(ratios["stock_over_client_p50"], ratios["stock_over_client_p99"])
    say(
        f"   stock/client    p50 {ratios['stock_over_client_p50']:6.1f}x, "
        f"p99 {ratios['stock_over_client_p99']:6.1f}x  (target >= 20: "
        f"{verdict(worst, 20, at_most=False)})"
    )
    say(
        f"   raw packed/floor p50 {ratios['packed_over_floor_p50']:5.2f}x  (the floor's share "
        "that is redis-py's pipeline packing)"
    )
    say(f"   client stats after the run: {stats}")
    out["ratios"] = ratios
    out["client_stats"] = stats
    out["gc_collections"] = collections
    return out


def fetch_embedded(b: Bench, reps: int, warmup: int, seed: int, main: dict) -> dict:
    """Section 1's second block: the client, Feast and the raw floors on a private
    ``embedded_redis()`` (``keys.SERVER_SETTINGS``), in a project of its own there."""
    project = f"bemb{b.tag}"
    with embedded_redis() as url:
        raw = redis_client(url, timeout_s=30.0)
        client = None
        try:
            cfg, store = open_solaris_project(b.tmp, project, url, b.d)
            write_request(store, b.data)
            client = open_client(cfg, url)
            commands, packed = checked_commands(raw, store, project, b.data)
            variants = {
                "client": client_fetch(b.data, b.now, client),
                "feast get_online_features": feast_fetch(
                    client.store, entity_rows(b.data), to_dict=False
                ),
                FLOOR: raw_pipeline(raw, command_args(commands)),
                "raw packed": raw_packed(raw, packed),
                WIRE: b.wire(Wire(url, packed, len(packed))),
            }
            check_values(b, variants)
            with gc_counter() as collections:
                times = interleaved(variants, reps, warmup, seed + 2)
            stats = client.stats.as_dict()
            server = server_line(raw, project, b.data)
        finally:
            if client is not None:
                client.close()
            raw.close()
    say_block(
        f"\n1, second block: the same request on a private embedded_redis() with "
        f"keys.SERVER_SETTINGS (project {project}); {reps} interleaved reps per variant",
        server,
        collections,
    )
    out: dict[str, Any] = {"server": server, "variants": latency_table(times)}
    ratios = floor_ratios(times)
    for label, name in (("client", "client"), ("raw", FLOOR)):
        ratios[f"{label}_over_main_block_p50"] = (
            out["variants"][name]["p50_ms"] / main["variants"][name]["p50_ms"]
        )
    say(
        f"   p50 here / on the --redis server: client {ratios['client_over_main_block_p50']:.2f}x,"
        f" raw pipeline {ratios['raw_over_main_block_p50']:.2f}x"
    )
    say(f"   client stats after the run: {stats}")
    out["ratios"] = ratios
    out["client_stats"] = stats
    out["gc_collections"] = collections
    return out


def client_and_wire(b: Bench, variants: dict[str, Fetch], reps: int, warmup: int, seed: int):
    """Section 1c: the client against the wire floor and redis-py's, interleaved with each
    other only. In section 1 every client call follows calls of the other variants (stock
    Feast's take 40-60x as long and allocate heavily), which leave the caches and the
    allocator to the next call; a serving process runs fetches back to back."""
    chosen = {name: variants[name] for name in ("client", FLOOR, "raw packed", WIRE)}
    with gc_counter() as collections:
        times = interleaved(chosen, reps, warmup, seed + 3)
    say(
        f"\n1c. The client against the wire only: {reps} interleaved reps of client, the "
        "redis-py floor, raw packed and the wire floor"
    )
    gcs = "/".join(map(str, collections))
    say(f"   garbage collections during the timed run (gen 0/1/2): {gcs}")
    table = latency_table(times)
    ratios = floor_ratios(times)
    return {"variants": table, "ratios": ratios, "gc_collections": collections}


def two_registries(b: Bench, client: SolarisFeatures, reps: int, seed: int) -> dict:
    """Section 1b: does a call on a second FeatureStore (its own Registry object) in the same
    process slow the client's next fetch? Each repetition times the client's fetch right
    after ``get_online_features`` on the second store and right after the same call on the
    client's own store, in shuffled order (the preceding calls are timed separately)."""
    rows = entity_rows(b.data)
    before = {
        "second store": feast_fetch(b.store, rows, to_dict=False),
        "own store": feast_fetch(client.store, rows, to_dict=False),
    }
    fetch = client_fetch(b.data, b.now, client)
    for _ in range(min(reps, 20)):
        for call in before.values():
            call()
            fetch()
    after: dict[str, list[int]] = {k: [] for k in before}
    calls: dict[str, list[int]] = {k: [] for k in before}
    order = list(before)
    rng = random.Random(seed + 1)
    clock = time.perf_counter_ns
    for _ in range(reps):
        rng.shuffle(order)
        for name in order:
            t0 = clock()
            before[name]()
            t1 = clock()
            fetch()
            t2 = clock()
            calls[name].append(t1 - t0)
            after[name].append(t2 - t1)
    ms = {k: np.asarray(v) / 1e6 for k, v in after.items()}
    pre = {k: np.asarray(v) / 1e6 for k, v in calls.items()}
    out: dict[str, Any] = {"reps": reps}
    for name in before:
        key = name.replace(" ", "_")
        out[f"client_after_{key}_p50_ms"] = percentile(ms[name], 50)
        out[f"client_after_{key}_p99_ms"] = percentile(ms[name], 99)
        out[f"{key}_call_p50_ms"] = percentile(pre[name], 50)
    out["penalty_p50"] = (
        out["client_after_second_store_p50_ms"] / out["client_after_own_store_p50_ms"]
    )
    out["penalty_p99"] = (
        out["client_after_second_store_p99_ms"] / out["client_after_own_store_p99_ms"]
    )
    say(
        f"\n1b. Two registries: the client's fetch right after get_online_features on a second "
        f"FeatureStore (another Registry object) vs right after the same call on its own store, "
        f"{reps} reps each, shuffled"
    )
    for name in before:
        key = name.replace(" ", "_")
        say(
            f"    client after the {name + ':':<14} p50 "
            f"{out[f'client_after_{key}_p50_ms']:.3f} ms, p99 "
            f"{out[f'client_after_{key}_p99_ms']:.3f} ms  (the {name}'s call itself: p50 "
            f"{out[f'{key}_call_p50_ms']:.3f} ms)"
        )
    say(
        f"    second/own: p50 {out['penalty_p50']:.2f}x, p99 {out['penalty_p99']:.2f}x (the "
        "store caches its plan per Registry object and load time; Feast's process-wide "
        "resolution cache, one registry, is consulted only on a miss)"
    )
    return out
