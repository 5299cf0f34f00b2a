"""From per-seed results to the report's figures: mean ± std, seed and user-bootstrap CIs."""

from __future__ import annotations

import numpy as np
import pandas as pd

from solaris.evaluation.metrics import summarize
from solaris.examples.movielens.report.coverage import equal_cost_coverage
from solaris.examples.movielens.report.seed import TR_VARIANTS
from solaris.examples.movielens.report.stats import (
    estimate,
    seed_interval,
    transfer_ratios,
    user_bootstrap,
)

__all__ = [
    "PAIRED",
    "curve",
    "dropout",
    "kd_choices",
    "pool_distillation",
    "selection",
    "summarise",
    "sweeps",
    "table1",
    "tier_coverage",
    "tier_value",
    "transfer",
]

# Paired TR differences (a − b), each with its user-bootstrap interval.
# z − shuffled: what the code says about the item beyond what it says about the user.
PAIRED = (
    ("VM+z (100% offline)", "VM+FM logits"),
    ("VM+z (100% offline)", "VM+KD"),
    ("VM+z (100% offline)", "placebo: z shuffled within user"),
)


def _ms(values) -> dict:
    mean, std = summarize(list(values))
    return {"mean": mean, "std": std}


def _ms_defined(values) -> dict:
    """:func:`_ms` where every value is defined, else NaN (a figure the data cannot give,
    e.g. an AUC with one class in the labels)."""
    vals = list(values)
    return _ms(vals) if np.isfinite(vals).all() else {"mean": np.nan, "std": np.nan}


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


def _losses(seeds: list[dict], task: str, **columns: str) -> dict[str, np.ndarray]:
    return {k: np.stack([s["row_losses"][task][c] for s in seeds]) for k, c in columns.items()}


def _ll(s: dict, task: str, name: str) -> np.float64:
    return np.float64(s["table1"][task][name]["logloss"])


def transfer(seeds: list[dict], n_boot: int) -> dict:
    """TR per task and variant, and the paired differences :data:`PAIRED`: per-seed values,
    seed CI and user-bootstrap CI (the same draws of users for every seed)."""
    users = seeds[0]["test_users"]
    out: dict = {}
    for task in seeds[0]["table1"]:
        out[task] = {}
        for name in TR_VARIANTS:
            per_seed = [
                float(transfer_ratios(_ll(s, task, "VM"), _ll(s, task, name), _ll(s, task, "FM")))
                for s in seeds
            ]
            boot = user_bootstrap(
                users,
                _losses(seeds, task, vm="VM", x=name, fm="FM"),
                lambda m: transfer_ratios(m["vm"], m["x"], m["fm"]),
                n_boot=n_boot,
                seed=0,
            )
            out[task][name] = {"per_seed": per_seed, **estimate(per_seed, boot).as_dict()}
        for a, b in PAIRED:
            per_seed = [
                float(
                    transfer_ratios(_ll(s, task, "VM"), _ll(s, task, a), _ll(s, task, "FM"))
                    - transfer_ratios(_ll(s, task, "VM"), _ll(s, task, b), _ll(s, task, "FM"))
                )
                for s in seeds
            ]
            boot = user_bootstrap(
                users,
                _losses(seeds, task, vm="VM", a=a, b=b, fm="FM"),
                lambda m: (
                    transfer_ratios(m["vm"], m["a"], m["fm"])
                    - transfer_ratios(m["vm"], m["b"], m["fm"])
                ),
                n_boot=n_boot,
                seed=0,
            )
            out[task][f"{a} − {b}"] = {"per_seed": per_seed, **estimate(per_seed, boot).as_dict()}
    return out


def selection(seeds: list[dict]) -> dict:
    """Per selector: AUC against the oracle label (within a request, pooled) and, per
    budget, the share of the random → oracle coverage gap it closes (per seed, then mean,
    std and seed interval)."""
    names = [k for k in seeds[0]["selector_auc"] if not k.startswith("_")]
    auc = {
        n: {
            k: _ms_defined(s["selector_auc"][n][k] for s in seeds)
            for k in ("within_request", "pooled")
        }
        for n in names
    }
    df = pd.concat([pd.DataFrame(s["sweeps"]).assign(seed=s["seed"]) for s in seeds])
    share = df[df["sweep"] == "share"].pivot_table(
        index=["seed", "value"], columns="selector", values="coverage"
    )
    closed = {}
    for n in names:
        frac = (share[n] - share["random"]) / (share["oracle"] - share["random"])
        closed[n] = []
        for value, g in frac.groupby(level="value"):
            vals = g.to_list()
            ci = list(seed_interval(vals)) if np.isfinite(vals).all() else [np.nan, np.nan]
            closed[n].append({"share": float(value), **_ms_defined(vals), "seed_ci95": ci})
    positive = _ms(s["selector_auc"]["_positive_rate"] for s in seeds)
    return {"auc": auc, "gap_closed": closed, "positive_rate": positive}


def curve(seeds: list[dict]) -> dict:
    """Table 2: gain vs coverage for random masking (fresh codes) and, per share, the
    replay's real misses with fresh codes and with the codes serving had; beside each real
    point, the random-masking gain interpolated at its coverage."""
    frames = [pd.DataFrame(s["curve"]).assign(seed=s["seed"]) for s in seeds]
    df = pd.concat(frames, ignore_index=True)
    rand = df[df["kind"] == "random"].copy()
    rand["target"] = np.tile(np.arange((df["kind"] == "random").sum() // len(seeds)), len(seeds))
    real = df[df["kind"] != "random"].copy()
    by_seed = {k: g.sort_values("coverage") for k, g in rand.groupby("seed")}
    real["gain_random"] = [
        float(np.interp(c, by_seed[k]["coverage"], by_seed[k]["gain"]))
        for k, c in zip(real["seed"], real["coverage"], strict=True)
    ]
    return {
        "random": [
            {"key": k, **{c: _ms(v[c]) for c in ("coverage", "gain", "logloss")}}
            for k, v in rand.groupby("target")
        ],
        "real": [
            {
                "kind": kind,
                "share": share,
                **{
                    c: _ms(v[c])
                    for c in ("coverage", "gain", "logloss", "gain_random", "fm_passes")
                },
            }
            for (kind, share), v in real.groupby(["kind", "share"], sort=False)
        ],
    }


def tier_coverage(seeds: list[dict]) -> dict:
    """Coverage of the test rows per tier and rule (served, exact-time upper bound, ...),
    and the neighbour tier's diagnostics of pair misses."""
    df = pd.concat([pd.DataFrame(s["tier_coverage"]) for s in seeds])
    rows = [
        {"tier": t, "rule": r, "coverage": _ms(v["coverage"])}
        for (t, r), v in df.groupby(["tier", "rule"], sort=False)
    ]
    keys = seeds[0]["nbr_diagnostics"]
    diag = {k: _ms(s["nbr_diagnostics"][k] for s in seeds) for k in keys}
    return {"rows": rows, "nbr_diagnostics": diag}


def tier_value(seeds: list[dict], n_boot: int) -> dict:
    """Gain of each served tier set, and each imputed tier against the real code on the same
    rows: value ratio = mean gain imputed / mean gain real (means over seeds), with user
    bootstrap intervals; the ratio is suppressed unless the real gain's interval is above 0."""
    df = pd.concat([pd.DataFrame(s["tier_value"]) for s in seeds])
    rows = [
        {"tiers": k, **{c: _ms(v[c]) for c in ("coverage", "gain", "logloss")}}
        for k, v in df.groupby("tiers", sort=False)
    ]
    users = seeds[0]["test_users"]
    vm = np.stack([s["tier_row_losses"]["vm"] for s in seeds])
    ratios = []
    for name in [r["tier"] for r in seeds[0]["imputed_vs_real"]]:
        draws = {}
        for kind in ("imputed", "real"):
            losses = {"vm": vm, "x": np.stack([s["tier_row_losses"][name][kind] for s in seeds])}
            draws[kind] = user_bootstrap(
                users, losses, lambda m: m["vm"] - m["x"], n_boot=n_boot, seed=0
            )
        per = [next(r for r in s["imputed_vs_real"] if r["tier"] == name) for s in seeds]
        gain_imp = float(np.mean([r["gain_imputed"] for r in per]))
        gain_real = float(np.mean([r["gain_real"] for r in per]))
        ci = lambda d: [float(np.percentile(d, 2.5)), float(np.percentile(d, 97.5))]  # noqa: E731
        real_ci = ci(draws["real"])
        defined = real_ci[0] > 0  # a ratio to a gain that may be 0 or negative is noise
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio_draws = draws["imputed"] / draws["real"]
        ratios.append(
            {
                "tier": name,
                "coverage": _ms(r["coverage"] for r in per),
                "gain_imputed": {"mean": gain_imp, "user_bootstrap_ci95": ci(draws["imputed"])},
                "gain_real": {"mean": gain_real, "user_bootstrap_ci95": real_ci},
                "ratio": (
                    {"mean": gain_imp / gain_real, "user_bootstrap_ci95": ci(ratio_draws)}
                    if defined
                    else None
                ),
            }
        )
    iagg = {k: _ms_defined(s["iagg_by_item"][k] for s in seeds) for k in seeds[0]["iagg_by_item"]}
    return {"tiers": rows, "imputed_vs_real": ratios, "iagg_by_item": iagg}


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


def pool_distillation(seeds: list[dict]) -> list[dict]:
    """The seeds with one distillation weight per task: the lowest validation log-loss
    averaged over every seed and initialisation (never test). Chosen per seed, the weight
    flips between neighbours whose validation losses differ by less than their noise, and
    each flip moves that seed's TR: the spread then measures the choice, not the method.
    Each seed's ``VM+KD`` figures become its fits at the pooled weight; its own choice is
    kept as ``per_seed_choice``. Pure, and pooling pooled seeds changes nothing."""
    out = [{**s, "kd": dict(s["kd"]), "table1": dict(s["table1"])} for s in seeds]
    if "row_losses" in seeds[0]:
        for s in out:
            s["row_losses"] = dict(s["row_losses"])
    for task in seeds[0]["kd"]:
        weights = list(seeds[0]["kd"][task]["val_logloss"])
        val = {w: float(np.mean([s["kd"][task]["val_logloss"][w] for s in seeds])) for w in weights}
        best = min(val, key=val.__getitem__)
        for s in out:
            kd = s["kd"][task]
            s["kd"][task] = {
                **kd,
                "per_seed_choice": kd.get("per_seed_choice", kd["chosen"]),
                "chosen": float(best),
                "at_edge": bool(float(best) == max(map(float, weights)) and float(best) > 0),
                "pooled_val_logloss": val,
            }
            s["table1"][task] = {**s["table1"][task], "VM+KD": s["kd_scores"][task][best]}
            if "row_losses" in s:
                s["row_losses"][task] = {
                    **s["row_losses"][task],
                    "VM+KD": s["kd_row_losses"][task][best],
                }
    return out


def kd_choices(seeds: list[dict]) -> dict:
    """The pooled distillation weight per task (:func:`pool_distillation`'d seeds)."""
    return {
        task: {
            "chosen": seeds[0]["kd"][task]["chosen"],
            "at_edge": seeds[0]["kd"][task]["at_edge"],
            "per_seed_choice": [s["kd"][task]["per_seed_choice"] for s in seeds],
            "n_inits": seeds[0]["kd"][task]["n_inits"],
            "n_seeds": len(seeds),
            "val_logloss": seeds[0]["kd"][task]["pooled_val_logloss"],
        }
        for task in seeds[0]["kd"]
    }


def summarise(seeds: list[dict], n_boot: int) -> dict:
    seeds = pool_distillation(seeds)
    return {
        "table1": table1(seeds),
        "transfer_ratio": transfer(seeds, n_boot),
        "kd": kd_choices(seeds),
        "selection": selection(seeds),
        "curve": curve(seeds),
        "tier_coverage": tier_coverage(seeds),
        "tier_value": tier_value(seeds, n_boot),
        "dropout": dropout(seeds),
        "sweeps": sweeps(seeds),
        "fm_versions": [s["fm_version"] for s in seeds],
    }
