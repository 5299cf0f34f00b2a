"""The training DAG's work: retrain the VM on point-in-time SOLARIS features and publish it
as the verifier only when it is no worse than the current one on the same held-out rows."""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import pandas as pd

from solaris.config import SolarisConfig
from solaris.orchestration.layout import CycleLayout, atomic_write_json, write_run_record
from solaris.orchestration.resources import (
    current_verifier,
    cycle_redis,
    feature_context,
    feature_store,
    fm_version,
    ratings,
    read_requests,
)

DAG_ID = "solaris_training"
MIN_ROWS = 20  # labelled impressions needed to train and compare a VM


def labelled_impressions(cfg: SolarisConfig, as_of: int) -> pd.DataFrame:
    """Labelled impressions of the training window ``[as_of - window, as_of)`` with their
    ratings (the targets of every task), oldest first."""
    layout = CycleLayout(cfg.artifacts_dir)
    window = round(cfg.cycle.training_window_days * 86_400)
    rows = read_requests(layout, as_of - window, as_of)
    rows = rows[rows["label"].notna()][["user_id", "item_id", "ts"]]
    # MovieLens-100K holds one rating per (user, item), at the impression's request.
    rated = ratings(cfg)[["user_id", "item_id", "rating"]].drop_duplicates(["user_id", "item_id"])
    return rows.merge(rated, on=["user_id", "item_id"], how="inner").sort_values(
        "ts", kind="stable", ignore_index=True
    )


def _val_logloss(vm, ctx, rows: pd.DataFrame, tiers, task: str) -> float:
    from solaris.evaluation.metrics import log_loss
    from solaris.models.training import predict_proba, predict_vm
    from solaris.pipeline.train import vm_examples

    ex = vm_examples(ctx, rows, task)
    if vm.n_tiers:
        ex = tiers.attach(ex)
    y = ex.targets.numpy()[:, 0]
    return log_loss(y, predict_proba(vm, ex, predict_vm)[:, 0])


def retrain_verifier(cfg: SolarisConfig, as_of: int) -> dict[str, Any]:
    """Build the training set with ``get_historical_features``, retrain the VM with tier
    dropout, compare validation log-loss with the current verifier, publish if no worse."""
    import torch

    from solaris.models.training import save_checkpoint, weights_digest
    from solaris.pipeline.train import TierInputs, train_vm
    from solaris.serving.training_set import build_training_set

    began = time.perf_counter()
    layout = CycleLayout(cfg.artifacts_dir)
    rows = labelled_impressions(cfg, as_of)
    if len(rows) < MIN_ROWS:
        # Not a failure: a day without traffic (or a scheduled run past the log's end) keeps
        # the current verifier, and the run record says why.
        record = {
            "interval_end": as_of,
            "labelled": len(rows),
            "published": False,
            "reason": f"only {len(rows)} labelled impressions in the "
            f"{cfg.cycle.training_window_days:g} days before {as_of} (fewer than {MIN_ROWS})",
            "seconds": round(time.perf_counter() - began, 3),
        }
        write_run_record(layout, DAG_ID, f"{as_of:011d}", record)
        return record
    version = fm_version(layout)
    store = feature_store(cfg, cycle_redis(cfg))
    served = build_training_set(rows, store, cfg, fm_version=version)
    tiers = TierInputs(
        torch.from_numpy(np.ascontiguousarray(served.tier_z)),
        torch.from_numpy(served.mask.astype(np.float32)),
    )
    cut = int(len(rows) * (1 - cfg.cycle.val_share))
    train_rows, val_rows = rows.iloc[:cut], rows.iloc[cut:]
    train_tiers = TierInputs(tiers.z[:cut], tiers.mask[:cut])
    val_tiers = TierInputs(tiers.z[cut:], tiers.mask[cut:])

    ctx = feature_context(cfg)
    task = cfg.model.tasks[0]
    vm, init = train_vm(ctx, train_rows, val_rows, cfg, tiers=(train_tiers, val_tiers))
    candidate_ll = _val_logloss(vm, ctx, val_rows, val_tiers, task)
    current = current_verifier(layout, as_of=as_of)
    current_ll = _val_logloss(current.vm, ctx, val_rows, val_tiers, task)
    vm_version = "vm-" + weights_digest(vm, config={"vm_hidden": cfg.model.vm_hidden})
    folder = layout.training(as_of)
    path = save_checkpoint(folder / "vm.pt", vm, kind="vm", version=vm_version, init=init)
    published = candidate_ll <= current_ll
    record = {
        "interval_end": as_of,
        "labelled": len(rows),
        "n_train": len(train_rows),
        "n_val": len(val_rows),
        "tier_coverage_train": dict(
            zip(
                ("pair", "nbr", "uagg", "iagg"),
                served.mask[:cut].mean(axis=0).round(4).tolist(),
                strict=True,
            )
        ),
        "val_logloss": candidate_ll,
        "current_val_logloss": current_ll,
        "current_verifier": current.version,
        "candidate_verifier": vm_version,
        "published": published,
        "seconds": round(time.perf_counter() - began, 3),
    }
    atomic_write_json(folder / "metrics.json", record)
    if published:
        # In force from as_of on (the candidates DAG looks publications up by time); the
        # file appears atomically.
        atomic_write_json(
            layout.verifier_publication(as_of),
            {
                "path": str(path.resolve()),
                "version": vm_version,
                "as_of": as_of,
                "val_logloss": candidate_ll,
            },
        )
    write_run_record(layout, DAG_ID, f"{as_of:011d}", record)
    return json.loads(json.dumps(record, default=float))
