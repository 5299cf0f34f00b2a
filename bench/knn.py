"""Cost of the user KNN (the clustering's ``unn`` step) against the number of users.

Run: ``.venv/bin/python -m bench.knn`` (U = 10^4, 10^5, 10^6 users, ``d`` = 32, ``k`` = 100,
the default ``store.n_neighbors``); ``--sizes 1e4,1e5`` to pick, ``--quick`` for 10^4 and
3·10^4. Prints one table.

Why: the old ``nearest_users`` was scikit-learn brute force over all users in one process
(``seconds ~ U^1.27``); :class:`solaris.pipeline.neighbors.UserIndex` builds one faiss index
over all users and queries it per partition. The bench times, per method and size, the build
and the query of *every* user (the whole clustering run, whatever the partitioning), and
reports:

* ``hnsw``: ``UserIndex.build(..., exact_below=0)`` (``IndexHNSWFlat``, single-threaded
  build) + ``query`` of all users; recall@k against exact neighbours on ``--recall-queries``
  sampled users (reference: a faiss flat inner-product search, self dropped);
* ``flat``: ``UserIndex`` forced exact (``IndexFlatIP``), sizes up to ``--flat-max``;
* ``sklearn``: the old code's search (``NearestNeighbors(metric="cosine",
  algorithm="brute")``, ``k + 1``, self dropped), sizes up to ``--sklearn-max``;
* ``blob MB``: the size of ``UserIndex.to_bytes()``, the object stored per clustering run.

``nearest_users`` is ``flat`` below 50,000 eligible users and ``hnsw`` from there on.

Embeddings are seeded standard-normal ``[U, d]`` float32 rows (``--data clustered`` for a
mixture of ``U / 100`` Gaussian clusters): uniform directions on the sphere are the hard case
for a graph index, so their recall is a floor for real embeddings, which cluster.

Each (method, size) runs in a fresh process (``--child``) so its peak resident set is its
own: the peak (``VmHWM``) is reset through ``/proc/self/clear_refs`` after the data is made,
and the table shows it and its growth over the RSS before the build. The exponent ``b`` of
``seconds ~ U^b`` is a least-squares fit of ``log seconds`` on ``log U`` over the sizes run.
``cpu s`` is the child's user + system CPU time over build and query; the core count and
the load average are printed, since other work on the machine inflates the wall seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

__all__ = ["fit_exponent", "main", "run_child"]

METHODS = ("hnsw", "flat", "sklearn")


def _status_mb(field: str) -> float | None:
    """``VmRSS`` / ``VmHWM`` of this process in MB (Linux), else None."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _reset_peak() -> None:
    """Reset this process's peak RSS (``VmHWM``); a no-op where the kernel does not allow it."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


def fit_exponent(sizes: list[int], seconds: list[float]) -> float:
    """``b`` of ``seconds ~ U^b``: least squares of ``log seconds`` on ``log U``."""
    return float(np.polyfit(np.log(sizes), np.log(seconds), 1)[0])


def _data(n: int, d: int, kind: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Seeded ``(user_ids, emb)``: ids spread over int64 (not positions), emb float32."""
    rng = np.random.default_rng(seed)
    ids = rng.choice(np.int64(1) << 40, size=n, replace=False).astype(np.int64)
    if kind == "clustered":
        centres = rng.standard_normal((max(n // 100, 1), d)).astype(np.float32)
        emb = centres[rng.integers(0, len(centres), n)] + 0.3 * rng.standard_normal(
            (n, d), dtype=np.float32
        )
    else:
        emb = rng.standard_normal((n, d), dtype=np.float32)
    return ids, emb


def _sklearn_knn(emb: np.ndarray, k: int) -> np.ndarray:
    """The old ``nearest_users`` search: positions ``[U, k]`` (self dropped, unsorted ties)."""
    from sklearn.neighbors import NearestNeighbors

    x64 = emb.astype(np.float64)
    m = len(x64)
    nn = NearestNeighbors(n_neighbors=k + 1, metric="cosine", algorithm="brute").fit(x64)
    _, idx = nn.kneighbors(x64, return_distance=True)
    is_self = idx == np.arange(m)[:, None]
    is_self[~is_self.any(axis=1), -1] = True
    return idx[~is_self].reshape(m, k)


def _recall(index: object, ids: np.ndarray, table: object, k: int, n_queries: int) -> float:
    """Mean recall@k of ``table``'s neighbour lists on ``n_queries`` sampled users, against
    an exact faiss flat search over the index's unit vectors."""
    import faiss

    xb = index._xb  # the stored unit vectors
    rng = np.random.default_rng(1)
    q = np.sort(rng.choice(len(ids), size=min(n_queries, len(ids)), replace=False))
    flat = faiss.IndexFlatIP(xb.shape[1])
    flat.add(xb)
    _, lab = flat.search(xb[q], k + 1)
    hits = 0
    for row, user in enumerate(q):
        ref = lab[row][lab[row] != user][:k]
        hits += len(np.intersect1d(ids[ref], table["nbr_ids"].iat[user]))
    return hits / (len(q) * k)


def run_child(method: str, n: int, d: int, k: int, data: str, n_queries: int) -> dict:
    """One (method, size) measurement in this process; the figures as a dict."""
    from solaris.pipeline.neighbors import UserIndex

    ids, emb = _data(n, d, data)
    start_mb = _status_mb("VmRSS")
    _reset_peak()
    out: dict = {"method": method, "n": n}
    cpu0 = os.times()
    t0 = time.perf_counter()
    if method == "sklearn":
        _sklearn_knn(emb, k)
        out["build_s"] = 0.0
    else:
        index = UserIndex.build(ids, emb, exact_below=0 if method == "hnsw" else n + 1)
        t1 = time.perf_counter()
        out["build_s"] = t1 - t0
        table = index.query(ids, k)
    out["total_s"] = time.perf_counter() - t0
    out["query_s"] = out["total_s"] - out["build_s"]
    cpu1 = os.times()
    out["cpu_s"] = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    out["peak_mb"] = _status_mb("VmHWM")
    out["start_mb"] = start_mb
    if method != "sklearn":
        out["blob_mb"] = len(index.to_bytes()) / 2**20
        out["recall"] = _recall(index, ids, table, k, n_queries)
    return out


def _parse_sizes(text: str) -> list[int]:
    return sorted({int(float(s.replace("_", ""))) for s in text.split(",") if s.strip()})


def main(argv: list[str] | None = None) -> None:
    """Run every (method, size) in a child process and print the table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="1e4,1e5,1e6")
    p.add_argument("--quick", action="store_true", help="sizes 1e4,3e4")
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--k", type=int, default=100)
    p.add_argument("--data", choices=("random", "clustered"), default="random")
    p.add_argument("--flat-max", type=float, default=1e5)
    p.add_argument("--sklearn-max", type=float, default=1e5)
    p.add_argument("--recall-queries", type=int, default=10_000)
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--child", nargs=2, metavar=("METHOD", "N"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        res = run_child(a.child[0], int(a.child[1]), a.dim, a.k, a.data, a.recall_queries)
        print(json.dumps(res))
        return

    sizes = _parse_sizes("1e4,3e4" if a.quick else a.sizes)
    limits = {"hnsw": math.inf, "flat": a.flat_max, "sklearn": a.sklearn_max}
    load = os.getloadavg()[0]
    print(f"user KNN: d={a.dim} k={a.k} data={a.data} cores={os.cpu_count()} load={load:.1f}")
    head = (
        f"{'method':8} {'U':>9} {'build s':>8} {'query s':>8} {'total s':>8} {'cpu s':>8} "
        f"{'peak MB':>8} {'+MB':>7} {'blob MB':>8} {'recall':>7}"
    )
    print(head, flush=True)
    results: dict[str, list[dict]] = {}
    for method in a.methods.split(","):
        for n in sizes:
            if n > limits[method]:
                continue
            cmd = [sys.executable, "-m", "bench.knn", "--child", method, str(n)]
            cmd += ["--dim", str(a.dim), "--k", str(a.k), "--data", a.data]
            cmd += ["--recall-queries", str(a.recall_queries)]
            done = subprocess.run(cmd, capture_output=True, text=True, check=True)
            r = json.loads(done.stdout.strip().splitlines()[-1])
            results.setdefault(method, []).append(r)
            blob = f"{r['blob_mb']:8.1f}" if "blob_mb" in r else f"{'-':>8}"
            rec = f"{r['recall']:7.4f}" if "recall" in r else f"{'-':>7}"
            print(
                f"{method:8} {n:>9,} {r['build_s']:8.2f} {r['query_s']:8.2f} "
                f"{r['total_s']:8.2f} {r['cpu_s']:8.1f} {r['peak_mb']:8.0f} "
                f"{r['peak_mb'] - r['start_mb']:7.0f} "
                f"{blob} {rec}",
                flush=True,
            )
    for method, rows in results.items():
        if len(rows) >= 2:
            b = fit_exponent([r["n"] for r in rows], [r["total_s"] for r in rows])
            print(f"{method}: total seconds ~ U^{b:.2f} over U = {[r['n'] for r in rows]}")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} (other work skews the seconds)")


if __name__ == "__main__":
    main()
