"""Failover drill: serving on a Redis Cluster while the master holding the user dies.

Run: ``.venv/bin/python -m bench.cluster_drill`` (``--base-port`` 7000, ``--node-timeout``
2000 ms, ``--threads`` 4; ``--json out.json`` also saves the figures). Not a test: it needs
a few free ports and about half a minute.

It starts a 3-master/3-replica cluster on loopback with ``scripts/redis_cluster.sh`` (the
script's ``cluster-node-timeout`` is how long a master may be silent before its replica
is promoted), writes one request's rows in the four serving views through the SOLARIS online
store (:func:`bench.feature_store.write_request`), then runs ``SolarisFeatures.fetch`` for
that request in a loop from ``--threads`` threads. After ``--baseline-s`` it SIGKILLs the
master that owns the user's hash slot, and goes on until every thread has had a full answer
again (or ``--max-s``). The serving client's promise is that the caller never sees the
outage as an exception, only as zero-filled answers (:class:`~solaris.serving.client.
FetchStats` says why); the drill measures how long those last:

* per thread and overall, the seconds from the first zero-filled answer to the first full
  answer after the failover (overall: the first zero of any thread to the last thread's
  recovery);
* the fetches answered with zeros, and the failures by reason from ``FetchStats``;
* the exceptions that reached the caller (must be 0).

The cluster is stopped (and its directory removed) at the end, also on failure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench.feature_store import FM_VERSION, REPO, request_data, write_request
from solaris.config import SolarisConfig
from solaris.connection import redis_client
from solaris.namespace import Namespace
from solaris.serving.client import SolarisFeatures
from solaris.store import keys
from solaris.store.contract import PAIR
from solaris.store.feast_store import apply_definitions, open_feature_store

__all__ = ["ThreadLog", "main", "run_drill"]

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "redis_cluster.sh"
NAMESPACE = "drill"


@dataclass
class ThreadLog:
    """One serving thread's answers: ``(monotonic time, kind)``, kind full/zero/partial."""

    answers: list[tuple[float, str]] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)

    def outage(self, killed_at: float) -> tuple[float | None, float | None]:
        """(first zero-filled answer after the kill, first full answer after that)."""
        first_zero = next((t for t, k in self.answers if t >= killed_at and k == "zero"), None)
        if first_zero is None:
            return None, None
        back = next((t for t, k in self.answers if t > first_zero and k == "full"), None)
        return first_zero, back


def _cluster(action: str, base_port: int, folder: Path, node_timeout_ms: int) -> str:
    args = [str(SCRIPT), action, "--base-port", str(base_port), "--dir", str(folder)]
    if action == "start":
        args += ["--node-timeout", str(node_timeout_ms)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise SystemExit(f"redis_cluster.sh {action} failed: {done.stderr.strip()}")
    return done.stdout


def _serve(
    features: SolarisFeatures,
    user: int,
    items: np.ndarray,
    now: int,
    stop: threading.Event,
    log: ThreadLog,
) -> None:
    while not stop.is_set():
        try:
            out = features.fetch(user, items, now=now)
        except Exception as exc:  # the promise under test: this never happens
            log.exceptions.append(f"{type(exc).__name__}: {exc}")
            continue
        kind = "full" if out.mask.all() else "zero" if not out.mask.any() else "partial"
        log.answers.append((time.monotonic(), kind))
        time.sleep(0.002)


def _promoted_after(survivors: list[int], killed_at: float, deadline: float) -> float | None:
    """Seconds from the kill until three of the surviving nodes say ``ROLE`` master (the
    dead master's replica was promoted): the server side of the outage."""
    import redis as redis_py

    nodes = [redis_py.Redis(host="127.0.0.1", port=p, socket_timeout=0.5) for p in survivors]
    try:
        while time.monotonic() < deadline:
            masters = 0
            for node in nodes:
                with contextlib.suppress(redis_py.RedisError):
                    masters += node.role()[0] in (b"master", "master")
            if masters >= 3:
                return time.monotonic() - killed_at
            time.sleep(0.05)
        return None
    finally:
        for node in nodes:
            node.close()


def run_drill(
    base_port: int, node_timeout_ms: int, threads: int, baseline_s: float, max_s: float
) -> dict:
    """Start the cluster, serve, kill the user's master, measure; stop the cluster."""
    workdir = Path(tempfile.mkdtemp(prefix="solaris-drill-"))
    folder = workdir / "cluster"
    try:
        connection = _cluster("start", base_port, folder, node_timeout_ms).splitlines()[0]
        repo = workdir / "feature_repo"
        shutil.copytree(REPO, repo, ignore=shutil.ignore_patterns("data", "__pycache__"))
        data = request_data(300, 32, int(time.time()) - 60, np.random.default_rng(0))
        cfg = SolarisConfig(
            namespace=NAMESPACE,
            model={"z_dim": 32},
            store={"repo_path": repo, "redis": connection, "redis_type": "redis_cluster"},
        )
        store = open_feature_store(cfg, connection)
        apply_definitions(store, cfg)
        write_request(store, data)

        admin = redis_client(connection, redis_type="redis_cluster", timeout_s=2.0)
        key = keys.partition_key(keys.view_key(Namespace.of(cfg).project, PAIR), PAIR, data.user)
        master = admin.get_node_from_key(key)
        admin.close()
        pid = int((folder / str(master.port) / "redis.pid").read_text())

        now = data.computed_at + 60
        features = SolarisFeatures(cfg, redis=connection, fm_version=FM_VERSION)
        features.warm_up()
        assert features.fetch(data.user, data.items, now=now).mask.all(), "no full answer"
        stop = threading.Event()
        logs = [ThreadLog() for _ in range(threads)]
        workers = [
            threading.Thread(target=_serve, args=(features, data.user, data.items, now, stop, lg))
            for lg in logs
        ]
        for w in workers:
            w.start()
        time.sleep(baseline_s)
        killed_at = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        deadline = killed_at + max_s
        survivors = [base_port + k for k in range(6) if base_port + k != master.port]
        promoted = _promoted_after(survivors, killed_at, deadline)
        while time.monotonic() < deadline:
            time.sleep(0.1)
            outages = [lg.outage(killed_at) for lg in logs]
            if all(z is not None and b is not None for z, b in outages):
                break
        time.sleep(1.0)  # a last second of full answers
        stop.set()
        for w in workers:
            w.join()
        features.close()
        stats = features.stats.as_dict()
        per_thread = []
        for k, lg in enumerate(logs):
            zero, back = lg.outage(killed_at)
            per_thread.append(
                {
                    "thread": k,
                    "fetches": len(lg.answers),
                    "zero_filled": sum(kind == "zero" for _, kind in lg.answers),
                    "partial": sum(kind == "partial" for _, kind in lg.answers),
                    "kill_to_first_zero_s": None if zero is None else zero - killed_at,
                    "zero_window_s": None if zero is None or back is None else back - zero,
                    "exceptions": len(lg.exceptions),
                }
            )
        zeros = [lg.outage(killed_at)[0] for lg in logs]
        backs = [lg.outage(killed_at)[1] for lg in logs]
        overall = (
            max(backs) - min(zeros)
            if all(z is not None for z in zeros) and all(b is not None for b in backs)
            else None
        )
        return {
            "cluster": "3 masters + 3 replicas on loopback (scripts/redis_cluster.sh)",
            "node_timeout_ms": node_timeout_ms,
            "killed_master": f"{master.host}:{master.port} (SIGKILL)",
            "threads": threads,
            "fetch_timeout_ms": cfg.store.fetch_timeout_ms,
            "breaker": f"{cfg.store.breaker_failures} failures, "
            f"{cfg.store.breaker_cooldown_ms:g} ms cool-down",
            "kill_to_replica_promoted_s": promoted,
            "per_thread": per_thread,
            "overall_zero_window_s": overall,
            "kill_to_all_recovered_s": None if overall is None else max(backs) - killed_at,
            "zero_filled_fetches": sum(t["zero_filled"] for t in per_thread),
            "partial_fetches": sum(t["partial"] for t in per_thread),
            "exceptions": sum(t["exceptions"] for t in per_thread),
            "exception_samples": [e for lg in logs for e in lg.exceptions][:3],
            "fetch_stats": stats,
        }
    finally:
        _cluster("stop", base_port, folder, node_timeout_ms)
        shutil.rmtree(workdir, ignore_errors=True)


def _s(value: float | None) -> str:
    return "never" if value is None else f"{value:.2f}"


def print_report(r: dict) -> None:
    print(f"{r['cluster']}; cluster-node-timeout {r['node_timeout_ms']} ms")
    print(
        f"killed {r['killed_master']} while {r['threads']} threads served; fetch bound "
        f"{r['fetch_timeout_ms']:g} ms, breaker {r['breaker']}"
    )
    print()
    print(
        f"{'thread':>6} {'fetches':>8} {'zeros':>6} {'partial':>7} {'kill→0 s':>9} "
        f"{'zero window s':>14} {'exceptions':>10}"
    )
    for t in r["per_thread"]:
        print(
            f"{t['thread']:>6} {t['fetches']:>8} {t['zero_filled']:>6} {t['partial']:>7} "
            f"{_s(t['kill_to_first_zero_s']):>9} {_s(t['zero_window_s']):>14} "
            f"{t['exceptions']:>10}"
        )
    print()
    print(
        f"overall zero window (first zero → last thread's first full): "
        f"{_s(r['overall_zero_window_s'])} s; kill → all recovered "
        f"{_s(r['kill_to_all_recovered_s'])} s"
    )
    print(f"kill → replica promoted (server side): {_s(r['kill_to_replica_promoted_s'])} s")
    print(
        f"zero-filled fetches: {r['zero_filled_fetches']}; partial: {r['partial_fetches']}; "
        f"exceptions reaching the caller: {r['exceptions']}"
    )
    s = r["fetch_stats"]
    reasons = ("timeouts", "connection_errors", "other_errors", "shed_open", "shed_busy")
    print(
        f"FetchStats: requests {s['requests']}, failures {s['failures']} = "
        + ", ".join(f"{k} {s[k]}" for k in reasons)
    )
    for sample in r["exception_samples"]:
        print(f"  exception: {sample}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-port", type=int, default=7000)
    parser.add_argument("--node-timeout", type=int, default=2000, help="ms")
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--baseline-s", type=float, default=2.0)
    parser.add_argument("--max-s", type=float, default=60.0)
    parser.add_argument("--json", type=Path, help="also save the figures here")
    a = parser.parse_args(argv)
    report = run_drill(a.base_port, a.node_timeout, a.threads, a.baseline_s, a.max_s)
    print_report(report)
    if a.json:
        a.json.write_text(json.dumps(report, indent=2))
    return 0 if report["exceptions"] == 0 and report["overall_zero_window_s"] is not None else 1


if __name__ == "__main__":
    raise SystemExit(main())
