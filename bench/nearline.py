"""Benchmark of the near-line path: request → servable code, with the real components.

Run: ``.venv/bin/python -m bench.nearline`` after ``make demo`` (it embeds with the demo's
MovieLens FM and autoencoder, the model version it pinned); ``make bench`` runs it last;
``--quick`` for a smoke run.

Traffic: ``--rate`` (100) requests/s of one random user × ``--candidates`` (200) random
items and random verifier scores, each ``fetch``-ed and then ``log_request``-ed through
:class:`~solaris.serving.client.SolarisFeatures` on wall-clock time, as a serving process
does, in a bench namespace on the ``--redis`` server.

1. **Fetch latency, near-line off and on**: ``--baseline`` (30) seconds of the traffic with
   ``nearline.enabled`` false and as many with it true and no embedder (the serving
   process's own cost: the selection runs on the client's writer thread, off the request
   path but in the same process), interleaved a second at a time, then the near-line run
   with the embedders on the same two cores; the fetch's p50/p99 of each and their ratios
   to the first.
2. **Request → servable code**: ``--consumers`` (1) ``solaris nearline --threads 1``
   processes (one core left to serving: both share this machine's two) read
   the embed stream; for every ``--sample``-th request (5) a poller reads the request-log
   entry (which names the items serving selected near-line) and fetches those items through
   a second client every 100 ms until every one has its pair tier: the time from the
   ``log_request`` call to that fetch is the request's latency. Target: p95 ≤ 30 s at 100
   requests/s × 200 candidates for 5 minutes (``--seconds`` 300). Also printed: pairs/s
   selected, each embedder's figures (throughput, lag, malformed, reclaimed), the backlog
   at the end, and the peak RSS of the embedders and of this process.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from bench.serving_http import peak_rss_mb

BIN = Path(sys.executable).parent
REDIS_DEFAULT = "127.0.0.1:6379,db=14"
NAMESPACE = "bench_nearline"
N_USERS, N_ITEMS = 943, 1682  # MovieLens-100K's ids, which the demo's FM knows


def say(text: str = "") -> None:
    print(text, flush=True)


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values, np.float64), q)) if values else float("nan")


class Traffic:
    """``rate`` requests/s through ``client`` until ``stop``: fetch, then log_request."""

    def __init__(self, client, rate: float, candidates: int, seed: int, first_rid: int) -> None:
        self.client = client
        self.rate = rate
        self.candidates = candidates
        self.rng = np.random.default_rng(seed)
        self.rid = first_rid
        self.fetch_ms: list[float] = []
        self.sent: dict[int, float] = {}  # request id -> wall time of its log_request
        self.late = 0  # requests sent more than 50 ms after their slot (the load fell behind)

    def run(self, seconds: float) -> None:
        began = time.monotonic()
        k = 0
        while True:
            slot = began + k / self.rate
            now = time.monotonic()
            if slot - began >= seconds:
                return
            if slot > now:
                time.sleep(slot - now)
            elif now - slot > 0.05:
                self.late += 1
            user = int(self.rng.integers(1, N_USERS + 1))
            items = self.rng.choice(np.arange(1, N_ITEMS + 1), self.candidates, replace=False)
            scores = self.rng.random(self.candidates).astype(np.float32)
            t0 = time.perf_counter()
            self.client.fetch(user, items)
            self.fetch_ms.append((time.perf_counter() - t0) * 1000)
            self.sent[self.rid] = time.time()
            self.client.log_request(self.rid, user, items, scores)
            self.rid += 1
            k += 1


class Poller(threading.Thread):
    """Reads the request log as it grows and polls every ``sample``-th request's near-line
    items through ``client`` until all are served; records request → servable seconds."""

    def __init__(self, client, redis, stream: str, sent: dict[int, float], sample: int) -> None:
        super().__init__(daemon=True)
        self.client, self.redis, self.stream = client, redis, stream
        self.sent, self.sample = sent, sample
        self.latencies: list[float] = []
        self.unserved = 0
        self.stop = threading.Event()
        self._cursor = "0-0"
        self._waiting: list[tuple[int, int, np.ndarray]] = []

    def run(self) -> None:
        while not (self.stop.is_set() and not self._waiting):
            self._read_log()
            self._poll()
            time.sleep(0.1)

    def _read_log(self) -> None:
        reply = self.redis.xread({self.stream: self._cursor}, count=10_000)
        for _, entries in reply or []:
            for entry_id, fields in entries:
                self._cursor = entry_id
                rid = int(fields[b"rid"])
                if rid % self.sample or b"nl" not in fields:
                    continue
                items = np.frombuffer(fields[b"nl"], "<i8").astype(np.int64)
                self._waiting.append((rid, int(fields[b"user"]), items))

    def _poll(self) -> None:
        still = []
        for rid, user, items in self._waiting:
            out = self.client.fetch(user, items)
            if out.mask[:, 0].all():
                self.latencies.append(time.time() - self.sent[rid])
            elif time.time() - self.sent[rid] > 120:
                self.unserved += 1
            else:
                still.append((rid, user, items))
        self._waiting = still


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--redis", default=REDIS_DEFAULT)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--candidates", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--baseline", type=float, default=30.0)
    parser.add_argument("--consumers", type=int, default=1)
    parser.add_argument("--sample", type=int, default=5)
    parser.add_argument(
        "--threads", type=int, default=1, help="torch threads per embedder (1: a core left)"
    )
    parser.add_argument("--artifacts", type=Path, default=Path("artifacts"))
    parser.add_argument("--quick", action="store_true", help="20 s, 10 s baseline")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.baseline = 20.0, 10.0
    from solaris.model_versions import pin_version, pinned

    # The bench's namespace reads the model version the demo pinned for its own (or the
    # older flat layout's models).
    models = args.artifacts / "models"
    demo = pinned(models, "demo")
    if demo is None and not (models / "codes.json").is_file():
        sys.exit(f"bench.nearline needs the demo's models under {args.artifacts}: run make demo")
    if demo is not None:
        pin_version(models, NAMESPACE, demo.version, live=None)

    from solaris.config import SolarisConfig
    from solaris.connection import redis_client
    from solaris.namespace import Namespace
    from solaris.orchestration.resources import feature_store
    from solaris.pipeline.codes import read_manifest
    from solaris.serving.client import SolarisFeatures
    from solaris.store.feast_store import delete_project_keys
    from solaris.store.partitions import Partitioning

    settings = {
        "namespace": NAMESPACE,
        "artifacts_dir": str(args.artifacts.resolve()),
        "store": {"redis": args.redis},
    }
    cfg_off = SolarisConfig(**settings)
    # Refresh on activity off: a refreshed pair already has a (stale) code, which the poller
    # would count as servable at once; the bench measures the path for pairs with none.
    cfg_on = SolarisConfig(**settings, nearline={"enabled": True, "refresh_after_requests": 0})
    namespace = Namespace.of(cfg_on)
    redis = redis_client(args.redis, timeout_s=10.0)
    delete_project_keys(redis, namespace.project)
    feature_store(cfg_on, args.redis)
    version = read_manifest(namespace.models_dir).fm_version
    stream = namespace.request_stream_of(0, Partitioning(1))
    say(
        f"near-line bench: {args.rate:g} requests/s x {args.candidates} candidates, "
        f"{args.seconds:g} s near-line after a {args.baseline:g} s baseline; "
        f"{args.consumers} embedder(s); fm_version {version}"
    )

    # 1. near-line off and on (no embedder yet: the serving process's own cost of
    # selecting), interleaved a second at a time, so the machine's drift hits both alike
    off = SolarisFeatures(cfg_off, redis=args.redis, fm_version=version, metrics_publish_s=None)
    alone = SolarisFeatures(cfg_on, redis=args.redis, fm_version=version, metrics_publish_s=None)
    off.warm_up()
    alone.warm_up()
    base = Traffic(off, args.rate, args.candidates, seed=1, first_rid=0)
    selecting = Traffic(alone, args.rate, args.candidates, seed=3, first_rid=10**8)
    for turn in range(int(2 * args.baseline)):
        (base if turn % 2 == 0 else selecting).run(1.0)
    off.close()
    alone.close()
    delete_project_keys(redis, namespace.project)  # its stream and marks: not the run's
    feature_store(cfg_on, args.redis)

    # 2. near-line on, with the embedders running as processes of their own
    # The demo's models: the embedders load the MovieLens FM (the product names no default).
    from solaris.examples.movielens.settings import environment as movielens_adapters

    env = {
        **os.environ,
        **movielens_adapters(),
        "SOLARIS_ARTIFACTS_DIR": str(args.artifacts.resolve()),
    }
    logs = Path(tempfile.mkdtemp(prefix="bench-nearline-"))
    embedders = [
        subprocess.Popen(
            [
                str(BIN / "solaris"),
                "nearline",
                "--namespace",
                NAMESPACE,
                "--redis",
                args.redis,
                "--consumer",
                f"bench-{k}",
                "--log-every",
                "5",
                "--threads",
                str(args.threads),
            ],
            env=env,
            stdout=(logs / f"embedder-{k}.log").open("w"),
            stderr=subprocess.STDOUT,
        )
        for k in range(args.consumers)
    ]
    try:
        deadline = time.monotonic() + 180
        while len(redis.hkeys(namespace.nearline_status)) < args.consumers:
            if time.monotonic() > deadline or any(p.poll() is not None for p in embedders):
                tail = "".join(p.read_text()[-2000:] for p in logs.glob("*.log"))
                sys.exit(f"the embedders did not start:\n{tail}")
            time.sleep(0.5)
        on = SolarisFeatures(cfg_on, redis=args.redis, fm_version=version, metrics_publish_s=None)
        on.warm_up()
        prober = SolarisFeatures(
            cfg_off, redis=args.redis, fm_version=version, metrics_publish_s=None
        )
        prober.warm_up()
        load = Traffic(on, args.rate, args.candidates, seed=2, first_rid=10**9)
        poller = Poller(prober, redis, stream, load.sent, args.sample)
        poller.start()
        began = time.monotonic()
        load.run(args.seconds)
        elapsed = time.monotonic() - began
        on.flush()
        poller.stop.set()
        poller.join(timeout=180)
        time.sleep(6)  # one more status line from each embedder
        status = {
            k.decode(): json.loads(v) for k, v in redis.hgetall(namespace.nearline_status).items()
        }
        rss = {f"bench-{k}": peak_rss_mb(p.pid) for k, p in enumerate(embedders)}
    finally:
        for p in embedders:
            p.terminate()
        for p in embedders:
            p.wait(timeout=60)
    stats = on.stats.as_dict()
    on.close()
    prober.close()

    say("\n1. fetch latency (ms), the serving process's own calls")
    say(f"   {'':<22}{'p50':>8}{'p99':>8}{'requests':>10}{'late':>6}")
    runs = (
        ("off", base),
        ("on, no embedder", selecting),
        ("on, embedder beside", load),
    )
    for name, t in runs:
        p50, p99 = _pct(t.fetch_ms, 50), _pct(t.fetch_ms, 99)
        say(f"   {name:<22}{p50:>8.3f}{p99:>8.3f}{len(t.fetch_ms):>10,}{t.late:>6}")
    for name, t in runs[1:]:
        say(
            f"   {name} / off: p50 {_pct(t.fetch_ms, 50) / _pct(base.fetch_ms, 50):.2f}x, "
            f"p99 {_pct(t.fetch_ms, 99) / _pct(base.fetch_ms, 99):.2f}x"
        )
    lat = poller.latencies
    say(f"\n2. request -> servable code (s), every {args.sample}th request")
    say(
        f"   p50 {_pct(lat, 50):.2f}  p95 {_pct(lat, 95):.2f}  p99 {_pct(lat, 99):.2f}  "
        f"max {max(lat) if lat else float('nan'):.2f}  ({len(lat):,} requests served, "
        f"{poller.unserved} not within 120 s)   target p95 <= 30 s"
    )
    selected = sum(f.get("pairs", 0) for f in status.values())
    say(
        f"   {stats['nearline_logged']:,} embed-stream entries, {selected:,} pairs in "
        f"{elapsed:.0f} s ({selected / elapsed:,.0f}/s); selection failures "
        f"{stats['nearline_failed']}, request-log drops {stats['requests_dropped']}"
    )
    for name, figures in sorted(status.items()):
        keep = (
            "embedded",
            "skipped_fresh",
            "malformed",
            "reclaimed",
            "batches",
            "busy_seconds",
            "lag_p50_s",
            "lag_p95_s",
            "backlog",
            "pending",
        )
        say(f"   {name}: " + ", ".join(f"{k} {figures.get(k)}" for k in keep))
        say(f"   {name}: peak RSS {rss.get(name) or float('nan'):.0f} MB")
    say(f"   this process (traffic, poller, two clients): peak RSS {peak_rss_mb() or 0:.0f} MB")
    delete_project_keys(redis, namespace.project)
    redis.close()


if __name__ == "__main__":
    main()
