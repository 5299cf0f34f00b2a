"""Benchmark of the binary endpoint (``solaris serve``, ``solaris.serving.http``).

Run: ``.venv/bin/python -m bench.serving_http`` (``make bench`` runs it after the
feature-store bench; ``--quick`` for a smoke run). The same set-up as
:mod:`bench.feature_store`: one user × ``--candidates`` (300) with all four views written in
a bench project on the ``--redis`` server.

1. **Latency**, interleaved in one shuffled order after a warm-up: the endpoint with a
   binary body and with a JSON body, ``feast serve``'s ``POST /get-online-features`` (the
   feature service, the same entities) and the Python client in this process. The HTTP
   caller is the cheapest one can write: a kept-alive raw socket, the request bytes built
   once, the answer read by its ``Content-Length``. Every answer is checked (status 200,
   the endpoint's ``Solaris-Fetch: ok`` and every tier present) before timing. Target:
   endpoint p50 ≤ 3 × the client's. Bytes per answer are printed.
2. **Throughput** of ``--workers 1`` and ``--workers 2`` on this machine: ``--connections``
   (16) kept-alive connections, one thread each, sending the binary request back to back for
   ``--seconds`` (20) per setting; requests/s, and every answer counted complete (status 200,
   the full body, ``Solaris-Fetch: ok``) or not. Target: two workers ≥ 1.6 × one. The peak
   RSS of every worker is read from ``/proc`` before each server stops.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import yaml

from bench.feature_store import FM_VERSION, REDIS_DEFAULT, Bench, bench_context, open_client
from solaris.serving.tiers import TIERS

BIN = Path(sys.executable).parent


def say(text: str = "") -> None:
    print(text, flush=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_healthy(url: str, server: subprocess.Popen, log: Path, path: str) -> None:
    import urllib.request

    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"{url}{path}", timeout=1) as reply:
                if reply.status == 200:
                    return
        except OSError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{server.args[:2]} did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


def _wait_workers(port: int, workers: int) -> None:
    """Until ``workers`` distinct worker pids answer ``/healthz`` on new connections: a
    connection opened before a worker listens never reaches it."""
    import urllib.request

    seen: set[str] = set()
    deadline = time.monotonic() + 120
    while len(seen) < workers:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as reply:
            seen.add(reply.headers["solaris-worker"])
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(seen)} of {workers} workers answered in 120 s")
        time.sleep(0.05)


def _stop(server: subprocess.Popen) -> int:
    server.send_signal(signal.SIGTERM)
    try:
        return server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        server.kill()
        return server.wait()


@contextmanager
def solaris_serve(b: Bench, workers: int) -> Iterator[tuple[int, subprocess.Popen]]:
    """``solaris serve`` on the bench project with ``workers`` processes; (port, process)."""
    config = b.tmp / "serve.yaml"
    config.write_text(yaml.safe_dump(b.cfg.model_dump(mode="json")))
    port = _free_port()
    log = b.tmp / f"serve-{workers}.log"
    server = subprocess.Popen(
        [
            str(BIN / "solaris"),
            "serve",
            f"--config={config}",
            f"--port={port}",
            f"--workers={workers}",
            f"--fm-version={FM_VERSION}",
        ],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    try:
        _wait_healthy(f"http://127.0.0.1:{port}", server, log, "/healthz")
        _wait_workers(port, workers)
        yield port, server
    finally:
        code = _stop(server)
        if code != 0:
            say(f"   note: solaris serve exited with {code}: {log.read_text()[-2000:]}")


@contextmanager
def feast_serve(b: Bench) -> Iterator[int]:
    """``feast serve`` over the bench project's repo (the same rows). Its worker would
    restart after 1,000 requests by default (``--max-requests``), within the timed run."""
    repo = Path(b.cfg.store.repo_path)
    port = _free_port()
    env = {
        **os.environ,
        "SOLARIS_NAMESPACE": b.cfg.namespace,
        "SOLARIS_STORE__REDIS": b.redis_url,
        "SOLARIS_MODEL__Z_DIM": str(b.d),
    }
    log = b.tmp / "feast-serve.log"
    server = subprocess.Popen(
        [
            *(str(BIN / "feast"), "-c", str(repo), "serve", "--host", "127.0.0.1"),
            *("--port", str(port), "--max-requests", "1000000"),  # no worker recycling mid-run
        ],
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    try:
        _wait_healthy(f"http://127.0.0.1:{port}", server, log, "/health")
        yield port
    finally:
        _stop(server)


class HttpCaller:
    """One kept-alive connection sending one prebuilt request; :meth:`__call__` returns
    ``(status, headers bytes, body)`` read by ``Content-Length``."""

    def __init__(self, port: int, path: str, body: bytes, content_type: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.request = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        self.buf = b""

    def __call__(self) -> tuple[int, bytes, bytes]:
        self.sock.sendall(self.request)
        buf = self.buf
        while (end := buf.find(b"\r\n\r\n")) < 0:
            buf += self._recv()
        head, buf = buf[:end], buf[end + 4 :]
        status = int(head[9:12])
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        while len(buf) < length:
            buf += self._recv()
        body, self.buf = buf[:length], buf[length:]
        return status, head, body

    def _recv(self) -> bytes:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("the server closed the connection")
        return chunk

    def close(self) -> None:
        self.sock.close()


def _endpoint_ok(answer: tuple[int, bytes, bytes], n: int) -> bool:
    status, head, body = answer
    if status != 200 or b"solaris-fetch: ok" not in head.lower():
        return False
    table = pa.ipc.open_stream(body).read_all()
    return table.num_rows == n and all(table[t].null_count == 0 for t in TIERS)


def _pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q))


def latency(b: Bench, reps: int, warmup: int, seed: int) -> dict[str, Any]:
    items = b.data.items.astype("<i8")
    binary = items.tobytes()
    query = f"/v1/features?user_id={b.data.user}&now={b.now}"
    as_json = json.dumps(
        {"user_id": int(b.data.user), "item_ids": items.tolist(), "now": b.now}
    ).encode()
    feast_body = json.dumps(
        {
            "feature_service": "solaris_serving",
            "entities": {
                "user_id": [int(b.data.user)] * len(items),
                "item_id": items.tolist(),
                "request_ts": [b.now] * len(items),
            },
            "full_feature_names": True,
        }
    ).encode()
    client = open_client(b.cfg, b.redis_url)
    with solaris_serve(b, 1) as (port, _server), feast_serve(b) as feast_port:
        callers = {
            "endpoint, binary body": HttpCaller(port, query, binary, "application/octet-stream"),
            "endpoint, JSON body": HttpCaller(port, "/v1/features", as_json, "application/json"),
            "feast serve": HttpCaller(
                feast_port, "/get-online-features", feast_body, "application/json"
            ),
        }
        user, now = int(b.data.user), b.now
        variants: dict[str, Callable[[], Any]] = {
            **callers,
            "Python client": lambda: client.fetch(user, items, now=now),
        }
        for name in ("endpoint, binary body", "endpoint, JSON body"):
            if not _endpoint_ok(callers[name](), len(items)):
                raise RuntimeError(f"{name}: not every tier present, or not a 200 answer")
        status, _, feast_answer = callers["feast serve"]()
        if status != 200 or b'"PRESENT"' not in feast_answer:
            raise RuntimeError(f"feast serve answered {status}: {feast_answer[:300]!r}")
        sizes = {name: len(call()[2]) for name, call in callers.items()}
        for _ in range(warmup):
            for call in variants.values():
                call()
        order = list(variants)
        rng = random.Random(seed)
        times: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(reps):
            rng.shuffle(order)
            for name in order:
                start = time.perf_counter()
                variants[name]()
                times[name].append((time.perf_counter() - start) * 1e3)
        for call in callers.values():
            call.close()
    client.close()
    say(
        f"\n1. Latency over HTTP: one user x {len(items)} candidates, d={b.d}; {reps} "
        "interleaved reps per variant (a kept-alive raw-socket caller)"
    )
    say(f"   {'variant':<24} {'p50 ms':>8} {'p99 ms':>8} {'bytes':>9}")
    table = {}
    for name, t in times.items():
        table[name] = {"p50_ms": _pct(t, 50), "p99_ms": _pct(t, 99), "bytes": sizes.get(name)}
        shown = f"{sizes[name]:9,}" if name in sizes else f"{'-':>9}"
        say(f"   {name:<24} {_pct(t, 50):8.3f} {_pct(t, 99):8.3f} {shown}")
    client_p50 = table["Python client"]["p50_ms"]
    ratio = table["endpoint, binary body"]["p50_ms"] / client_p50
    verdict = "met" if ratio <= 3 else "NOT MET"
    say(f"   endpoint (binary) / Python client p50 {ratio:5.2f}x  (target <= 3: {verdict})")
    json_ratio = table["endpoint, JSON body"]["p50_ms"] / client_p50
    say(f"   endpoint (JSON)   / Python client p50 {json_ratio:5.2f}x")
    feast_ratio = table["feast serve"]["p50_ms"] / table["endpoint, binary body"]["p50_ms"]
    say(
        f"   feast serve / endpoint (binary)   p50 {feast_ratio:5.1f}x, bytes "
        f"{sizes['feast serve'] / sizes['endpoint, binary body']:.1f}x"
    )
    return {
        "variants": table,
        "endpoint_over_client_p50": ratio,
        "json_endpoint_over_client_p50": json_ratio,
        "feast_serve_over_endpoint_p50": feast_ratio,
    }


def peak_rss_mb(pid: int | str = "self") -> float | None:
    """Peak RSS (``VmHWM``) of process ``pid`` in MB (Linux), else None."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def throughput(b: Bench, connections: int, seconds: float) -> dict[str, Any]:
    items = b.data.items.astype("<i8")
    query = f"/v1/features?user_id={b.data.user}&now={b.now}"
    out: dict[str, Any] = {}
    say(
        f"\n2. Throughput: {connections} kept-alive connections sending the binary request "
        f"back to back, {seconds:.0f} s per setting, on {os.cpu_count()} CPUs (Redis and this "
        "load generator included)"
    )
    for workers in (1, 2):
        with solaris_serve(b, workers) as (port, server):
            callers = [
                HttpCaller(port, query, items.tobytes(), "application/octet-stream")
                for _ in range(connections)
            ]
            expected = len(callers[0]()[2])
            for call in callers:
                call()
            counts = [[0, 0] for _ in callers]  # [complete, incomplete]
            stop = time.monotonic() + seconds

            def loop(call: HttpCaller, tally: list[int], stop: float, expected: int) -> None:
                while time.monotonic() < stop:
                    status, head, body = call()
                    ok = status == 200 and len(body) == expected and b"solaris-fetch: ok" in head
                    tally[0 if ok else 1] += 1

            threads = [
                threading.Thread(target=loop, args=(call, tally, stop, expected))
                for call, tally in zip(callers, counts, strict=True)
            ]
            started = time.monotonic()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed = time.monotonic() - started
            complete = sum(c[0] for c in counts)
            incomplete = sum(c[1] for c in counts)
            peaks = [peak_rss_mb(p) for p in [server.pid, *_children(server.pid)]]
            for call in callers:
                call.close()
        rate = complete / elapsed
        out[f"workers_{workers}"] = {
            "requests_per_s": rate,
            "complete": complete,
            "incomplete": incomplete,
            "peak_rss_mb": peaks,
        }
        shown = ", ".join(f"{p:.0f}" for p in peaks if p is not None)
        say(
            f"   --workers {workers}: {rate:8,.0f} requests/s; {complete:,} complete, "
            f"{incomplete:,} not; peak RSS per process (supervisor first) {shown} MB"
        )
    ratio = out["workers_2"]["requests_per_s"] / out["workers_1"]["requests_per_s"]
    verdict = "met" if ratio >= 1.6 else "NOT MET"
    say(f"   two workers / one: {ratio:.2f}x  (target >= 1.6: {verdict})")
    out["two_over_one"] = ratio
    return out


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis", default=REDIS_DEFAULT, help="Feast connection string")
    parser.add_argument("--candidates", type=int, default=300)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="small counts: a smoke run")
    parser.add_argument("--reps", type=int, help="default 1,000 (100 with --quick)")
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--seconds", type=float, help="default 20 (3 with --quick)")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args(argv)
    args.reps = args.reps or (100 if args.quick else 1000)
    args.seconds = args.seconds or (3.0 if args.quick else 20.0)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    report: dict[str, Any] = {}
    say("SOLARIS binary endpoint benchmark" + (" (--quick)" if args.quick else ""))
    with bench_context(args.redis, args.candidates, args.dim, args.seed) as b:
        report["latency"] = latency(b, args.reps, max(args.reps // 10, 10), args.seed)
        report["throughput"] = throughput(b, args.connections, args.seconds)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
