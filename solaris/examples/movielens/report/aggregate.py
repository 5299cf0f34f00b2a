"""From the runs' results (one seed in one rolling-origin window each) to the report's
figures: mean ± std over runs, each window's mean, and the joint seed × user bootstrap
interval (:func:`solaris.examples.movielens.report.stats.joint_bootstrap`)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from solaris.evaluation.metrics import summarize
from solaris.examples.movielens.report.coverage import equal_cost_coverage
from solaris.examples.movielens.report.seed import (
    BLIND,
    BLIND_Z,
    CAUSAL_PLACEBO,
    KD,
    LOGITS,
    TIERS,
    TR_VARIANTS,
    USER_CONTROL,
    Z,
)
from solaris.examples.movielens.report.stats import (
    WindowLosses,
    estimate,
    joint_bootstrap,
    transfer_ratios,
)

__all__ = [
    "BLIND_TR",
    "FM_GAP",
    "FM_GAP_BLIND",
    "PAIRED",
    "by_window",
    "curve",
    "dropout",
    "gains",
    "kd_choices",
    "pool_distillation",
    "selection",
    "summarise",
    "sweeps",
    "table1",
    "tier_coverage",
    "tier_value",
    "transfer",
    "windows",
]

BLIND_TR = "z on the user-blind VM, against it (before)"
# Paired TR differences (a − b), each with its joint interval.
# z − the user's own earlier code: what the code says about the item beyond what it says
# about the user (causally); tiers − another user's code: the served tiers against the null.
PAIRED = (
    (Z, LOGITS),
    (Z, KD),
    (Z, USER_CONTROL),
    (TIERS, CAUSAL_PLACEBO),
)


def _ms(values) -> dict[str, Any]:
    mean, std = summarize(list(values))
    return {"mean": mean, "std": std}


def _ms_defined(values) -> dict[str, Any]:
    """:func:`_ms` where every value is defined, else NaN (a figure the data cannot give,
    e.g. an AUC with one class in the labels)."""
    vals = list(values)
    return _ms(vals) if np.isfinite(vals).all() else {"mean": np.nan, "std": np.nan}


def table1(seeds: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for task, variants in seeds[0]["table1"].items():
        out[task] = {
            name: {
                m: _ms(s["table1"][task][name][m] for s in seeds) for m in ("logloss", "ne", "auc")
            }
            for name in variants
        }
    return out


def by_window(runs: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The runs grouped by window, oldest window first."""
    keys = sorted({r.get("window", 0) for r in runs})
    return [[r for r in runs if r.get("window", 0) == k] for k in keys]


def _ll(s: dict[str, Any], task: str, name: str) -> np.float64:
    return np.float64(s["table1"][task][name]["logloss"])


def _tr(s: dict[str, Any], task: str, name: str, vm: str = "VM") -> float:
    return float(transfer_ratios(_ll(s, task, vm), _ll(s, task, name), _ll(s, task, "FM")))


def _row_losses(
    runs: list[dict[str, Any]],
    pick: Callable[[dict[str, Any]], dict[str, np.ndarray]],
    columns: dict[str, str],
    users: Callable[[dict[str, Any]], np.ndarray] = lambda run: run["test_users"],
) -> list[WindowLosses]:
    """Each window's :class:`WindowLosses`: its rows' ``users(run)`` and, per ``column``,
    the per-row arrays ``pick(run)[column]`` of its runs."""
    return [
        WindowLosses(
            users(w[0]), {k: np.stack([pick(s)[c] for s in w]) for k, c in columns.items()}
        )
        for w in by_window(runs)
    ]


def _hit_users(run: dict[str, Any], part: str) -> np.ndarray:
    """The users of a run's labelled impressions in ``part`` (validation or test)."""
    users: np.ndarray = run["selection_hits"][part]["users"]
    return users


def _imputed_or_real(run: dict[str, Any], tier: str, kind: str) -> dict[str, np.ndarray]:
    """The VM's per-row losses and those of an imputed tier or its real codes."""
    losses = run["tier_row_losses"]
    return {"vm": losses["vm"], "x": losses[tier][kind]}


def _figure(runs: list[dict[str, Any]], per_run, draws: np.ndarray) -> dict[str, Any]:
    """``per_run(run)`` of every run, with its estimate and the bootstrap ``draws``."""
    values = [[per_run(s) for s in w] for w in by_window(runs)]
    flat = [v for w in values for v in w]
    return {"per_run": flat, **estimate(values, draws).as_dict()}


def transfer(seeds: list[dict[str, Any]], n_boot: int) -> dict[str, Any]:
    """TR per task and variant, and the paired differences :data:`PAIRED`: per-run values,
    each window's mean and the joint seed × user interval (the same draws for every
    variant, so paired differences are paired)."""
    out: dict[str, Any] = {}
    for task in seeds[0]["table1"]:
        out[task] = {}

        def losses(_task: str = task, **cols: str) -> list[WindowLosses]:
            return _row_losses(seeds, lambda r: r["row_losses"][_task], cols)

        for name in TR_VARIANTS:
            boot, _ = joint_bootstrap(
                losses(vm="VM", x=name, fm="FM"),
                lambda m: transfer_ratios(m["vm"], m["x"], m["fm"]),
                n_boot=n_boot,
            )
            out[task][name] = _figure(seeds, lambda s, n=name, t=task: _tr(s, t, n), boot)
        for a, b in PAIRED:
            boot, _ = joint_bootstrap(
                losses(vm="VM", a=a, b=b, fm="FM"),
                lambda m: (
                    transfer_ratios(m["vm"], m["a"], m["fm"])
                    - transfer_ratios(m["vm"], m["b"], m["fm"])
                ),
                n_boot=n_boot,
            )
            out[task][f"{a} − {b}"] = _figure(
                seeds, lambda s, a=a, b=b, t=task: _tr(s, t, a) - _tr(s, t, b), boot
            )
        # The earlier reports' figure: z on the user-blind VM, against the user-blind VM.
        boot, _ = joint_bootstrap(
            losses(vm=BLIND, x=BLIND_Z, fm="FM"),
            lambda m: transfer_ratios(m["vm"], m["x"], m["fm"]),
            n_boot=n_boot,
        )
        out[task][BLIND_TR] = _figure(seeds, lambda s, t=task: _tr(s, t, BLIND_Z, vm=BLIND), boot)
    return out


FM_GAP, FM_GAP_BLIND = "FM", "FM over the user-blind VM"


def gains(seeds: list[dict[str, Any]], n_boot: int) -> dict[str, Any]:
    """Log-loss gains with joint intervals: the FM's advantage left over the VM (``FM``),
    each variant's gain over the VM, the paired differences :data:`PAIRED` as gains
    (``a − b`` = how much lower ``a``'s log-loss is than ``b``'s), and the earlier reports'
    two (z's gain and the FM's advantage over the user-blind VM). Unlike a TR, a gain has
    no denominator, so it stays well defined where the VM is nearly as good as the FM."""
    out: dict[str, Any] = {}
    for task in seeds[0]["table1"]:

        def gain(base: str, x: str, _task: str = task) -> dict[str, Any]:
            boot, _ = joint_bootstrap(
                _row_losses(seeds, lambda r: r["row_losses"][_task], {"b": base, "x": x}),
                lambda m: m["b"] - m["x"],
                n_boot=n_boot,
            )
            return _figure(seeds, lambda s: float(_ll(s, _task, base) - _ll(s, _task, x)), boot)

        out[task] = {FM_GAP: gain("VM", "FM"), **{n: gain("VM", n) for n in TR_VARIANTS}}
        for a, b in PAIRED:
            out[task][f"{a} − {b}"] = gain(b, a)
        out[task][BLIND_TR] = gain(BLIND, BLIND_Z)
        out[task][FM_GAP_BLIND] = gain(BLIND, "FM")
    return out


def selection(seeds: list[dict[str, Any]], n_boot: int) -> dict[str, Any]:
    """Per selector: AUC against the oracle label (within a request, pooled) and, per
    budget, on the validation and the test period, the share of the random → oracle
    coverage gap it closes, with the joint seed × user interval."""
    names = [k for k in seeds[0]["selector_auc"] if not k.startswith("_")]
    auc = {
        n: {
            k: _ms_defined(s["selector_auc"][n][k] for s in seeds)
            for k in ("within_request", "pooled")
        }
        for n in names
    }
    shares = sorted(seeds[0]["selection_hits"]["test"]["hits"]["random"])

    def closed(m: dict[str, Any]) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return (m["x"] - m["y"]) / (m["o"] - m["r"])

    # (row, selector, baseline): a selector's gap closed is (x − random) / (oracle −
    # random); the paired row is the verifier's lead over retrieval in the same unit.
    rows = [(n, n, "random") for n in names] + [("verifier − retrieval", "verifier", "retrieval")]
    gap: dict[str, Any] = {"val": {}, "test": {}}
    for part in gap:
        for row, sel, base in rows:
            gap[part][row] = []
            for share in shares:

                def hits(s: dict[str, Any], _p: str = part, _x: float = share) -> dict[str, Any]:
                    return {
                        n: h[_x].astype(np.float64)
                        for n, h in s["selection_hits"][_p]["hits"].items()
                    }

                columns = {"x": sel, "y": base, "r": "random", "o": "oracle"}
                windows = _row_losses(seeds, hits, columns, partial(_hit_users, part=part))
                boot, _ = joint_bootstrap(windows, closed, n_boot=n_boot)

                def one(s: dict[str, Any], _h=hits, _c=columns) -> float:
                    run = _h(s)
                    return float(closed({k: run[name].mean() for k, name in _c.items()}))

                gap[part][row].append({"share": float(share), **_figure(seeds, one, boot)})
    positive = _ms(s["selector_auc"]["_positive_rate"] for s in seeds)
    return {
        "auc": auc,
        "gap_closed": gap["test"],
        "gap_closed_val": gap["val"],
        "positive_rate": positive,
    }


def curve(seeds: list[dict[str, Any]], n_boot: int) -> dict[str, Any]:
    """Table 2: gain vs coverage for random masking (fresh codes) and, per share, the
    replay's real misses with fresh codes and with the codes serving had; beside each real
    point, the random-masking gain interpolated at its coverage. The random ladder's gains
    as a share of the VM's log-loss (the paper's unit) and its steps (paper: 20% → 50%,
    60% → 100%) carry joint intervals."""
    df = pd.concat([pd.DataFrame(s["curve"]).assign(run=k) for k, s in enumerate(seeds)])
    rand = df[df["kind"] == "random"]
    real = df[df["kind"] != "random"].copy()
    by_run = {k: g.sort_values("coverage") for k, g in rand.groupby("run")}
    real["gain_random"] = [
        float(np.interp(c, by_run[k]["coverage"], by_run[k]["gain"]))
        for k, c in zip(real["run"], real["coverage"], strict=True)
    ]

    def rel_gain(s: dict[str, Any], target: str) -> float:
        vm = float(np.mean(s["tier_row_losses"]["vm"]))
        return (vm - float(np.mean(s["ladder_row_losses"][target]))) / vm

    def ladder(run: dict[str, Any]) -> dict[str, np.ndarray]:
        return {"vm": run["tier_row_losses"]["vm"], **run["ladder_row_losses"]}

    targets = list(seeds[0]["ladder_row_losses"])
    random_rows = []
    for t in targets:
        windows = _row_losses(seeds, ladder, {"vm": "vm", "x": t})
        boot, _ = joint_bootstrap(windows, lambda m: (m["vm"] - m["x"]) / m["vm"], n_boot=n_boot)
        v = rand[rand["target"] == float(t)]
        random_rows.append(
            {
                "key": t,
                **{c: _ms(v[c]) for c in ("coverage", "gain", "logloss")},
                "relative_gain": _figure(seeds, lambda s, t=t: rel_gain(s, t), boot),
            }
        )
    steps = []
    for lo, hi in ((0.2, 0.5), (0.6, 1.0)):
        a, b = f"{lo:g}", f"{hi:g}"
        if a not in targets or b not in targets:
            continue
        windows = _row_losses(seeds, ladder, {"vm": "vm", "lo": a, "hi": b})
        boot, _ = joint_bootstrap(windows, lambda m: (m["lo"] - m["hi"]) / m["vm"], n_boot=n_boot)
        steps.append(
            {
                "from": lo,
                "to": hi,
                **_figure(seeds, lambda s, a=a, b=b: rel_gain(s, b) - rel_gain(s, a), boot),
            }
        )
    return {
        "random": random_rows,
        "steps": steps,
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


def tier_coverage(seeds: list[dict[str, Any]]) -> dict[str, Any]:
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


def tier_value(seeds: list[dict[str, Any]], n_boot: int) -> dict[str, Any]:
    """Gain of each served tier set, and each imputed tier against the real code on the same
    rows: value ratio = mean gain imputed / mean gain real (means over runs), with joint
    intervals; the ratio is suppressed unless the real gain's interval is above 0."""
    df = pd.concat([pd.DataFrame(s["tier_value"]) for s in seeds])
    rows = [
        {"tiers": k, **{c: _ms(v[c]) for c in ("coverage", "gain", "logloss")}}
        for k, v in df.groupby("tiers", sort=False)
    ]
    ratios = []
    for name in [r["tier"] for r in seeds[0]["imputed_vs_real"]]:
        draws = {}
        for kind in ("imputed", "real"):
            pick = partial(_imputed_or_real, tier=name, kind=kind)
            windows = _row_losses(seeds, pick, {"vm": "vm", "x": "x"})
            draws[kind], _ = joint_bootstrap(windows, lambda m: m["vm"] - m["x"], n_boot=n_boot)
        per = [next(r for r in s["imputed_vs_real"] if r["tier"] == name) for s in seeds]
        gain_imp = float(np.mean([r["gain_imputed"] for r in per]))
        gain_real = float(np.mean([r["gain_real"] for r in per]))
        ci = lambda d: [float(np.percentile(d, 2.5)), float(np.percentile(d, 97.5))]  # noqa: E731
        real_ci = ci(draws["real"])
        defined = real_ci[0] > 0  # a ratio to a gain that may be 0 or negative is noise
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio_draws = draws["imputed"] / draws["real"]
        ratio_draws = ratio_draws[np.isfinite(ratio_draws)]
        ratios.append(
            {
                "tier": name,
                "coverage": _ms(r["coverage"] for r in per),
                "gain_imputed": {"mean": gain_imp, "ci95": ci(draws["imputed"])},
                "gain_real": {"mean": gain_real, "ci95": real_ci},
                "ratio": (
                    {"mean": gain_imp / gain_real, "ci95": ci(ratio_draws)} if defined else None
                ),
            }
        )
    iagg = {k: _ms_defined(s["iagg_by_item"][k] for s in seeds) for k in seeds[0]["iagg_by_item"]}
    return {"tiers": rows, "imputed_vs_real": ratios, "iagg_by_item": iagg}


def dropout(seeds: list[dict[str, Any]]) -> dict[str, Any]:
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


def sweeps(seeds: list[dict[str, Any]]) -> dict[str, Any]:
    df = pd.concat([pd.DataFrame(s["sweeps"]).assign(run=k) for k, s in enumerate(seeds)])
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
    for _run, g in df.groupby("run"):
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


def pool_distillation(seeds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs with one distillation weight per task and window: the lowest validation
    log-loss averaged over the window's runs and initialisations (never test). Each window
    chooses on its own validation period only: the next window's validation period is this
    window's test period, so a weight pooled over windows would be chosen partly on test.
    Chosen per run, the weight flips between neighbours whose validation losses differ by
    less than their noise, and each flip moves that run's TR: the spread then measures the
    choice, not the method. Each run's ``VM+KD`` figures become its fits at its window's
    weight; its own choice is kept as ``per_seed_choice``. Pure, and pooling pooled runs
    changes nothing."""
    out = [{**s, "kd": dict(s["kd"]), "table1": dict(s["table1"])} for s in seeds]
    if "row_losses" in seeds[0]:
        for s in out:
            s["row_losses"] = dict(s["row_losses"])
    windows = sorted({s.get("window", 0) for s in seeds})
    for task in seeds[0]["kd"]:
        weights = list(seeds[0]["kd"][task]["val_logloss"])
        for window in windows:
            mine = [k for k, s in enumerate(seeds) if s.get("window", 0) == window]
            val = {
                w: float(np.mean([seeds[k]["kd"][task]["val_logloss"][w] for k in mine]))
                for w in weights
            }
            best = min(val, key=val.__getitem__)
            for k in mine:
                s = out[k]
                kd = s["kd"][task]
                s["kd"][task] = {
                    **kd,
                    "per_seed_choice": kd.get("per_seed_choice", kd["chosen"]),
                    "chosen": float(best),
                    "at_edge": bool(float(best) == max(map(float, weights)) and float(best) > 0),
                    "pooled_val_logloss": val,
                }
                s["table1"][task] = {**s["table1"][task], KD: s["kd_scores"][task][best]}
                if "row_losses" in s:
                    s["row_losses"][task] = {
                        **s["row_losses"][task],
                        KD: s["kd_row_losses"][task][best],
                    }
    return out


def kd_choices(seeds: list[dict[str, Any]]) -> dict[str, Any]:
    """The distillation weight per task and window (:func:`pool_distillation`'d runs)."""
    out = {}
    for task in seeds[0]["kd"]:
        per_window = [
            {
                "window": w[0].get("window", 0),
                "chosen": w[0]["kd"][task]["chosen"],
                "at_edge": w[0]["kd"][task]["at_edge"],
                "val_logloss": w[0]["kd"][task]["pooled_val_logloss"],
                "per_seed_choice": [s["kd"][task]["per_seed_choice"] for s in w],
            }
            for w in by_window(seeds)
        ]
        out[task] = {
            "by_window": per_window,
            "n_inits": seeds[0]["kd"][task]["n_inits"],
            "n_runs": len(seeds),
        }
    return out


def windows(seeds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each window's periods (epoch seconds), test rows and users, and seeds."""
    return [
        {
            "window": w[0]["window"],
            **w[0]["split"],
            "n_test_rows": len(w[0]["test_users"]),
            "n_test_users": len(np.unique(w[0]["test_users"])),
            "seeds": [s["seed"] for s in w],
        }
        for w in by_window(seeds)
    ]


def summarise(seeds: list[dict[str, Any]], n_boot: int) -> dict[str, Any]:
    seeds = pool_distillation(seeds)
    return {
        "windows": windows(seeds),
        "table1": table1(seeds),
        "transfer_ratio": transfer(seeds, n_boot),
        "gain": gains(seeds, n_boot),
        "kd": kd_choices(seeds),
        "selection": selection(seeds, n_boot),
        "curve": curve(seeds, n_boot),
        "tier_coverage": tier_coverage(seeds),
        "tier_value": tier_value(seeds, n_boot),
        "dropout": dropout(seeds),
        "sweeps": sweeps(seeds),
        "fm_versions": [s["fm_version"] for s in seeds],
    }
