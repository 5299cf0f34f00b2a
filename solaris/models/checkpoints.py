"""Versioned model checkpoints: tensors-only weights beside a JSON metadata file, and a
digest of weights and settings that names a model version."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import numbers
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from solaris.errors import SolarisError
from solaris.files import (
    StatePath,
    atomic_write_bytes,
    atomic_write_json,
    state_path,
    tensor_bytes,
)

__all__ = [
    "CHECKPOINT_FORMAT",
    "CheckpointError",
    "checkpoint_meta_path",
    "load_checkpoint",
    "read_checkpoint",
    "register_init_dataclass",
    "save_checkpoint",
    "weights_digest",
]


def weights_digest(*models: nn.Module, config: dict[str, Any] | None = None) -> str:
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


# Dataclasses a constructor argument may be (stored as their fields, rebuilt by name): each
# model's module registers its own (register_init_dataclass), so this one names none.
_INIT_DATACLASSES: dict[str, type] = {}


def register_init_dataclass(cls: type) -> type:
    """Let checkpoints store constructor arguments of the frozen dataclass ``cls`` (by its
    fields, rebuilt by its name); usable as a class decorator. A second class of the same
    name is refused: a stored name must rebuild one class."""
    if not dataclasses.is_dataclass(cls):
        raise CheckpointError(f"{cls!r} is not a dataclass")
    known = _INIT_DATACLASSES.setdefault(cls.__name__, cls)
    if known is not cls:
        raise CheckpointError(
            f"a dataclass named {cls.__name__!r} is registered already ({known.__module__})"
        )
    return cls


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
    path: StatePath, model: nn.Module, *, kind: str, version: str, init: dict[str, Any]
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
