"""The embedding stage on CUDA with bf16 against CPU float32: throughput and code agreement.

    python -m bench.gpu                      # 10^6 pairs; about 2 minutes on one GPU
    python -m bench.gpu --pairs 200000 --json out.json
    python -m bench.gpu --prefetch 8         # the CUDA cycle with 8 feature threads

Needs a CUDA device (it exits with a message otherwise). On the seeded synthetic log (the
generator of ``bench.scale``) it takes the distinct (user, item) pairs of the first
``--pairs`` candidate rows and embeds them, as of the log's end, with two FMs, each seeded
and untrained (cost does not depend on the weights): the example ``PairTowerFM`` the cycle
ships (``shared_dim`` 24) and a wider one (embedding 128, hidden 1024, ``shared_dim`` 256)
standing in for a real FM, whose arithmetic a GPU is for.

Per FM, timed as medians of ``--reps`` interleaved runs after a warm-up (CUDA synchronised):

* ``cycle embed_pairs`` on CPU (float32) and on CUDA (``device="cuda"``: the same call the
  embedding task makes, bf16 autocast), features built on the CPU ahead of the GPU by
  ``embed.prefetch_batches`` worker threads (``--prefetch``), and once more on CUDA with
  ``prefetch=0``, the sequential loop (each batch's features built, then encoded);
* ``forward only`` on CUDA, bf16 and float32: the FM's shared layers and the autoencoder on
  batches already on the GPU (what the GPU itself can do).

Per FM, the report gives the CUDA cycle's rate as a share of the bf16 forward-only rate
(the GPU kept busy: the target is at least 50% for the wide FM), and how many batches were
prefetched.

Codes: the CUDA bf16 codes against the CPU float32 codes (max and mean absolute difference,
relative L2 error, cosine similarity), beside the CUDA float32 codes against CPU (device
arithmetic alone) and the float16 rounding every stored code already gets (the ``pair``
view's codec), the yardstick for whether bf16 matters downstream; and the prefetched CUDA
codes against the sequential CUDA codes (the same kernels: expected equal or nearly).

``DEVICE = "cpu"`` (set on the module) smoke-tests the script's logic without a GPU.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

BATCH_SIZE = 8192  # embed_pairs' default batch
FM_VERSION = "bench-gpu"
DEVICE = "cuda"  # a smoke run of the script's logic without a GPU may set "cpu"
FMS = {
    "example FM (shared 24)": {"embed_dim": 16, "hidden_dim": 64, "shared_dim": 24},
    "wide FM (shared 256)": {"embed_dim": 128, "hidden_dim": 1024, "shared_dim": 256},
}


def _pairs(rows: int, seed: int):
    import pyarrow as pa

    from solaris.data.synthetic import SyntheticSpec, generate_candidates

    spec = SyntheticSpec(n_pairs=rows, seed=seed)
    log = pa.concat_tables(generate_candidates(spec))
    frame = log.select(["user_id", "item_id"]).to_pandas()
    pairs = frame.drop_duplicates(ignore_index=True)
    end = int(log["ts"].to_numpy().max()) + 1
    return spec, log, pairs, end


def _models(spec, log, shape: dict[str, int], z_dim: int, seed: int):
    import torch

    from solaris.examples.synthetic import LogFeatures, PairTowerFM, SyntheticFoundationModel
    from solaris.models.autoencoder import Autoencoder

    torch.manual_seed(seed)
    module = PairTowerFM(user_buckets=64, n_items=spec.n_items, **shape)
    fm = SyntheticFoundationModel(module, LogFeatures.from_table(log), FM_VERSION)
    ae = Autoencoder(in_dim=fm.shared_dim, z_dim=z_dim, hidden=2 * fm.shared_dim)
    return fm, ae


def _codes(table) -> np.ndarray:
    return np.stack(table["z"].to_numpy(zero_copy_only=False)).astype(np.float32)


def _forward(fm, ae, batches: list, *, bf16: bool) -> list:
    import torch

    with torch.inference_mode(), torch.autocast(DEVICE, dtype=torch.bfloat16, enabled=bf16):
        return [ae.encode(fm.module.shared(b)).float() for b in batches]


def _agreement(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """How far codes ``a`` are from the reference ``b``."""
    diff = np.abs(a - b)
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1) + 1e-12)
    return {
        "max_abs": float(diff.max()),
        "mean_abs": float(diff.mean()),
        "rel_l2": float(np.linalg.norm(a - b) / np.linalg.norm(b)),
        "cos_min": float(cos.min()),
        "cos_median": float(np.median(cos)),
    }


def _synchronize() -> None:
    import torch

    if DEVICE == "cuda":
        torch.cuda.synchronize()


def _timed(variants: dict[str, Callable[[], object]], reps: int, seed: int) -> dict[str, float]:
    """Median seconds of ``reps`` runs of each variant, interleaved in a shuffled order."""
    for run in variants.values():  # warm-up: CUDA context, kernels, allocator
        run()
    _synchronize()
    order = [name for name in variants for _ in range(reps)]
    random.Random(seed).shuffle(order)
    times: dict[str, list[float]] = {name: [] for name in variants}
    for name in order:
        _synchronize()
        start = time.perf_counter()
        variants[name]()
        _synchronize()
        times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def bench_fm(name: str, shape: dict[str, int], args, spec, log, pairs, end) -> dict[str, Any]:
    import torch

    from solaris.pipeline.embed import embed_pairs, prefetch_batches
    from solaris.store.codec import f16_round

    fm, ae = _models(spec, log, shape, args.z_dim, args.seed)
    users = pairs["user_id"].to_numpy(np.int64)
    items = pairs["item_id"].to_numpy(np.int64)
    ts = np.full(len(pairs), end, np.int64)

    def cycle(device: str, prefetch: int | None = None):
        return embed_pairs(
            pairs,
            fm=fm,
            autoencoder=ae,
            computed_at=end,
            fm_version=FM_VERSION,
            device=device,
            prefetch=prefetch,
        )

    prefetch = prefetch_batches(DEVICE, args.prefetch)  # what the CUDA cycle below uses
    cpu_codes = _codes(cycle("cpu"))
    sequential_codes = _codes(cycle(DEVICE, prefetch=0))
    gpu_codes = _codes(cycle(DEVICE, args.prefetch))  # leaves the models on the GPU
    batches = [
        fm.features(users[s : s + BATCH_SIZE], items[s : s + BATCH_SIZE], ts[s : s + BATCH_SIZE])
        for s in range(0, len(pairs), BATCH_SIZE)
    ]
    batches = [b.to(DEVICE) for b in batches]
    fp32_codes = torch.cat(_forward(fm, ae, batches, bf16=False)).cpu().numpy()

    def forward(bf16: bool) -> Callable[[], object]:
        return lambda: (fm.to(DEVICE), ae.to(DEVICE), _forward(fm, ae, batches, bf16=bf16))

    seconds = _timed(
        {
            "cycle embed_pairs, CPU fp32": lambda: (fm.to("cpu"), cycle("cpu")),
            "cycle embed_pairs, CUDA bf16": lambda: cycle(DEVICE, args.prefetch),
            "cycle embed_pairs, CUDA bf16, sequential": lambda: cycle(DEVICE, prefetch=0),
            "forward only, CUDA bf16": forward(bf16=True),
            "forward only, CUDA fp32": forward(bf16=False),
        },
        args.reps,
        args.seed,
    )
    # Moving the models is part of every embed_pairs call (and of its timing above); the
    # forward-only variants move them back first, a few microseconds for these sizes.
    forward_bf16 = seconds["forward only, CUDA bf16"]
    return {
        "fm": name,
        "shape": shape,
        "pairs": len(pairs),
        "prefetch": prefetch,
        "rows_per_s": {k: len(pairs) / s for k, s in seconds.items()},
        "seconds": seconds,
        # The yardstick: the cycle's rate over the GPU's own bf16 rate.
        "share_of_forward_bf16": {
            "prefetched": forward_bf16 / seconds["cycle embed_pairs, CUDA bf16"],
            "sequential": forward_bf16 / seconds["cycle embed_pairs, CUDA bf16, sequential"],
        },
        "bf16_vs_cpu_fp32": _agreement(gpu_codes, cpu_codes),
        "cuda_fp32_vs_cpu_fp32": _agreement(fp32_codes, cpu_codes),
        "f16_storage_vs_fp32": _agreement(f16_round(cpu_codes), cpu_codes),
        "prefetch_vs_sequential": _agreement(gpu_codes, sequential_codes),
    }


def report(results: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    print(
        f"\n{meta['gpu']}, torch {meta['torch']}, {meta['cpu_threads']} CPU threads; "
        f"{results[0]['pairs']:,} distinct pairs of {meta['rows']:,} candidate rows, "
        f"z_dim {meta['z_dim']}, batches of {BATCH_SIZE}"
    )
    for r in results:
        rate = r["rows_per_s"]
        cpu = rate["cycle embed_pairs, CPU fp32"]
        print(f"\n{r['fm']}")
        for variant, value in rate.items():
            print(f"  {variant:<40} {value:>14,.0f} pairs/s  {value / cpu:>7.2f}x CPU")
        share = r["share_of_forward_bf16"]
        how = f"prefetch {r['prefetch']}" if r["prefetch"] else "sequential, prefetch 0"
        print(
            f"  cycle embed_pairs CUDA / forward only CUDA bf16: {share['prefetched']:.1%} "
            f"({how}; target >= 50% for the wide FM), sequential loop {share['sequential']:.1%}"
        )
        for label in (
            "bf16_vs_cpu_fp32",
            "cuda_fp32_vs_cpu_fp32",
            "f16_storage_vs_fp32",
            "prefetch_vs_sequential",
        ):
            a = r[label]
            print(
                f"  codes {label:<24} max|d| {a['max_abs']:.2e}  mean|d| {a['mean_abs']:.2e}  "
                f"rel L2 {a['rel_l2']:.2e}  cos min {a['cos_min']:.5f}  "
                f"median {a['cos_median']:.6f}"
            )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=1_000_000, help="candidate rows read")
    parser.add_argument("--z-dim", type=int, default=32)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--prefetch",
        type=int,
        help="batches the CUDA cycle builds ahead in threads (default: embed's choice for CUDA)",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    import torch

    if DEVICE == "cuda" and not torch.cuda.is_available():
        sys.exit("bench.gpu needs a CUDA device; torch sees none (the CPU path: bench.scale)")
    spec, log, pairs, end = _pairs(args.pairs, args.seed)
    meta = {
        "gpu": torch.cuda.get_device_name() if DEVICE == "cuda" else DEVICE,
        "torch": torch.__version__,
        "cpu_threads": torch.get_num_threads(),
        "rows": args.pairs,
        "z_dim": args.z_dim,
    }
    results = []
    for name, shape in FMS.items():
        print(f"{name} ...", flush=True)
        results.append(bench_fm(name, shape, args, spec, log, pairs, end))
    report(results, meta)
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "results": results}, indent=2))


if __name__ == "__main__":
    main()
