"""Everything the report measures for one seed (one FM, its VM variants, the replays)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from solaris.config import SolarisConfig
from solaris.evaluation.metrics import log_loss
from solaris.examples.movielens.adapters import MovieLensFoundationModel
from solaris.examples.movielens.features import FeatureContext
from solaris.examples.movielens.report.coverage import selection_sweeps
from solaris.examples.movielens.report.experiments import (
    VariantRunner,
    VMRows,
    distillation_sweep,
    fm_probs,
    masked,
    offline_codes,
    scores,
    train_task_fm,
)
from solaris.examples.movielens.report.settings import ReportSettings
from solaris.examples.movielens.report.stats import row_log_loss
from solaris.examples.movielens.report.tiers import CodeLog, Tier, build_tiers, latest_pair_code
from solaris.examples.movielens.requests import RequestLog
from solaris.examples.movielens.train import score_candidates, train_models
from solaris.pipeline.embed import encode_pairs

__all__ = ["OWN_TASKS", "TIER_SETS", "UNSEEN_TASK", "run_seed"]

OWN_TASKS = ("like", "love")
UNSEEN_TASK = "dislike"
TIER_SETS = {
    "pair": ("pair",),
    "pair+uagg": ("pair", "uagg"),
    "pair+nbr_top1": ("pair", "nbr_top1"),
    "pair+nbr_weighted": ("pair", "nbr_weighted"),
    "pair+iagg": ("pair", "iagg"),
    "all": ("pair", "nbr_top1", "uagg", "iagg"),
}


def _codes_for(
    selections: pd.DataFrame, rows: VMRows, ttl: int, models, ctx: FeatureContext
) -> Tier:
    """The pair tier of the VM rows under one replay: each hit's code, computed (by the FM,
    as of its ``computed_at``) only for the selections a VM row actually reads."""
    r = rows.rows
    sel = CodeLog(
        selections["user_id"].to_numpy(np.int64),
        selections["item_id"].to_numpy(np.int64),
        selections["computed_at"].to_numpy(np.int64),
        np.zeros((len(selections), 0), np.float32),
    )
    users, items = r["user_id"].to_numpy(np.int64), r["item_id"].to_numpy(np.int64)
    idx = latest_pair_code(sel, users, items, r["ts"].to_numpy(np.int64), ttl)
    hit = idx >= 0
    z = np.zeros((len(r), models.autoencoder.z_dim), np.float32)
    if hit.any():
        k = idx[hit]
        z[hit] = encode_pairs(
            sel.user_id[k],
            sel.item_id[k],
            sel.computed_at[k],
            fm=MovieLensFoundationModel(models.fm, ctx, models.fm_version),
            autoencoder=models.autoencoder,
        )
    return Tier(z, hit)


def run_seed(
    seed: int, log: RequestLog, ctx: FeatureContext, cfg: SolarisConfig, st: ReportSettings
) -> dict:
    """All measurements of one seed. Per-row test losses are returned for the bootstrap."""
    if st.base_share not in st.shares:
        raise ValueError(f"base_share {st.base_share} must be one of the swept shares {st.shares}")
    cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"seed": seed})})
    bar = tqdm(total=9, desc=f"seed {seed}", unit="step")
    models = train_models(log.impressions, ctx, cfg)
    split = models.split
    rows = VMRows.from_split(log.impressions, split, cfg.train.vm_window_share)
    ts_imp = log.impressions["ts"].to_numpy()
    fm_train = log.impressions[split.part(ts_imp, "train")]
    fm_val = log.impressions[split.part(ts_imp, "val")]
    fm_unseen = train_task_fm(ctx, fm_train, fm_val, cfg, (UNSEEN_TASK,))
    bar.update()

    test = rows.frame("test")
    p_fm = {t: fm_probs(models.fm, ctx, test)[:, k] for k, t in enumerate(OWN_TASKS)}
    p_fm[UNSEEN_TASK] = fm_probs(fm_unseen, ctx, test)[:, 0]
    teacher = fm_probs(models.fm, ctx, rows.frame("train"))  # [N_train, 2]: like, love

    # --- replays: selection/cost sweeps, and the verifier's selections at each share --------
    verifier = score_candidates(models.vm, ctx, log.candidates)
    sweeps, by_share = selection_sweeps(
        log.candidates,
        verifier,
        eval_from=split.val_end,
        seed=seed,
        shares=st.shares,
        ttls_hours=st.ttls_hours,
        cadences_minutes=st.cadences_minutes,
        base_share=st.base_share,
        base_ttl_hours=st.base_ttl_hours,
        base_cadence_minutes=st.base_cadence_minutes,
        activity_powers=st.activity_powers,
    )
    bar.update()

    # --- codes and tiers of the base replay (verifier, base share / TTL / cadence) ------------
    ttl = int(st.base_ttl_hours * 3600)
    base = by_share[st.base_share].selections
    since = int(rows.rows["ts"].min()) - 2 * 86_400
    base = base[base["computed_at"].to_numpy() >= since]
    codes = CodeLog(
        base["user_id"].to_numpy(np.int64),
        base["item_id"].to_numpy(np.int64),
        base["computed_at"].to_numpy(np.int64),
        encode_pairs(
            base["user_id"].to_numpy(np.int64),
            base["item_id"].to_numpy(np.int64),
            base["computed_at"].to_numpy(np.int64),
            fm=MovieLensFoundationModel(models.fm, ctx, models.fm_version),
            autoencoder=models.autoencoder,
        ),
    )
    r = rows.rows
    tiers = build_tiers(
        codes,
        r["user_id"].to_numpy(),
        r["item_id"].to_numpy(),
        r["ts"].to_numpy(),
        ttl_seconds=ttl,
        window_seconds=int(cfg.store.uagg_window_hours * 3600),
        nbr_window_seconds=int(cfg.store.unn_ttl_hours * 3600),
        n_neighbors=cfg.store.n_neighbors,
    )
    offline = offline_codes(models, ctx, rows)
    bar.update()

    runner = VariantRunner(ctx, rows, cfg)
    test_i = runner.index["test"]
    out: dict = {"seed": seed, "fm_version": models.fm_version, "n_codes": len(codes.user_id)}
    probs: dict[str, dict[str, np.ndarray]] = {}
    table1: dict[str, dict] = {}
    kd_info: dict[str, dict] = {}
    for task in (*OWN_TASKS, UNSEEN_TASK):
        y = rows.labels(task)
        p = {"FM": p_fm[task]}
        p["VM"] = runner.run(task)["test"]
        if task in OWN_TASKS:
            t_probs, mode = teacher[:, OWN_TASKS.index(task)], "task"
        else:
            t_probs, mode = teacher, "auxiliary"
        kd = distillation_sweep(runner, task, t_probs, mode, st.kd_grid)
        p["VM+KD"] = kd.pop("test")
        kd_info[task] = kd
        p["VM+z (100% offline)"] = runner.run(task, [offline])["test"]
        p["VM+SOLARIS tiers (replay)"] = runner.run(task, [tiers[n] for n in TIER_SETS["all"]])[
            "test"
        ]
        probs[task] = p
        table1[task] = {name: scores(y, q) for name, q in p.items()}
        bar.update()
    out["table1"], out["kd"] = table1, kd_info
    out["fm_metrics"] = models.metrics

    # --- Table 2: coverage curve, random masking vs the replay's real misses (own task) ------
    task = st.curve_task
    y = rows.labels(task)
    ll_vm = log_loss(y, probs[task]["VM"])
    rng = np.random.default_rng(10_000 + seed)
    curve = []
    for c in st.coverages:
        if c >= 1.0:
            ll = table1[task]["VM+z (100% offline)"]["logloss"]
            cov = 1.0
        else:
            keep = rng.random(len(r)) < c
            ll = log_loss(y, runner.run(task, [masked(offline, keep)])["test"])
            cov = float(keep[test_i].mean())
        curve.append({"kind": "random", "coverage": cov, "logloss": ll, "gain": ll_vm - ll})
    pair_tiers = {}
    for share, res in by_share.items():
        pair_tier = _codes_for(res.selections, rows, ttl, models, ctx)
        pair_tiers[share] = pair_tier
        ll = log_loss(y, runner.run(task, [pair_tier])["test"])
        curve.append(
            {
                "kind": "real",
                "share": share,
                "coverage": float(pair_tier.present[test_i].mean()),
                "replay_coverage": res.coverage,
                "logloss": ll,
                "gain": ll_vm - ll,
            }
        )
    out["curve"] = curve
    bar.update()

    # --- tier value ---------------------------------------------------------------------------
    tier_rows = []
    for name, members in TIER_SETS.items():
        present = np.any([tiers[m].present[test_i] for m in members], axis=0)
        ll = (
            table1[task]["VM+SOLARIS tiers (replay)"]["logloss"]
            if name == "all"
            else log_loss(y, runner.run(task, [tiers[m] for m in members])["test"])
        )
        tier_rows.append(
            {"tiers": name, "coverage": float(present.mean()), "logloss": ll, "gain": ll_vm - ll}
        )
    out["tier_value"] = tier_rows
    imputed = []
    for name in ("uagg", "nbr_top1", "nbr_weighted", "iagg"):
        t = tiers[name]
        ll_imp = log_loss(y, runner.run(task, [t])["test"])
        ll_real = log_loss(y, runner.run(task, [masked(offline, t.present)])["test"])
        imputed.append(
            {
                "tier": name,
                "coverage": float(t.present[test_i].mean()),
                "gain_imputed": ll_vm - ll_imp,
                "gain_real": ll_vm - ll_real,
            }
        )
    out["imputed_vs_real"] = imputed
    bar.update()

    # --- placeholder handling: trained at 100% offline coverage, served at the replay's -----
    served = pair_tiers[st.base_share]
    keep = float(served.present[runner.index["train"]].mean())
    drop = {}
    for label, k in (("no dropout", 1.0), (f"dropout keep={keep:.2f}", keep)):
        pr = runner.run(task, [offline], keep=k, eval_tiers=[served])["test"]
        drop[label] = scores(y, pr)
    drop["trained on served misses"] = {
        "logloss": next(t["logloss"] for t in tier_rows if t["tiers"] == "pair")
    }
    out["dropout"] = {"served_train_coverage": keep, "variants": drop}
    bar.update()

    out["sweeps"] = sweeps.to_dict("records")
    out["test_users"] = test["user_id"].to_numpy()
    out["row_losses"] = {
        t: {name: row_log_loss(rows.labels(t), q) for name, q in p.items()}
        for t, p in probs.items()
    }
    bar.update()
    bar.close()
    return out
