"""The MovieLens implementations of the adapter interfaces (:mod:`solaris.adapters`).

The package (:mod:`solaris.examples.movielens`) re-exports them and says how to configure
them; the verifier trainer here is the training DAG's work on MovieLens.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from solaris.config import DataConfig, ModelConfig, SolarisConfig
from solaris.files import (
    ArtifactPathError,
    StatePath,
    artifact_name,
    artifact_path,
    atomic_write_json,
)
from solaris.namespace import Namespace

if TYPE_CHECKING:
    import torch

    from solaris.examples.movielens.features import FeatureContext
    from solaris.examples.movielens.models.batch import FeatureBatch
    from solaris.examples.movielens.models.fm import FoundationModel as FMModule
    from solaris.examples.movielens.models.vm import VerticalModel

__all__ = [
    "MovieLensFoundationModel",
    "MovieLensTraffic",
    "VMTrainer",
    "VMVerifier",
    "foundation_model",
    "publish_verifier",
    "published_checkpoint",
    "request_log_path",
    "traffic",
    "vm_trainer",
    "vm_verifier",
]


def request_log_path(cfg: SolarisConfig) -> Path:
    """Where the demo writes the MovieLens request log (with the VM's scores)."""
    return Path(cfg.artifacts_dir) / "log" / "candidates.parquet"


@functools.lru_cache(maxsize=2)
def _context(data: DataConfig, model: ModelConfig) -> FeatureContext:
    from solaris.examples.movielens.data import MovieLens
    from solaris.examples.movielens.features import FeatureContext
    from solaris.examples.movielens.fetch import fetch_movielens

    return FeatureContext.from_config(MovieLens.load(fetch_movielens(data)), model)


@functools.lru_cache(maxsize=2)
def _ratings(data: DataConfig) -> pd.DataFrame:
    from solaris.examples.movielens.data import MovieLens
    from solaris.examples.movielens.fetch import fetch_movielens

    return MovieLens.load(fetch_movielens(data)).ratings


def _require(path: Path, what: str) -> Path:
    if not path.exists():
        raise FileNotFoundError(
            f"{what} not found at {path}: run `make demo` once to build the MovieLens "
            "request log and models, or point SOLARIS_ARTIFACTS_DIR at them"
        )
    return path


class MovieLensFoundationModel:
    """:class:`solaris.adapters.FoundationModel` over the MovieLens FM and its features."""

    def __init__(self, module: FMModule, ctx: FeatureContext, version: str) -> None:
        self.module = module.eval()
        self.ctx = ctx
        self.version = version
        self.shared_dim = int(module.shared_dim)
        self._device: torch.device | None = None

    def features(self, users: np.ndarray, items: np.ndarray, ts: np.ndarray) -> FeatureBatch:
        return self.ctx.fm_batch(users, items, ts)

    def shared(self, batch: FeatureBatch) -> torch.Tensor:
        device = self._device
        if device is not None and device.type == "cuda":
            batch = batch.pin_memory().to(device, non_blocking=True)
        return self.module.shared(batch)

    def to(self, device: torch.device) -> MovieLensFoundationModel:
        import torch

        self._device = torch.device(device)
        self.module.to(self._device)
        return self


def foundation_model(cfg: SolarisConfig) -> MovieLensFoundationModel:
    """The FM of ``<artifacts_dir>/models/fm.pt`` (written by ``make demo``)."""
    from solaris.examples.movielens.models.fm import FoundationModel
    from solaris.models.checkpoints import load_checkpoint

    path = _require(Namespace.of(cfg).models_dir / "fm.pt", "the MovieLens FM")
    module, version = load_checkpoint(path, FoundationModel, kind="fm")
    return MovieLensFoundationModel(module, _context(cfg.data, cfg.model), version)


@dataclass(frozen=True)
class MovieLensTraffic:
    """:class:`solaris.adapters.TrafficSource` over the demo's request log."""

    path: Path

    def requests(self, start: int, end: int) -> pd.DataFrame:
        import pyarrow.dataset as ds

        from solaris.data.schemas import SchemaError, request_log_frame

        path = _require(self.path, "the MovieLens request log")
        try:
            table = ds.dataset(path, format="parquet").to_table(
                filter=(ds.field("ts") >= start) & (ds.field("ts") < end)
            )
        except Exception as exc:  # pyarrow raises several types; name the file either way
            raise SchemaError(str(path), None, f"cannot read parquet: {exc}") from exc
        return request_log_frame(table, str(path))


def traffic(cfg: SolarisConfig) -> MovieLensTraffic:
    return MovieLensTraffic(request_log_path(cfg))


@dataclass(frozen=True)
class Verifier:
    vm: VerticalModel
    version: str
    path: StatePath


def current_verifier(cfg: SolarisConfig, *, as_of: int) -> Verifier:
    """The VM in force at ``as_of``: the newest the training DAG published at or before it
    in this namespace, else the one trained with the FM."""
    from solaris.examples.movielens.models.vm import VerticalModel
    from solaris.models.checkpoints import load_checkpoint
    from solaris.orchestration.layout import CycleLayout

    layout = CycleLayout(Namespace.of(cfg))
    path = layout.models_dir / "vm.pt"
    publication = layout.verifier_in_force(as_of)
    if publication is not None:
        path = published_checkpoint(cfg, publication)
    vm, version = load_checkpoint(_require(path, "verifier checkpoint"), VerticalModel, kind="vm")
    return Verifier(vm, version, path)


def publish_verifier(
    cfg: SolarisConfig, as_of: int, path: StatePath, *, version: str, val_logloss: float
) -> StatePath:
    """Publish the VM checkpoint ``path`` (under the state root) as the verifier in force
    from ``as_of`` on (publications are looked up by time); ``path`` is stored relative to
    the state root, inside which readers confine it (:func:`published_checkpoint`)."""
    from solaris.orchestration.layout import CycleLayout

    namespace = Namespace.of(cfg)
    return atomic_write_json(
        CycleLayout(namespace).verifier_publication(as_of),
        {
            "path": artifact_name(namespace.state_root, path),
            "version": version,
            "as_of": as_of,
            "val_logloss": val_logloss,
        },
    )


def published_checkpoint(cfg: SolarisConfig, publication: StatePath) -> StatePath:
    """The checkpoint a verifier publication names, confined to the state root.

    A publication is a file another process wrote: its ``path`` (relative to the state
    root, ``cycle.state_uri`` or ``artifacts_dir``; locally an absolute path inside it is
    accepted too) may not lead out of it (:class:`~solaris.files.ArtifactPathError`,
    naming the publication).
    """
    try:
        payload = json.loads(publication.read_text())
    except (OSError, ValueError) as exc:
        raise ArtifactPathError(f"{publication}: unreadable verifier publication: {exc}") from exc
    if not isinstance(payload, dict) or "path" not in payload:
        raise ArtifactPathError(f"{publication}: a verifier publication names its 'path'")
    return artifact_path(Namespace.of(cfg).state_root, payload["path"], source=publication)


class VMVerifier:
    """Re-scores candidates with the VM in force at their earliest time (one forward pass
    per candidate: what the default logged scores avoid)."""

    def __init__(self, cfg: SolarisConfig) -> None:
        self.cfg = cfg
        self.version = "vm-in-force"

    def score(self, candidates: pd.DataFrame) -> np.ndarray:
        from solaris.examples.movielens.train import score_candidates

        if len(candidates) == 0:
            return np.zeros(0, np.float32)
        verifier = current_verifier(self.cfg, as_of=int(candidates["ts"].min()))
        self.version = verifier.version
        return score_candidates(verifier.vm, _context(self.cfg.data, self.cfg.model), candidates)


def vm_verifier(cfg: SolarisConfig) -> VMVerifier:
    return VMVerifier(cfg)


MIN_ROWS = 20  # labelled impressions needed to train and compare a VM


class VMTrainer:
    """:class:`solaris.adapters.VerifierTrainer`: retrain the VM on point-in-time SOLARIS
    features and publish it only when it is no worse than the current one."""

    def labelled_impressions(self, cfg: SolarisConfig, as_of: int) -> pd.DataFrame:
        """Labelled impressions of ``[as_of - window, as_of)`` with their ratings."""
        window = round(cfg.cycle.training_window_days * 86_400)
        rows = traffic(cfg).requests(as_of - window, as_of)
        rows = rows[rows["label"].notna()][["user_id", "item_id", "ts"]]
        # MovieLens-100K holds one rating per (user, item), at the impression's request.
        rated = _ratings(cfg.data)[["user_id", "item_id", "rating"]].drop_duplicates(
            ["user_id", "item_id"]
        )
        return rows.merge(rated, on=["user_id", "item_id"], how="inner").sort_values(
            "ts", kind="stable", ignore_index=True
        )

    def retrain(self, cfg: SolarisConfig, as_of: int) -> dict[str, Any]:
        """Build the training set with ``get_historical_features``, retrain the VM with tier
        dropout, compare validation log-loss with the current verifier, publish if no worse.
        Returns the run record (without ``seconds``: the caller times the run)."""
        import torch

        from solaris.examples.movielens.train import TierInputs, train_vm
        from solaris.models.checkpoints import save_checkpoint, weights_digest
        from solaris.orchestration.layout import CycleLayout
        from solaris.orchestration.resources import cycle_redis, feature_store
        from solaris.pipeline.codes import read_manifest
        from solaris.serving.training_set import build_training_set

        layout = CycleLayout(Namespace.of(cfg))
        rows = self.labelled_impressions(cfg, as_of)
        if len(rows) < MIN_ROWS:
            # Not a failure: a day without traffic (or a scheduled run past the log's end)
            # keeps the current verifier, and the run record says why.
            return {
                "labelled": len(rows),
                "published": False,
                "reason": f"only {len(rows)} labelled impressions in the "
                f"{cfg.cycle.training_window_days:g} days before {as_of} (fewer than {MIN_ROWS})",
            }
        version = read_manifest(layout.models_dir).fm_version
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

        ctx = _context(cfg.data, cfg.model)
        task = cfg.model.tasks[0]
        vm, init = train_vm(ctx, train_rows, val_rows, cfg, tiers=(train_tiers, val_tiers))
        candidate_ll = _val_logloss(vm, ctx, val_rows, val_tiers, task)
        current = current_verifier(cfg, as_of=as_of)
        current_ll = _val_logloss(current.vm, ctx, val_rows, val_tiers, task)
        vm_version = "vm-" + weights_digest(vm, config={"vm_hidden": cfg.model.vm_hidden})
        folder = layout.training(as_of)
        path = save_checkpoint(folder / "vm.pt", vm, kind="vm", version=vm_version, init=init)
        published = candidate_ll <= current_ll
        record = {
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
        }
        atomic_write_json(folder / "metrics.json", record)
        if published:
            publish_verifier(cfg, as_of, path, version=vm_version, val_logloss=candidate_ll)
        return json.loads(json.dumps(record, default=float))


def _val_logloss(vm, ctx, rows: pd.DataFrame, tiers, task: str) -> float:
    from solaris.evaluation.metrics import log_loss
    from solaris.examples.movielens.models.training import predict_proba, predict_vm
    from solaris.examples.movielens.train import vm_examples

    ex = vm_examples(ctx, rows, task)
    if vm.n_tiers:
        ex = tiers.attach(ex)
    y = ex.targets.numpy()[:, 0]
    return log_loss(y, predict_proba(vm, ex, predict_vm)[:, 0])


def vm_trainer(cfg: SolarisConfig) -> VMTrainer:
    return VMTrainer()
