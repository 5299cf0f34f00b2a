"""Section 2: threads on one client."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from bench.feature_store.context import Bench, percentile, say, verdict
from bench.feature_store.fetch import Fetch, client_fetch, open_client
from solaris.serving.client import SolarisFeatures

if TYPE_CHECKING:
    pass


# --------------------------------------------------------------------------------------------
# 2. Concurrency
# --------------------------------------------------------------------------------------------


@dataclass
class Worker:
    latencies_ns: list[int] = field(default_factory=list)
    full: int = 0
    errors: int = 0
    first_error: str = ""


def run_threads(
    client: SolarisFeatures, user: int, items: np.ndarray, now: int, threads: int, seconds: float
) -> tuple[list[Worker], float]:
    """``threads`` threads calling ``client.fetch`` until the deadline; returns the workers
    and the wall time from the common start to the last thread's end."""
    n = len(items)
    deadline = [0.0]
    start = [0.0]

    def arm() -> None:
        start[0] = time.perf_counter()
        deadline[0] = start[0] + seconds

    barrier = threading.Barrier(threads, action=arm)
    workers = [Worker() for _ in range(threads)]

    def loop(w: Worker) -> None:
        mine = items.copy()
        clock = time.perf_counter_ns
        barrier.wait()
        stop = deadline[0]
        while time.perf_counter() < stop:
            t0 = clock()
            try:
                out = client.fetch(user, mine, now=now)
            except Exception as exc:  # counted, never expected
                w.errors += 1
                w.first_error = w.first_error or f"{type(exc).__name__}: {exc}"
                continue
            w.latencies_ns.append(clock() - t0)
            if out.mask.shape[0] == n and out.mask.all():
                w.full += 1

    pool = [
        threading.Thread(target=loop, args=(w,), name=f"bench-{k}") for k, w in enumerate(workers)
    ]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return workers, time.perf_counter() - start[0]


def single_rate(fetch: Fetch, seconds: float) -> tuple[int, float]:
    """(calls, calls per second) of one thread calling ``fetch`` for ``seconds``."""
    calls = 0
    t0 = time.perf_counter()
    stop = t0 + seconds
    while time.perf_counter() < stop:
        fetch()
        calls += 1
    return calls, calls / (time.perf_counter() - t0)


def bench_concurrency(
    b: Bench, threads: int, seconds: float, single_seconds: float, stock: Fetch
) -> dict:
    """Aggregate throughput of ``threads`` threads on one fresh client, then single-thread
    rates of the client and of stock Feast."""
    client = open_client(b.cfg, b.redis_url)
    try:
        workers, wall = run_threads(client, b.data.user, b.data.items, b.now, threads, seconds)
        stats = client.stats.as_dict()
        single_client = single_rate(client_fetch(b.data, b.now, client), single_seconds)
    finally:
        client.close()
    single_stock = single_rate(stock, single_seconds)
    requests = sum(len(w.latencies_ns) + w.errors for w in workers)
    ok = np.concatenate([np.asarray(w.latencies_ns) for w in workers]) / 1e6
    full = sum(w.full for w in workers)
    errors = sum(w.errors for w in workers)
    first = next((w.first_error for w in workers if w.first_error), "")
    rps = requests / wall
    out = {
        "threads": threads,
        "seconds": wall,
        "requests": requests,
        "requests_per_s": rps,
        "full_features_share": full / max(requests, 1),
        "exceptions": errors,
        "first_exception": first,
        "stats": stats,
        "p50_ms": percentile(ok, 50),
        "p99_ms": percentile(ok, 99),
        "per_thread_requests": [len(w.latencies_ns) + w.errors for w in workers],
        "single_client_requests_per_s": single_client[1],
        "single_stock_requests_per_s": single_stock[1],
        "aggregate_over_stock_single": rps / single_stock[1],
        "aggregate_over_client_single": rps / single_client[1],
    }
    say(
        f"\n2. Concurrency: {threads} threads on one SolarisFeatures for {wall:.1f} s, "
        "healthy Redis"
    )
    per = out["per_thread_requests"]
    say(
        f"   requests {requests:,} ({rps:,.0f}/s aggregate; per thread min {min(per):,} "
        f"max {max(per):,}); full features {out['full_features_share']:.2%}; exceptions {errors}"
        + (f" (first: {first})" if first else "")
    )
    say(
        f"   stats: shed_open {stats['shed_open']}, shed_busy {stats['shed_busy']}, "
        f"failures {stats['failures']}, timeouts {stats['timeouts']}, requests "
        f"{stats['requests']}"
    )
    say(f"   latency under load: p50 {out['p50_ms']:.2f} ms, p99 {out['p99_ms']:.2f} ms")
    say(
        f"   single thread, {single_seconds:g} s each: client {single_client[1]:,.0f} req/s, "
        f"stock feast {single_stock[1]:,.0f} req/s"
    )
    say(
        f"   aggregate/stock single-thread {out['aggregate_over_stock_single']:.1f}x (target >= 5:"
        f" {verdict(out['aggregate_over_stock_single'], 5, at_most=False)}); "
        f"aggregate/client single-thread {out['aggregate_over_client_single']:.2f}x"
    )
    return out
