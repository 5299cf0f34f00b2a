"""From per-seed results to the report's figures: mean ± std, seed and user-bootstrap CIs."""

from __future__ import annotations

import numpy as np
import pandas as pd

from solaris.evaluation.metrics import summarize
from solaris.examples.movielens.report.coverage import equal_cost_coverage
from solaris.examples.movielens.report.stats import estimate, transfer_ratios, user_bootstrap

__all__ = [
    "TR_VARIANTS",
    "curve",
    "dropout",
    "kd_choices",
    "summarise",
    "sweeps",
    "table1",
    "tier_value",
    "transfer",
]

TR_VARIANTS = ("VM+KD", "VM+z (100% offline)", "VM+SOLARIS tiers (replay)")


def _ms(values) -> dict:
    mean, std = summarize(list(values))
    return {"mean": mean, "std": std}


def table1(seeds: list[dict]) -> dict:
    out: dict = {}
    for task, variants in seeds[0]["table1"].items():
        out[task] = {
            name: {
                m: _ms(s["table1"][task][name][m] for s in seeds) for m in ("logloss", "ne", "auc")
            }
            for name in variants
        }
    return out


def transfer(seeds: list[dict], n_boot: int) -> dict:
    """TR per task and variant: per-seed values, seed CI and user-bootstrap CI."""
    users = seeds[0]["test_users"]
    out: dict = {}
    for task in seeds[0]["table1"]:
        out[task] = {}
        for name in TR_VARIANTS:
            per_seed = [
                float(
                    transfer_ratios(
                        np.float64(s["table1"][task]["VM"]["logloss"]),
                        np.float64(s["table1"][task][name]["logloss"]),
                        np.float64(s["table1"][task]["FM"]["logloss"]),
                    )
                )
                for s in seeds
            ]
            losses = {
                key: np.stack([s["row_losses"][task][col] for s in seeds])
                for key, col in (("vm", "VM"), ("x", name), ("fm", "FM"))
            }
            boot = user_bootstrap(
                users,
                losses,
                lambda m: transfer_ratios(m["vm"], m["x"], m["fm"]),
                n_boot=n_boot,
                seed=0,
            )
            out[task][name] = {"per_seed": per_seed, **estimate(per_seed, boot).as_dict()}
    return out


def curve(seeds: list[dict]) -> dict:
    """Coverage curve (gain vs coverage) for random masking and real misses, and the gap."""
    frames = [pd.DataFrame(s["curve"]).assign(seed=s["seed"]) for s in seeds]
    df = pd.concat(frames, ignore_index=True)
    rand = df[df["kind"] == "random"].copy()
    rand["target"] = np.tile(np.arange((df["kind"] == "random").sum() // len(seeds)), len(seeds))
    real = df[df["kind"] == "real"]
    gaps = []
    for seed, g in real.groupby("seed"):
        rs = rand[rand["seed"] == seed].sort_values("coverage")
        for _, row in g.iterrows():
            g_rand = float(np.interp(row["coverage"], rs["coverage"], rs["gain"]))
            gaps.append(
                {
                    "seed": seed,
                    "share": row["share"],
                    "coverage": row["coverage"],
                    "gain_real": row["gain"],
                    "gain_random_at_same_coverage": g_rand,
                }
            )
    gap = pd.DataFrame(gaps)
    agg = lambda f, key: [  # noqa: E731
        {"key": k, **{c: _ms(v[c]) for c in ("coverage", "gain", "logloss")}}
        for k, v in f.groupby(key)
    ]
    return {
        "random": agg(rand, "target"),
        "real": agg(real, "share"),
        "gap": [
            {
                "share": k,
                "coverage": _ms(v["coverage"]),
                "gain_real": _ms(v["gain_real"]),
                "gain_random": _ms(v["gain_random_at_same_coverage"]),
            }
            for k, v in gap.groupby("share")
        ],
    }


def tier_value(seeds: list[dict]) -> dict:
    df = pd.concat([pd.DataFrame(s["tier_value"]) for s in seeds])
    rows = [
        {"tiers": k, **{c: _ms(v[c]) for c in ("coverage", "gain", "logloss")}}
        for k, v in df.groupby("tiers", sort=False)
    ]
    imp = pd.concat([pd.DataFrame(s["imputed_vs_real"]) for s in seeds])
    imp = imp.assign(ratio=imp["gain_imputed"] / imp["gain_real"])
    ratios = [
        {"tier": k, **{c: _ms(v[c]) for c in ("coverage", "gain_imputed", "gain_real", "ratio")}}
        for k, v in imp.groupby("tier", sort=False)
    ]
    return {"tiers": rows, "imputed_vs_real": ratios}


def dropout(seeds: list[dict]) -> dict:
    names = list(seeds[0]["dropout"]["variants"])
    labels = ["no dropout", "dropout at served coverage", "trained on served misses"]
    return {
        "served_train_coverage": _ms(s["dropout"]["served_train_coverage"] for s in seeds),
        "variants": {
            lab: _ms(
                s["dropout"]["variants"][list(s["dropout"]["variants"])[k]]["logloss"]
                for s in seeds
            )
            for k, lab in enumerate(labels[: len(names)])
        },
    }


def sweeps(seeds: list[dict]) -> dict:
    df = pd.concat([pd.DataFrame(s["sweeps"]).assign(seed=s["seed"]) for s in seeds])
    rows = [
        {
            "sweep": sw,
            "selector": sel,
            "value": val,
            "coverage": _ms(g["coverage"]),
            "fm_passes_per_1k_requests": _ms(g["fm_passes_per_1k_requests"]),
        }
        for (sw, sel, val), g in df.groupby(["sweep", "selector", "value"], sort=False)
    ]
    equal = []
    for _seed, g in df.groupby("seed"):
        ttl_curve = g[(g["sweep"] == "ttl") & (g["selector"] == "verifier")]
        for _, row in g[g["sweep"] == "activity_ttl"].iterrows():
            equal.append(
                {
                    "power": row["value"],
                    "coverage": row["coverage"],
                    "passes": row["fm_passes_per_1k_requests"],
                    "fixed_ttl_coverage": equal_cost_coverage(
                        ttl_curve, row["fm_passes_per_1k_requests"]
                    ),
                }
            )
    eq = pd.DataFrame(equal)
    activity = [
        {
            "power": k,
            "coverage": _ms(v["coverage"]),
            "passes": _ms(v["passes"]),
            "fixed_ttl_coverage_at_equal_cost": _ms(v["fixed_ttl_coverage"]),
        }
        for k, v in eq.groupby("power")
    ]
    return {"points": rows, "activity_ttl": activity}


def kd_choices(seeds: list[dict]) -> dict:
    return {
        task: {
            "chosen": [s["kd"][task]["chosen"] for s in seeds],
            "at_edge": [s["kd"][task]["at_edge"] for s in seeds],
            "at_domain_boundary": [s["kd"][task]["at_domain_boundary"] for s in seeds],
            "val_logloss": [s["kd"][task]["val_logloss"] for s in seeds],
        }
        for task in seeds[0]["kd"]
    }


def summarise(seeds: list[dict], n_boot: int) -> dict:
    return {
        "table1": table1(seeds),
        "transfer_ratio": transfer(seeds, n_boot),
        "kd": kd_choices(seeds),
        "curve": curve(seeds),
        "tier_value": tier_value(seeds),
        "dropout": dropout(seeds),
        "sweeps": sweeps(seeds),
        "fm_versions": [s["fm_version"] for s in seeds],
    }
