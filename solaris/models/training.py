"""Time-split training with early stopping, seeds, progress bars and versioned checkpoints."""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import io
import json
import numbers
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from solaris.config import TrainConfig
from solaris.data.tasks import LIKE_THRESHOLD, LOVE_RATING
from solaris.errors import SolarisError
from solaris.files import (
    StatePath,
    atomic_write_bytes,
    atomic_write_json,
    state_path,
    tensor_bytes,
)
from solaris.models import ModelInputError
from solaris.models.batch import FeatureBatch, FeatureSpec

__all__ = [
    "CHECKPOINT_FORMAT",
    "TASK_RULES",
    "CheckpointError",
    "DeviceError",
    "Examples",
    "Predict",
    "TimeSplit",
    "checkpoint_meta_path",
    "fit",
    "load_checkpoint",
    "predict_fm",
    "predict_proba",
    "predict_vm",
    "read_checkpoint",
    "resolve_device",
    "save_checkpoint",
    "seed_everything",
    "task_targets",
    "weights_digest",
]

TASK_RULES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "like": lambda r: r >= LIKE_THRESHOLD,
    "love": lambda r: r == LOVE_RATING,
    "dislike": lambda r: r <= 2,
    # Not monotone in liking (low at both ends): no threshold of the like/love scores.
    "neutral": lambda r: r == 3,
}


class DeviceError(SolarisError, RuntimeError):
    """The torch device asked for is not available on this machine."""


def resolve_device(name: str) -> torch.device:
    """``auto`` picks CUDA when present, else CPU."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise DeviceError("device 'cuda' requested but torch sees no CUDA device")
    return torch.device(name)


def seed_everything(seed: int) -> torch.Generator:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def task_targets(ratings: np.ndarray, tasks: tuple[str, ...]) -> torch.Tensor:
    """``[N, n_tasks]`` float32 binary targets from ratings."""
    unknown = [t for t in tasks if t not in TASK_RULES]
    if unknown:
        raise ModelInputError(f"unknown tasks {unknown}; known: {sorted(TASK_RULES)}")
    cols = [TASK_RULES[t](np.asarray(ratings)) for t in tasks]
    return torch.from_numpy(np.stack(cols, axis=1).astype(np.float32))


@dataclass(frozen=True)
class TimeSplit:
    """Rows with ``ts < train_end`` train, ``train_end <= ts < val_end`` validate, rest test."""

    train_end: int
    val_end: int

    @classmethod
    def from_shares(cls, ts: np.ndarray, train_share: float, val_share: float) -> TimeSplit:
        ordered = np.sort(np.asarray(ts))
        n = len(ordered)
        return cls(
            train_end=int(ordered[int(n * train_share)]),
            val_end=int(ordered[int(n * (train_share + val_share))]),
        )

    def part(self, ts: np.ndarray, name: str) -> np.ndarray:
        ts = np.asarray(ts)
        if name == "train":
            return ts < self.train_end
        if name == "val":
            return (ts >= self.train_end) & (ts < self.val_end)
        if name == "test":
            return ts >= self.val_end
        raise ModelInputError(f"unknown split part {name!r}")


@dataclass
class Examples:
    """Features, targets and (for the VM) tier inputs of N rows."""

    batch: FeatureBatch
    targets: torch.Tensor  # [N, n_tasks]
    tier_z: torch.Tensor | None = None  # [N, n_tiers, d]
    tier_mask: torch.Tensor | None = None  # [N, n_tiers]

    def __len__(self) -> int:
        return len(self.batch)

    def take(self, index: torch.Tensor | slice) -> Examples:
        return Examples(
            self.batch[index],
            self.targets[index],
            None if self.tier_z is None else self.tier_z[index],
            None if self.tier_mask is None else self.tier_mask[index],
        )


Predict = Callable[[nn.Module, Examples], torch.Tensor]


def predict_fm(model: nn.Module, ex: Examples) -> torch.Tensor:
    return model(ex.batch)


def predict_vm(model: nn.Module, ex: Examples) -> torch.Tensor:
    return model(ex.batch, ex.tier_z, ex.tier_mask)


@torch.inference_mode()
def predict_proba(
    model: nn.Module, ex: Examples, predict: Predict, batch_size: int = 8192
) -> np.ndarray:
    """``[N, n_tasks]`` probabilities, in batches."""
    model.eval()
    out = [
        torch.sigmoid(predict(model, ex.take(slice(i, i + batch_size)))).float()
        for i in range(0, len(ex), batch_size)
    ]
    return torch.cat(out).numpy()


def _mean_loss(model: nn.Module, ex: Examples, predict: Predict, batch_size: int) -> float:
    loss_fn = nn.BCEWithLogitsLoss(reduction="sum")
    total = 0.0
    model.eval()
    with torch.inference_mode():
        for i in range(0, len(ex), batch_size):
            part = ex.take(slice(i, i + batch_size))
            # Only the heads that have validation targets (the task; not distillation heads).
            logits = predict(model, part)[:, : part.targets.shape[1]]
            total += float(loss_fn(logits, part.targets))
    return total / (len(ex) * ex.targets.shape[1])


def fit(
    model: nn.Module,
    train: Examples,
    val: Examples,
    predict: Predict,
    cfg: TrainConfig,
    *,
    desc: str,
    augment: Callable[[Examples, torch.Generator], Examples] | None = None,
    loss_weights: torch.Tensor | None = None,
) -> float:
    """Adam with early stopping on validation log-loss; restores the best weights.

    ``augment`` transforms each training mini-batch (the VM's tier dropout).
    ``loss_weights`` (``[n_tasks]``) weights the training loss per target column, e.g. the
    soft-label heads of distillation. Targets may be soft (probabilities). Validation reads
    only the first ``val.targets.shape[1]`` logits, unweighted. Returns the best validation
    log-loss.
    """
    gen = seed_everything(cfg.seed)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    loss_fn = nn.BCEWithLogitsLoss(weight=loss_weights)
    best, best_state, stale = float("inf"), copy.deepcopy(model.state_dict()), 0
    bar = tqdm(range(cfg.max_epochs), desc=desc, unit="epoch", leave=False)
    for _epoch in bar:
        model.train()
        order = torch.randperm(len(train), generator=gen)
        for i in range(0, len(train), cfg.batch_size):
            part = train.take(order[i : i + cfg.batch_size])
            if augment is not None:
                part = augment(part, gen)
            opt.zero_grad(set_to_none=True)
            loss_fn(predict(model, part), part.targets).backward()
            opt.step()
        val_loss = _mean_loss(model, val, predict, 8192)
        bar.set_postfix(val_logloss=f"{val_loss:.4f}")
        if val_loss < best - 1e-5:
            best, best_state, stale = val_loss, copy.deepcopy(model.state_dict()), 0
        else:
            stale += 1
            if stale > cfg.patience:
                break
    model.load_state_dict(best_state)
    model.eval()
    return best


def weights_digest(*models: nn.Module, config: dict | None = None) -> str:
    """A short hash of the models' weights and the config that built them."""
    h = hashlib.sha256(json.dumps(config or {}, sort_keys=True, default=str).encode())
    for model in models:
        for name, tensor in sorted(model.state_dict().items()):
            h.update(name.encode())
            h.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:12]


CHECKPOINT_FORMAT = 2  # 2: tensors-only weights file and a JSON metadata file beside it


class CheckpointError(SolarisError, ValueError):
    """A checkpoint is missing its metadata, does not match it, or is not tensors only."""


def checkpoint_meta_path(path: StatePath) -> StatePath:
    """The JSON metadata file of the weights file ``path`` (``vm.pt`` -> ``vm.pt.json``)."""
    path = state_path(path)
    return path.with_name(f"{path.name}.json")


# Dataclasses a constructor argument may be (stored as their fields, rebuilt by name).
_INIT_DATACLASSES: dict[str, type] = {"FeatureSpec": FeatureSpec}


def _encode_init(value: object, where: str) -> object:
    """``value`` as JSON: plain types, lists, string-keyed dicts and known dataclasses."""
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, list | tuple):
        return [_encode_init(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _encode_init(v, f"{where}.{k}") for k, v in value.items()}
    name = type(value).__name__
    if dataclasses.is_dataclass(value) and _INIT_DATACLASSES.get(name) is type(value):
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return {"__dataclass__": name, "fields": _encode_init(fields, where)}
    raise CheckpointError(
        f"constructor argument {where} (type {name}) cannot be stored: a checkpoint stores "
        f"plain values, lists, dicts and {sorted(_INIT_DATACLASSES)} only"
    )


def _decode_init(value: object, where: str) -> object:
    if isinstance(value, list):
        return [_decode_init(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if not isinstance(value, dict):
        return value
    if "__dataclass__" not in value:
        return {k: _decode_init(v, f"{where}.{k}") for k, v in value.items()}
    cls = _INIT_DATACLASSES.get(value["__dataclass__"])
    if cls is None or not isinstance(value.get("fields"), dict):
        raise CheckpointError(f"{where}: unknown stored dataclass {value['__dataclass__']!r}")
    # Lists come back as tuples: the dataclasses are frozen and hashed.
    fields = {
        k: tuple(v) if isinstance(v, list) else _decode_init(v, f"{where}.{k}")
        for k, v in value["fields"].items()
    }
    return cls(**fields)


def save_checkpoint(
    path: StatePath, model: nn.Module, *, kind: str, version: str, init: dict
) -> StatePath:
    """The model's weights (tensors only, loadable with ``weights_only=True``) at ``path``,
    then its metadata (``kind``, ``version``, the constructor arguments ``init`` and the
    weights' SHA-256) in :func:`checkpoint_meta_path` beside it; both written atomically,
    the metadata last, so a reader that finds the metadata finds the weights it describes.
    """
    path = state_path(path)
    meta = {
        "format": CHECKPOINT_FORMAT,
        "kind": kind,
        "version": version,
        "init": _encode_init(init, "init"),
    }
    weights = tensor_bytes(model.state_dict(), where=path)
    meta["weights_sha256"] = hashlib.sha256(weights).hexdigest()
    atomic_write_bytes(path, weights)
    atomic_write_json(checkpoint_meta_path(path), meta)
    return path


def read_checkpoint(path: StatePath) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The metadata and the weights of checkpoint ``path``, checked against each other.

    The weights are loaded with ``torch.load(..., weights_only=True)``: a file that holds
    anything but tensors (a pickled object, a checkpoint of the old one-file format) is
    refused with :class:`CheckpointError`, and nothing in it runs.
    """
    path = state_path(path)
    meta_path = checkpoint_meta_path(path)
    if not meta_path.is_file():
        raise CheckpointError(
            f"{path}: no metadata file {meta_path.name} beside it (not a SOLARIS checkpoint of "
            f"format {CHECKPOINT_FORMAT}: train or save the model again)"
        )
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{meta_path}: unreadable checkpoint metadata: {exc}") from exc
    if not isinstance(meta, dict) or meta.get("format") != CHECKPOINT_FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else meta
        raise CheckpointError(
            f"{meta_path}: checkpoint format {found!r}, expected {CHECKPOINT_FORMAT}"
        )
    missing = [k for k in ("kind", "version", "init", "weights_sha256") if k not in meta]
    if missing:
        raise CheckpointError(f"{meta_path}: checkpoint metadata lacks {missing}")
    if not isinstance(meta["init"], dict):
        raise CheckpointError(f"{meta_path}: 'init' must map constructor arguments to values")
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != meta["weights_sha256"]:
        raise CheckpointError(
            f"{path}: the weights do not match their metadata {meta_path.name} (rewritten "
            "without it, or a write was interrupted: save the model again)"
        )
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises UnpicklingError, RuntimeError, ...
        raise CheckpointError(
            f"{path}: not a tensors-only checkpoint, refused by torch.load(weights_only=True): "
            f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        ) from exc
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise CheckpointError(f"{path}: expected a mapping of names to tensors")
    meta["init"] = _decode_init(meta["init"], f"{meta_path.name}: init")
    return meta, state


def load_checkpoint(
    path: StatePath, factory: Callable[..., nn.Module], *, kind: str | None = None
) -> tuple[nn.Module, str]:
    """Rebuild a model with ``factory(**init)`` and load its weights; returns (model, version).

    See :func:`read_checkpoint` for what is checked first; with ``kind``, the checkpoint
    must be of that kind.
    """
    meta, state = read_checkpoint(path)
    if kind is not None and meta["kind"] != kind:
        raise CheckpointError(f"{path}: a checkpoint of kind {meta['kind']!r}, expected {kind!r}")
    model = factory(**meta["init"])
    model.load_state_dict(state)
    model.eval()
    return model, str(meta["version"])
