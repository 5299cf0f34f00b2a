"""Everything the report measures for one run: one seed in one rolling-origin window (one
FM, its VM variants, the replays)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from solaris.config import SolarisConfig
from solaris.evaluation.replay import replay
from solaris.examples.movielens.adapters import MovieLensFoundationModel
from solaris.examples.movielens.exposure import (
    exposure_labels,
    pooled_auc,
    train_exposure_scorer,
    within_request_auc,
)
from solaris.examples.movielens.features import FeatureContext
from solaris.examples.movielens.models.training import TimeSplit
from solaris.examples.movielens.report.coverage import selection_sweeps
from solaris.examples.movielens.report.experiments import (
    VariantRunner,
    VMRows,
    distillation_sweep,
    earlier_code_of_other_user,
    earlier_code_of_same_user,
    fm_logit_tier,
    fm_probs,
    init_row_losses,
    init_scores,
    masked,
    offline_codes,
    out_of_time_teacher,
    scores,
    shuffled_within_user,
    train_task_fm,
    untrained_codes,
)
from solaris.examples.movielens.report.settings import ReportSettings
from solaris.examples.movielens.report.stats import row_log_loss
from solaris.examples.movielens.report.tiers import (
    CodeLog,
    Tier,
    build_tiers,
    interval_neighbour_tiers,
    latest_pair_code,
    neighbour_diagnostics,
    served_aggregate_tiers,
)
from solaris.examples.movielens.requests import HOUR, RequestLog
from solaris.examples.movielens.train import score_candidates, train_models
from solaris.pipeline.embed import encode_pairs

__all__ = [
    "BLIND",
    "BLIND_Z",
    "CAUSAL_PLACEBO",
    "KD",
    "LOGITS",
    "SHUFFLED",
    "TIERS",
    "TIER_SETS",
    "TR_VARIANTS",
    "USER_CONTROL",
    "Z",
    "log_until",
    "run_seed",
    "window_split",
]

# Tier sets of the served tiers (the cycle's cadence rule); "all" is Table 1's tier row.
TIER_SETS = {
    "pair": ("pair",),
    "pair+uagg": ("pair", "uagg"),
    "pair+nbr": ("pair", "nbr"),
    "pair+iagg": ("pair", "iagg"),
    "all": ("pair", "nbr", "uagg", "iagg"),
}
KD, LOGITS = "VM+KD", "VM+FM logits"
Z, TIERS = "VM+z (100% offline)", "VM+SOLARIS tiers (served)"
BLIND = "VM user-blind (before)"
# The earlier reports' z row: z on the user-blind VM (its TR is taken against BLIND).
BLIND_Z = "VM user-blind+z (before)"
CAUSAL_PLACEBO = "placebo: another user's earlier code"
USER_CONTROL = "control: the user's own earlier code"
SHUFFLED = "placebo: z shuffled within user (not causal)"
# Every row is fitted on the user-aware VM except BLIND, the VM of the earlier reports.
TR_VARIANTS = (
    BLIND,
    KD,
    LOGITS,
    Z,
    TIERS,
    CAUSAL_PLACEBO,
    USER_CONTROL,
    SHUFFLED,
    "placebo: untrained FM",
)
IMPUTED = ("uagg", "nbr", "iagg")


def _fm_model(models, ctx: FeatureContext) -> MovieLensFoundationModel:
    return MovieLensFoundationModel(models.fm, ctx, models.fm_version)


def _pair_tier(selections: pd.DataFrame, rows: VMRows, ttl: int, models, ctx) -> Tier:
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
            fm=_fm_model(models, ctx),
            autoencoder=models.autoencoder,
        )
    return Tier(z, hit)


def _selectors(
    log: RequestLog, features: pd.DataFrame, models, ctx, split, rows: VMRows, cfg, st, seed: int
) -> tuple[dict[str, np.ndarray], dict]:
    """The verifier (the exposure scorer, trained on the VM's window of logged candidates)
    and its baselines, with their AUCs against the oracle label on the test period."""
    ttl, cad = st.base_ttl_seconds, st.base_cadence_seconds
    scorer = train_exposure_scorer(
        log,
        features,
        train_from=int(rows.frame("train")["ts"].min()),
        train_end=split.train_end,
        ttl_seconds=ttl,
        cadence_seconds=cad,
        seed=seed,
    )
    cands = log.candidates
    selectors = {
        "verifier": scorer.score(features),
        "retrieval": cands["retrieval_score"].to_numpy(np.float64),
        "VM P(like)": score_candidates(models.vm, ctx, cands),
    }
    label = exposure_labels(cands, ttl_seconds=ttl, cadence_seconds=cad)
    test = cands["ts"].to_numpy() >= split.val_end
    req = cands["request_id"].to_numpy()[test]
    aucs = {
        name: {
            "within_request": within_request_auc(s[test], label[test], req),
            "pooled": pooled_auc(s[test], label[test]),
        }
        for name, s in selectors.items()
    }
    aucs["_positive_rate"] = float(label[test].mean())
    return selectors, aucs


def _served_tiers(
    codes: CodeLog, rows: VMRows, log: RequestLog, cfg: SolarisConfig, st: ReportSettings
) -> tuple[dict[str, Tier], list[dict[str, Any]], dict]:
    """The tiers of the VM rows as serving builds them (the cycle's cadence), the
    coverage of every rule on the test rows (the exact-time one as the upper bound) and
    the neighbour tier's diagnostics."""
    r = rows.rows
    users, items = r["user_id"].to_numpy(np.int64), r["item_id"].to_numpy(np.int64)
    ts = r["ts"].to_numpy(np.int64)
    ttl, cad = st.base_ttl_seconds, st.base_cadence_seconds
    window = int(cfg.store.uagg_window_hours * HOUR)
    nbr_window = int(cfg.store.unn_ttl_hours * HOUR)
    exact = build_tiers(
        codes,
        users,
        items,
        ts,
        ttl_seconds=ttl,
        window_seconds=window,
        nbr_window_seconds=nbr_window,
        n_neighbors=cfg.store.n_neighbors,
    )
    own = exact["pair"].present
    served = served_aggregate_tiers(
        codes, users, items, ts, cadence_seconds=cad, window_seconds=window
    )
    nbr_args = dict(
        cadence_seconds=cad,
        ttl_seconds=ttl,
        nbr_window_seconds=nbr_window,
        n_neighbors=cfg.store.n_neighbors,
        own_present=own,
    )
    nbr = interval_neighbour_tiers(
        codes, users, items, ts, fill_targets=log.candidates, **nbr_args
    )["nbr_top1"]
    nbr_bound = interval_neighbour_tiers(codes, users, items, ts, **nbr_args)["nbr_top1"]
    tiers = {"pair": exact["pair"], "nbr": nbr, "uagg": served["uagg"], "iagg": served["iagg"]}

    test = rows.mask("test")
    cov = lambda t: float(t.present[test].mean())  # noqa: E731
    union = lambda *ts_: float(np.any([t.present[test] for t in ts_], axis=0).mean())  # noqa: E731
    coverage = [
        {"tier": "pair", "rule": "served", "coverage": cov(exact["pair"])},
        {"tier": "uagg", "rule": "exact at t (upper bound)", "coverage": cov(exact["uagg"])},
        {"tier": "uagg", "rule": "served", "coverage": cov(served["uagg"])},
        {"tier": "iagg", "rule": "exact at t (upper bound)", "coverage": cov(exact["iagg"])},
        {"tier": "iagg", "rule": "served", "coverage": cov(served["iagg"])},
        {"tier": "nbr", "rule": "daily table (before)", "coverage": cov(exact["nbr_top1"])},
        {"tier": "nbr", "rule": "served", "coverage": cov(nbr)},
        {"tier": "nbr", "rule": "every pair filled (upper bound)", "coverage": cov(nbr_bound)},
        {
            "tier": "pair ∪ uagg",
            "rule": "exact at t (upper bound)",
            "coverage": union(exact["pair"], exact["uagg"]),
        },
        {"tier": "pair ∪ uagg", "rule": "served", "coverage": union(exact["pair"], served["uagg"])},
        {"tier": "pair ∪ nbr", "rule": "served", "coverage": union(exact["pair"], nbr)},
        {
            "tier": "all",
            "rule": "exact at t (upper bound)",
            "coverage": union(exact["pair"], exact["nbr_top1"], exact["uagg"], exact["iagg"]),
        },
        {"tier": "all", "rule": "served", "coverage": union(*tiers.values())},
    ]
    for minutes in st.snapshot_minutes:
        slow = served_aggregate_tiers(
            codes, users, items, ts, cadence_seconds=int(minutes * 60), window_seconds=window
        )
        rule = f"snapshot every {minutes:g} min"
        coverage += [
            {"tier": "uagg", "rule": rule, "coverage": cov(slow["uagg"])},
            {"tier": "pair ∪ uagg", "rule": rule, "coverage": union(exact["pair"], slow["uagg"])},
        ]
    q = np.flatnonzero(test)
    diag = neighbour_diagnostics(
        codes,
        users[q],
        items[q],
        ts[q],
        fill_targets=log.candidates,
        **{**nbr_args, "own_present": own[q]},
    )
    columns = [c for c in diag.columns if diag[c].dtype == bool]
    diagnostics = {"n_pair_misses": len(diag), **{c: float(diag[c].mean()) for c in columns}}
    return tiers, coverage, diagnostics


def window_split(log: RequestLog, window: int, cfg: SolarisConfig, st: ReportSettings) -> TimeSplit:
    """The time split of rolling-origin window ``window`` (0 = the oldest; the last one's
    test period ends with the log): consecutive test periods of ``st.test_share`` of the
    impressions, each after a validation period of ``cfg.train.val_share``."""
    if not 0 <= window < st.windows:
        raise ValueError(f"window {window} is not one of the {st.windows} windows")
    end = 1.0 - st.test_share * (st.windows - 1 - window)
    return TimeSplit.ending_at(
        log.impressions["ts"].to_numpy(), end, cfg.train.val_share, st.test_share
    )


def log_until(log: RequestLog, end: int | None) -> RequestLog:
    """The log's rows before ``end`` (all of it for ``None``); every table is sorted by time,
    so each is a prefix and stays aligned with anything computed row by row before it."""
    if end is None:
        return log
    return RequestLog(
        *(
            t.iloc[: int(np.searchsorted(t["ts"].to_numpy(), end))]
            for t in (
                log.requests,
                log.candidates,
                log.impressions,
            )
        )
    )


def _period_hits(hits: dict[str, Any], cands: pd.DataFrame, split: TimeSplit) -> dict[str, Any]:
    """The share sweep's hits of labelled impressions from the validation period on, cut
    into the validation and test periods, with each row's user (for the bootstrap)."""
    labelled = cands["label"].notna().to_numpy() & (cands["ts"].to_numpy() >= split.train_end)
    ts, users = cands["ts"].to_numpy()[labelled], cands["user_id"].to_numpy()[labelled]
    out = {}
    for part in ("val", "test"):
        m = split.part(ts, part)
        out[part] = {
            "users": users[m],
            "hits": {sel: {share: h[m] for share, h in by.items()} for sel, by in hits.items()},
        }
    return out


def run_seed(
    seed: int,
    window: int,
    log: RequestLog,
    ctx: FeatureContext,
    cfg: SolarisConfig,
    st: ReportSettings,
    features: pd.DataFrame,
) -> dict[str, Any]:
    """All measurements of one seed in rolling-origin window ``window``
    (:func:`window_split`). ``features`` are the exposure features of ``log.candidates``
    (:func:`solaris.examples.movielens.exposure.exposure_features`). Per-row test losses
    and hits are returned for the bootstrap."""
    if st.base_share not in st.shares or not set(st.curve_shares) <= set(st.shares):
        raise ValueError(
            f"base_share {st.base_share} and curve_shares {st.curve_shares} must be among "
            f"the swept shares {st.shares}"
        )
    split = window_split(log, window, cfg, st)
    log = log_until(log, split.test_end)  # nothing after the window's test period
    # The cost curves (TTL, cadence, activity-aware TTL, near-line) in the latest windows only.
    sweeps_here = window >= st.windows - st.sweep_windows
    features = features.iloc[: len(log.candidates)]
    cfg = cfg.model_copy(update={"train": cfg.train.model_copy(update={"seed": seed})})
    tasks = (st.own_task, *st.unseen_tasks)
    bar = tqdm(total=6 + len(tasks), desc=f"window {window} seed {seed}", unit="step")
    models = train_models(log.impressions, ctx, cfg, split)
    rows = VMRows.from_split(log.impressions, split, cfg.train.vm_window_share)
    ts_imp = log.impressions["ts"].to_numpy()
    fm_train = log.impressions[split.part(ts_imp, "train")]
    fm_val = log.impressions[split.part(ts_imp, "val")]
    fm_unseen = train_task_fm(ctx, fm_train, fm_val, cfg, st.unseen_tasks)
    teacher_fm = out_of_time_teacher(ctx, fm_train, rows, cfg)
    bar.update()

    test = rows.frame("test")
    fm_tasks = tuple(cfg.model.tasks)
    p_fm = {st.own_task: fm_probs(models.fm, ctx, test)[:, fm_tasks.index(st.own_task)]}
    unseen_probs = fm_probs(fm_unseen, ctx, test)
    p_fm.update({t: unseen_probs[:, k] for k, t in enumerate(st.unseen_tasks)})
    teacher = fm_probs(teacher_fm, ctx, rows.frame("train"))  # [N_train, n_fm_tasks]

    # --- selection: the verifier and its baselines, then every replay sweep ----------------
    selectors, selector_auc = _selectors(log, features, models, ctx, split, rows, cfg, st, seed)
    sweeps, by_share, share_hits = selection_sweeps(
        log.candidates,
        selectors,
        eval_from=split.val_end,
        seed=seed,
        shares=st.shares,
        ttls_hours=st.ttls_hours if sweeps_here else (),
        cadences_minutes=st.cadences_minutes if sweeps_here else (),
        base_share=st.base_share,
        base_ttl_hours=st.base_ttl_hours,
        base_cadence_minutes=st.base_cadence_minutes,
        activity_powers=st.activity_powers if sweeps_here else (),
        nearline_seconds=st.nearline_seconds if sweeps_here else None,
        hits_from=split.train_end,
    )
    selection_hits = _period_hits(share_hits, log.candidates, split)
    bar.update()

    # --- codes and tiers of the base replay (verifier, base share / TTL / cadence) ----------
    ttl = st.base_ttl_seconds
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
            fm=_fm_model(models, ctx),
            autoencoder=models.autoencoder,
        ),
    )
    tiers, tier_coverage, nbr_diagnostics = _served_tiers(codes, rows, log, cfg, st)
    offline = offline_codes(models, ctx, rows)
    logits = fm_logit_tier(models.fm, ctx, rows, models.autoencoder.z_dim)
    placebos = {
        CAUSAL_PLACEBO: earlier_code_of_other_user(offline, rows, 30_000 + seed),
        USER_CONTROL: earlier_code_of_same_user(offline, rows, 40_000 + seed),
        SHUFFLED: shuffled_within_user(offline, rows, 20_000 + seed),
        "placebo: untrained FM": untrained_codes(models, ctx, rows, cfg),
    }
    bar.update()

    # --- Table 1: every variant on every task, on the user-aware VM --------------------------
    runner = VariantRunner(ctx, rows, cfg, history=st.vm_history)
    blind = VariantRunner(ctx, rows, cfg)
    test_i = runner.index["test"]
    n = st.n_inits  # every VM figure is the mean of n initialisations
    table1: dict[str, dict] = {}
    row_losses: dict[str, dict[str, np.ndarray]] = {}
    kd_info: dict[str, dict] = {}
    # Every distillation weight's test figures: the report chooses one weight over all seeds.
    kd_scores: dict[str, dict[str, dict]] = {}
    kd_row_losses: dict[str, dict[str, np.ndarray]] = {}
    for task in tasks:
        y = rows.labels(task)
        if task in fm_tasks:
            t_probs, mode = teacher[:, fm_tasks.index(task)], "task"
        else:
            t_probs, mode = teacher, "auxiliary"
        kd = distillation_sweep(runner, task, t_probs, mode, st.kd_grid, st.n_inits)
        fits = {"VM": kd.pop("vm_test"), KD: kd.pop("test")}
        fits[BLIND] = blind.test_probs(task, n)
        fits[BLIND_Z] = blind.test_probs(task, n, [offline])
        by_weight = kd.pop("test_by_weight")
        kd_scores[task] = {w: init_scores(y, p) for w, p in by_weight.items()}
        kd_row_losses[task] = {w: init_row_losses(y, p) for w, p in by_weight.items()}
        kd_info[task] = kd
        fits[LOGITS] = runner.test_probs(task, n, [logits])
        fits[Z] = runner.test_probs(task, n, [offline])
        fits[TIERS] = runner.test_probs(task, n, [tiers[m] for m in TIER_SETS["all"]])
        for name, tier in placebos.items():
            fits[name] = runner.test_probs(task, n, [tier])
        table1[task] = {"FM": scores(y, p_fm[task])}
        row_losses[task] = {"FM": row_log_loss(y, p_fm[task])}
        for name in ("VM", *TR_VARIANTS, BLIND_Z):
            table1[task][name] = init_scores(y, fits[name])
            row_losses[task][name] = init_row_losses(y, fits[name])
        bar.update()

    # --- Table 2: random masking vs real misses, fresh codes vs served codes (own task) -------
    task = st.curve_task
    y = rows.labels(task)
    ll_vm = table1[task]["VM"]["logloss"]

    def fitted(tier_list: list[Tier], **options) -> tuple[float, np.ndarray]:
        """Mean test log-loss and per-row losses of ``n`` VMs on ``tier_list``."""
        rows_ll = init_row_losses(y, runner.test_probs(task, n, tier_list, **options))
        return float(rows_ll.mean()), rows_ll

    rng = np.random.default_rng(10_000 + seed)
    curve, ladder_losses = [], {}
    for c in st.coverages:
        if c >= 1.0:
            ll, cov = table1[task][Z]["logloss"], 1.0
            ladder_losses[f"{c:g}"] = row_losses[task][Z]
        else:
            keep = rng.random(len(rows.rows)) < c
            ll, ladder_losses[f"{c:g}"] = fitted([masked(offline, keep)])
            cov = float(keep[test_i].mean())
        curve.append(
            {"kind": "random", "target": c, "coverage": cov, "logloss": ll, "gain": ll_vm - ll}
        )
    # The near-line path at the base share: codes usable nearline_seconds after the
    # request, each computed as of that moment (solaris nearline embeds as of the request).
    # Then the same with refresh on activity (a code stale after refresh_after_requests of
    # the user's requests; each request refreshes its best stale codes on a budget of its own).
    replays = [("", share, by_share[share]) for share in st.curve_shares]
    k = st.refresh_after_requests
    paths: list[tuple[str, dict]] = []
    if sweeps_here:
        paths = [("near-line ", {})] + [
            (
                f"near-line + refresh after {k} request(s) on {r:.0%}, ",
                {"refresh_after_requests": k, "refresh_share": r},
            )
            for r in st.refresh_shares
        ]
    for path, refresh in paths:
        nearline = replay(
            log.candidates,
            selectors["verifier"],
            share=st.base_share,
            ttl_seconds=ttl,
            cadence_seconds=st.base_cadence_seconds,
            latency_seconds=st.nearline_seconds,
            eval_from=split.val_end,
            **refresh,
        )
        replays.append((path, st.base_share, nearline))
    pair_tiers = {}
    for path, share, res in replays:
        served = _pair_tier(res.selections, rows, ttl, models, ctx)
        if not path:
            pair_tiers[share] = served
        cov = float(served.present[test_i].mean())
        for kind, tier in (
            (f"{path}real misses, fresh codes", masked(offline, served.present)),
            (f"{path}real misses, served codes", served),
        ):
            ll = fitted([tier])[0]
            curve.append(
                {
                    "kind": kind,
                    "share": share,
                    "coverage": cov,
                    "replay_coverage": res.coverage,
                    "fm_passes": res.fm_passes_per_1k_requests,
                    "logloss": ll,
                    "gain": ll_vm - ll,
                }
            )
    bar.update()

    # --- tier value on the served tiers; imputed vs real codes at equal coverage -------------
    tier_rows, tier_losses = [], {}
    for name, members in TIER_SETS.items():
        present = np.any([tiers[m].present[test_i] for m in members], axis=0)
        if name == "all":  # Table 1's tier row
            ll = table1[task][TIERS]["logloss"]
            tier_losses[name] = row_losses[task][TIERS]
        else:
            ll, tier_losses[name] = fitted([tiers[m] for m in members])
        tier_rows.append(
            {"tiers": name, "coverage": float(present.mean()), "logloss": ll, "gain": ll_vm - ll}
        )
    imputed, imputed_losses = [], {}
    for name in IMPUTED:
        t = tiers[name]
        ll_imp, rows_imp = fitted([t])
        ll_real, rows_real = fitted([masked(offline, t.present)])
        imputed_losses[name] = {"imputed": rows_imp, "real": rows_real}
        imputed.append(
            {
                "tier": name,
                "coverage": float(t.present[test_i].mean()),
                "gain_imputed": ll_vm - ll_imp,
                "gain_real": ll_vm - ll_real,
            }
        )
    # The item aggregate on items the FM never trained on vs items it knows.
    fm_items = np.unique(fm_train["item_id"].to_numpy())
    new_item = ~np.isin(test["item_id"].to_numpy(), fm_items)
    iagg_gain = tier_losses["pair"] - tier_losses["pair+iagg"]
    iagg = {
        "share_new_items": float(new_item.mean()),
        "gain_new_items": float(iagg_gain[new_item].mean()) if new_item.any() else float("nan"),
        "gain_known_items": float(iagg_gain[~new_item].mean()),
    }
    bar.update()

    # --- placeholder handling: trained at 100% offline coverage, served at the replay's -----
    served = pair_tiers[st.base_share]
    keep = float(served.present[runner.index["train"]].mean())
    drop = {}
    for label, k in (("no dropout", 1.0), (f"dropout keep={keep:.2f}", keep)):
        drop[label] = {"logloss": fitted([offline], keep=k, eval_tiers=[served])[0]}
    drop["trained on served misses"] = {
        "logloss": next(t["logloss"] for t in tier_rows if t["tiers"] == "pair")
    }
    bar.update()
    bar.close()
    return {
        "seed": seed,
        "window": window,
        "split": {
            "train_end": split.train_end,
            "val_end": split.val_end,
            "test_end": split.test_end,
        },
        "fm_version": models.fm_version,
        "n_codes": len(codes.user_id),
        "fm_metrics": models.metrics,
        "table1": table1,
        "kd": kd_info,
        "kd_scores": kd_scores,
        "selector_auc": selector_auc,
        "selection_hits": selection_hits,
        "sweeps": sweeps.to_dict("records"),
        "curve": curve,
        "tier_coverage": tier_coverage,
        "nbr_diagnostics": nbr_diagnostics,
        "tier_value": tier_rows,
        "imputed_vs_real": imputed,
        "iagg_by_item": iagg,
        "dropout": {"served_train_coverage": keep, "variants": drop},
        "test_users": test["user_id"].to_numpy(),
        "row_losses": row_losses,
        "kd_row_losses": kd_row_losses,
        "tier_row_losses": {"vm": row_losses[task]["VM"], **imputed_losses},
        "ladder_row_losses": ladder_losses,
    }
