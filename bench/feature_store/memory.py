"""Section 4: Redis bytes per cached pair."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bench.feature_store.context import (
    FM_VERSION,
    MEMORY_USER0,
    Bench,
    as_text,
    bench_config,
    hash_settings,
    pair_input,
    say,
    stock_keys,
    stock_pair_frame,
    verdict,
)
from solaris.connection import redis_client
from solaris.store.codec import encode_records, normalize
from solaris.store.contract import PAIR
from solaris.store.feast_store import (
    repo_config_dict,
)
from solaris.store.footprint import view_footprint
from solaris.store.local_redis import embedded_redis
from solaris.store.online import SolarisOnlineStore

if TYPE_CHECKING:
    import redis as redis_py
    from feast.repo_config import RepoConfig


# --------------------------------------------------------------------------------------------
# 4. Redis bytes per cached pair
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Population:
    label: str
    user0: int
    users: int
    per_user: int

    @property
    def pairs(self) -> int:
        return self.users * self.per_user

    def rows(self, d: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
        k = np.arange(self.pairs)
        users = self.user0 + k // self.per_user
        items = 1 + (k % self.per_user) * 97 + rng.integers(0, 97, self.pairs)
        z = rng.standard_normal((self.pairs, d)).astype(np.float32)
        return users.astype(np.int64), items.astype(np.int64), z


def populations(memory_users: int) -> list[Population]:
    return [
        Population("1 user x 300 (the request)", MEMORY_USER0, 1, 300),
        Population(f"{memory_users:,} users x 50", MEMORY_USER0 + 10_000, memory_users, 50),
        Population(f"{memory_users:,} users x 120", MEMORY_USER0 + 20_000, memory_users, 120),
    ]


def memory_of(
    client: redis_py.Redis, key_list: Sequence[str | bytes]
) -> tuple[int, dict[str, int]]:
    """(sum of MEMORY USAGE SAMPLES 0, key count per OBJECT ENCODING) of plain keys."""
    usage = 0
    encodings: dict[str, int] = {}
    for start in range(0, len(key_list), 1_000):
        pipe = client.pipeline(transaction=False)
        for key in key_list[start : start + 1_000]:
            pipe.memory_usage(key, samples=0)
            pipe.object("encoding", key)
        replies = pipe.execute()
        if None in replies[0::2]:
            raise RuntimeError("MEMORY USAGE: a measured key does not exist")
        usage += sum(replies[0::2])
        for encoding in replies[1::2]:
            encodings[as_text(encoding)] = encodings.get(as_text(encoding), 0) + 1
    return usage, encodings


def copy_hashes(source: redis_py.Redis, target: redis_py.Redis, key_list: Sequence[bytes]) -> None:
    pipe = source.pipeline(transaction=False)
    for key in key_list:
        pipe.hgetall(key)
    hashes = pipe.execute()
    pipe = target.pipeline(transaction=False)
    for key, mapping in zip(key_list, hashes, strict=True):
        pipe.hset(key, mapping=mapping)
    pipe.execute()


def repo_config(b: Bench, project: str, redis_url: str) -> RepoConfig:
    """Feast's ``RepoConfig`` of a bench project on ``redis_url``, built as
    ``open_feature_store`` builds it (the write path reads only its project and online-store
    settings; no registry is opened)."""
    from feast.repo_config import RepoConfig

    repo = Path(b.cfg.store.repo_path)
    config = RepoConfig(**repo_config_dict(bench_config(repo, project, redis_url, b.d), redis_url))
    config.repo_path = repo
    return config


def measure_server(
    label: str,
    client: redis_py.Redis,
    redis_url: str,
    b: Bench,
    pops: list[Population],
    stock: list[bytes],
    payload: int,
    seed: int,
    event_s: int,
) -> dict:
    """Write each population through ``SolarisOnlineStore.write_table`` in a project of its
    own on this server, and measure it with ``footprint.view_footprint``."""
    online = SolarisOnlineStore()
    fv = b.store.get_feature_view("pair")
    rng = np.random.default_rng(seed + 2)  # the same rows on every server
    out: dict[str, Any] = {
        "server": label,
        "redis_version": as_text(client.info("server")["redis_version"]),
        "config": hash_settings(client),
    }
    rows = []
    for pop, project in zip(pops, b.memory_projects, strict=True):
        users, items, z = pop.rows(b.d, rng)
        config = repo_config(b, project, redis_url)
        online.write_table(config, fv, pair_input(users, items, z, event_s))
        fp = view_footprint(client, project, PAIR)
        if (fp.keys, fp.rows) != (pop.users, pop.pairs):
            raise RuntimeError(
                f"{project}: footprint of {fp.keys} keys and {fp.rows} rows, written "
                f"{pop.users} keys and {pop.pairs} rows"
            )
        rows.append(
            {
                "label": f"SOLARIS {pop.label}",
                "project": project,
                "keys": fp.keys,
                "pairs": fp.rows,
                "bytes": fp.bytes,
                "record_bytes": fp.record_bytes,
                "bytes_per_pair": fp.bytes_per_row,
                "over_record": fp.overhead,
                "encodings": fp.encodings,
            }
        )
        online.client(config).close()
    usage, encodings = memory_of(client, stock)
    rows.append(
        {
            "label": "stock Feast 1 user x 300 (pair only)",
            "keys": len(stock),
            "pairs": len(stock),
            "bytes": usage,
            "record_bytes": None,
            "bytes_per_pair": usage / len(stock),
            "over_record": usage / len(stock) / payload,
            "encodings": encodings,
        }
    )
    out["rows"] = rows
    return out


def bench_memory(b: Bench, memory_users: int, seed: int) -> dict:
    """Section 4 on the running Redis and on a private embedded one."""
    params = b.pair_params
    sample = pair_input(np.array([1]), np.array([1]), np.zeros((1, b.d), np.float32), b.now)
    payload = len(encode_records(PAIR, params, normalize(PAIR, params, sample))[0])
    pops = populations(memory_users)
    event_s = b.now - 120

    stock_user = MEMORY_USER0
    stock_items = np.arange(1, 301, dtype=np.int64) * 97
    b.stock.write_to_online_store(
        "pair",
        stock_pair_frame(
            np.full(300, stock_user, np.int64),
            stock_items,
            np.random.default_rng(seed + 3).standard_normal((300, b.d)).astype(np.float32),
            event_s,
        ),
    )
    stock = stock_keys(b.stock_project, [stock_user] * 300, stock_items.tolist())
    if b.redis.exists(*stock) != 300:
        raise RuntimeError("stock Feast keys not where expected (serialize_entity_key changed?)")

    args = (b, pops, stock, payload, seed, event_s)
    servers = [measure_server(f"running Redis {b.redis_url}", b.redis, b.redis_url, *args)]
    with embedded_redis() as url:
        private = redis_client(url, timeout_s=30.0)
        try:
            copy_hashes(b.redis, private, stock)
            label = "private embedded_redis() (keys.SERVER_SETTINGS)"
            servers.append(measure_server(label, private, url, *args))
        finally:
            private.close()

    say(
        f"\n4. Redis bytes per cached pair: footprint.view_footprint (MEMORY USAGE key SAMPLES 0 "
        f"summed over a population's pair keys / its rows); record (payload) {payload} B = "
        f"8 event + {2 * b.d} z (d={b.d} float16) + {len(FM_VERSION)} fm_version"
    )
    for s in servers:
        config = ", ".join(f"{k} {v}" for k, v in s["config"].items())
        say(f"   {s['server']}: redis {s['redis_version']}; CONFIG GET: {config}")
        say(f"     {'population':<38} {'keys':>6} {'B/pair':>7} {'x record':>9}  encoding")
        for r in s["rows"]:
            say(
                f"     {r['label']:<38} {r['keys']:6,} {r['bytes_per_pair']:7.1f} "
                f"{r['over_record']:8.2f}x  {_encodings(r['encodings'])}"
            )
    recommended = servers[1]["rows"][: len(pops)]
    worst = max(r["over_record"] for r in recommended)
    compact = [r["over_record"] for r in recommended if "hashtable" not in r["encodings"]]
    worst_compact = max(compact) if compact else float("nan")
    say(
        f"   SOLARIS under the recommended setting: worst {worst:.2f}x the record (target <= 1.5:"
        f" {verdict(worst, 1.5, at_most=True)}); populations whose hashes stay compact (within"
        f" the entries limit): worst {worst_compact:.2f}x"
    )
    say(
        '   the bytes include each hash\'s prune marker (field ""), the rows do not; a hash over '
        "the entries limit (keys.SERVER_SETTINGS) is a hashtable"
    )
    return {
        "payload_bytes": payload,
        "servers": servers,
        "worst_recommended": worst,
        "worst_recommended_compact": worst_compact,
    }


def _encodings(counts: dict[str, int]) -> str:
    if len(counts) == 1:
        return next(iter(counts))
    return ", ".join(f"{name} {n:,}" for name, n in sorted(counts.items()))
