"""Section 3: online writes against the raw floors."""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa

from bench.feature_store.context import (
    KEYS_PER_PIPELINE,
    WRITE_ITEMS_PER_USER,
    WRITE_USER0,
    Bench,
    _stamp,
    pair_input,
    say,
    solaris_pair_keys,
    stock_pair_frame,
    verdict,
)
from bench.feature_store.fetch import FLOOR, Args, pipeline_bytes
from solaris.store import keys
from solaris.store.codec import encode_records, normalize
from solaris.store.contract import EVENT_TS, PAIR, ViewParams

if TYPE_CHECKING:
    import redis as redis_py


# --------------------------------------------------------------------------------------------
# 3. Online writes
# --------------------------------------------------------------------------------------------


@dataclass
class WriteData:
    """``rows`` pair rows: ``rows / 50`` users × 50 distinct items, in shuffled order."""

    users: np.ndarray
    items: np.ndarray
    z: np.ndarray

    @property
    def rows(self) -> int:
        return len(self.users)


def write_data(rows: int, d: int, seed: int) -> WriteData:
    rng = np.random.default_rng(seed + 1)
    k = np.arange(rows)
    users = WRITE_USER0 + k // WRITE_ITEMS_PER_USER
    items = 1 + (k % WRITE_ITEMS_PER_USER) * 1_000 + rng.integers(0, 1_000, rows)
    order = rng.permutation(rows)
    z = rng.standard_normal((rows, d)).astype(np.float32)
    return WriteData(users[order].astype(np.int64), items[order].astype(np.int64), z)


def generic_frame(w: WriteData, event_s: int) -> pd.DataFrame:
    """Input of ``write_to_online_store`` on the SOLARIS store (``z`` as float arrays)."""
    return pd.DataFrame(
        {
            "user_id": w.users,
            "item_id": w.items,
            "z": list(w.z),
            **_stamp(w.rows, event_s),  # Feast wants every feature, computed_at too
        }
    )


@dataclass(frozen=True)
class KeyWrite:
    """One user key of a raw write: its ``HSET`` arguments (field, record, ...; one list per
    ``write_fields_per_command`` rows) and the newest event time written to it (us)."""

    key: str
    hsets: list[list[bytes]]
    newest_us: int


RawBatch = list[KeyWrite]  # the keys of one pipeline


def raw_batches(
    w: WriteData, event_s: int, project: str, params: ViewParams, per_command: int
) -> list[RawBatch]:
    """Pre-encoded records (``codec.encode_records``) with their 8-byte fields, grouped by
    user key as the store groups them (rows sorted by user, stable), ``KEYS_PER_PIPELINE``
    keys per pipeline."""
    rows = normalize(PAIR, params, pair_input(w.users, w.items, w.z, event_s))
    records = encode_records(PAIR, params, rows)
    assert PAIR.partition is not None and PAIR.member is not None
    users = rows[PAIR.partition.join_key].combine_chunks().to_numpy()
    order = np.argsort(users, kind="stable")
    users = users[order]
    bounds = np.flatnonzero(np.r_[True, users[1:] != users[:-1], True])
    members = rows[PAIR.member.join_key].combine_chunks().to_numpy()[order]
    fields = keys.member_fields(members).tolist()
    ordered = [records[i] for i in order.tolist()]
    event_us = rows[EVENT_TS].combine_chunks().cast(pa.int64()).to_numpy()[order]
    newest = np.maximum.reduceat(event_us, bounds[:-1]).tolist()
    prefix = keys.view_key(project, PAIR)
    writes: list[KeyWrite] = []
    for (lo, hi), top in zip(itertools.pairwise(bounds.tolist()), newest, strict=True):
        hsets = []
        for start in range(lo, hi, per_command):
            stop = min(start + per_command, hi)
            args: list[bytes] = [b""] * (2 * (stop - start))
            args[0::2] = fields[start:stop]
            args[1::2] = ordered[start:stop]
            hsets.append(args)
        key = keys.partition_key(prefix, PAIR, int(users[lo]))
        writes.append(KeyWrite(key, hsets, int(top)))
    return [writes[i : i + KEYS_PER_PIPELINE] for i in range(0, len(writes), KEYS_PER_PIPELINE)]


def write_args(batch: RawBatch, retention_ms: int, store: bool) -> list[Args]:
    """The commands of one pipeline: per key its ``HSET``s, then ``PEXPIRE`` (the floor) or,
    with ``store``, the store's transaction per key (``MULTI``, the ``HSET``s, ``HSETNX key
    "" newest_us``, ``PEXPIRE``, ``HGET key ""``, ``EXEC``)."""
    out: list[Args] = []
    for write in batch:
        hsets = [("HSET", write.key, *args) for args in write.hsets]
        if not store:
            out.extend([*hsets, ("PEXPIRE", write.key, retention_ms)])
            continue
        out.extend(
            [
                ("MULTI",),
                *hsets,
                ("HSETNX", write.key, b"", write.newest_us),
                ("PEXPIRE", write.key, retention_ms),
                ("HGET", write.key, b""),
                ("EXEC",),
            ]
        )
    return out


def raw_write(
    client: redis_py.Redis, batches: list[RawBatch], retention_ms: int, store: bool
) -> None:
    for batch in batches:
        pipe = client.pipeline(transaction=False)
        for command in write_args(batch, retention_ms, store):
            pipe.execute_command(*command)
        pipe.execute()


Writer = Callable[[int], float]  # event time (s) -> seconds of the timed part
TOUCH = "raw + transaction (store's commands)"


def write_variants(b: Bench, w: WriteData) -> dict[str, Writer]:
    """Each variant builds its input for one event time untimed, then times the write."""
    fv = b.store.get_feature_view("pair")
    params = b.pair_params
    per_command = b.store.config.online_store.write_fields_per_command
    retention_ms = params.retention_s * 1000

    def bulk(event_s: int) -> float:
        table = pair_input(w.users, w.items, w.z, event_s)
        t0 = time.perf_counter()
        b.online.write_table(b.store.config, fv, table)
        return time.perf_counter() - t0

    def feast_generic(event_s: int) -> float:
        frame = generic_frame(w, event_s)
        t0 = time.perf_counter()
        b.store.write_to_online_store("pair", frame)
        return time.perf_counter() - t0

    def stock(event_s: int) -> float:
        frame = stock_pair_frame(w.users, w.items, w.z, event_s)
        t0 = time.perf_counter()
        b.stock.write_to_online_store("pair", frame)
        return time.perf_counter() - t0

    def raw(event_s: int) -> float:
        batches = raw_batches(w, event_s, b.raw_project, params, per_command)
        t0 = time.perf_counter()
        raw_write(b.redis, batches, retention_ms, False)
        return time.perf_counter() - t0

    def raw_touch(event_s: int) -> float:
        batches = raw_batches(w, event_s, b.touch_project, params, per_command)
        t0 = time.perf_counter()
        raw_write(b.redis, batches, retention_ms, True)
        return time.perf_counter() - t0

    return {
        "bulk write_table": bulk,
        "feast write_to_online_store": feast_generic,
        "stock feast write_to_online_store": stock,
        FLOOR: raw,
        TOUCH: raw_touch,
    }


def check_write_commands(b: Bench, w: WriteData, event_s: int) -> int:
    """Check that ``raw + transaction`` packs to the bytes ``write_table`` sends for the rows
    (``write_commands``: one transaction per key), so the floor's ``HSET``s are the store's
    too; returns the store's command count."""
    transactions = b.online.write_commands(
        b.store.config,
        b.store.get_feature_view("pair"),
        pair_input(w.users, w.items, w.z, event_s),
    )
    if not transactions:
        raise RuntimeError("write_commands gave no transaction for the rows")
    sent = b"".join(command for transaction in transactions for command in transaction)
    params = b.pair_params
    per_command = b.store.config.online_store.write_fields_per_command
    batches = raw_batches(w, event_s, b.project, params, per_command)
    args = [a for batch in batches for a in write_args(batch, params.retention_s * 1000, True)]
    if pipeline_bytes(b.redis, args) != sent:
        raise RuntimeError("raw + transaction: its commands differ from what write_table sends")
    return sum(len(transaction) for transaction in transactions)


def check_writes(b: Bench, w: WriteData) -> None:
    """The bulk path and the raw variants left the same records for a sample user, each
    key with an expiry, and a prune marker where the touch script ran."""
    user = int(w.users[0])
    fields = keys.member_fields(np.sort(w.items[w.users == user])).tolist()
    sol_key = solaris_pair_keys(b.project, [user])[0]
    sol = b.redis.hmget(sol_key, fields)
    if None in sol:
        b.notes.append("writes: the bulk path's records are missing")
    for project, marker in ((b.raw_project, False), (b.touch_project, True)):
        key = solaris_pair_keys(project, [user])[0]
        if sol != b.redis.hmget(key, fields):
            b.notes.append(f"writes: the bulk path's records differ from {project}'s")
        if b.redis.pttl(key) <= 0:
            b.notes.append(f"writes: {project}'s key has no expiry")
        if b.redis.hexists(key, b"") != marker:
            b.notes.append(f"writes: {project}'s prune marker is not as expected")
    if b.redis.pttl(sol_key) <= 0 or not b.redis.hexists(sol_key, b""):
        b.notes.append("writes: the bulk path's key lacks its expiry or prune marker")


def bench_writes(b: Bench, rows: int, reps: int, seed: int) -> dict:
    """Median rows/s of interleaved rounds (after one untimed round that creates the keys)."""
    w = write_data(rows, b.d, seed)
    variants = write_variants(b, w)
    clock = iter(range(b.now - 3_600, b.now))  # every write newer than the last
    store_commands_sent = check_write_commands(b, w, next(clock))
    for writer in variants.values():
        writer(next(clock))
    seconds: dict[str, list[float]] = {k: [] for k in variants}
    rng = random.Random(seed)
    order = list(variants)
    for _ in range(reps):
        rng.shuffle(order)
        for name in order:
            seconds[name].append(variants[name](next(clock)))
    # The last rounds differ in event time: rewrite alike, then compare the records.
    same = next(clock)
    for name in ("bulk write_table", FLOOR, TOUCH):
        variants[name](same)
    check_writes(b, w)

    raw_rps = rows / float(np.median(seconds[FLOOR]))
    users = rows // WRITE_ITEMS_PER_USER
    say(
        f"\n3. Online writes: {rows:,} pair rows ({users:,} users x "
        f"{WRITE_ITEMS_PER_USER}, shuffled), median of {reps} interleaved rounds"
    )
    say(
        f"   set-up check: write_table sent {store_commands_sent:,} commands "
        "(one MULTI ... EXEC per key), byte-equal to raw + transaction's"
    )
    out: dict[str, Any] = {"rows": rows, "variants": {}}
    for name, s in seconds.items():
        rps = rows / float(np.median(s))
        out["variants"][name] = {"rows_per_s": rps, "seconds": s}
        say(f"   {name:<36} {rps:12,.0f} rows/s  {rps / raw_rps:7.1%} of raw")
    bulk = out["variants"]["bulk write_table"]["rows_per_s"]
    ratio = bulk / raw_rps
    out["bulk_over_raw"] = ratio
    out["bulk_over_raw_touch"] = bulk / out["variants"][TOUCH]["rows_per_s"]
    say(f"   bulk/raw {ratio:.2f}x (target >= 0.6: {verdict(ratio, 0.6, at_most=False)})")
    say(
        "   raw = HSET key <8-byte field, record>... + PEXPIRE per user key, records "
        "pre-encoded, 1,000 keys per redis-py pipeline; raw + transaction = the store's "
        f"MULTI/HSET/HSETNX/PEXPIRE/HGET/EXEC per key (bulk/it {out['bulk_over_raw_touch']:.2f}x)"
    )
    return out
