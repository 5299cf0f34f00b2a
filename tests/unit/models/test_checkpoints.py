"""Checkpoints of any model: tensors-only weights beside their metadata, constructor
arguments stored as plain values or registered dataclasses, the weights' digest."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from torch import nn

from solaris.models.checkpoints import (
    CheckpointError,
    checkpoint_meta_path,
    load_checkpoint,
    register_init_dataclass,
    save_checkpoint,
    weights_digest,
)
from solaris.models.device import DeviceError, resolve_device, seed_everything


@register_init_dataclass
@dataclass(frozen=True)
class _Shape:
    inputs: int
    outputs: int


class _Model(nn.Module):
    """``[B, shape.inputs] -> [B, shape.outputs]``."""

    def __init__(self, shape: _Shape, bias: bool = True) -> None:
        super().__init__()
        self.linear = nn.Linear(shape.inputs, shape.outputs, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


def test_a_model_with_a_registered_dataclass_argument_round_trips(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = _Model(_Shape(3, 2), bias=False)
    init = {"shape": _Shape(3, 2), "bias": False}
    path = save_checkpoint(tmp_path / "m.pt", model, kind="toy", version="v1", init=init)
    assert checkpoint_meta_path(path).is_file()
    loaded, version = load_checkpoint(path, _Model, kind="toy")
    assert version == "v1"
    assert isinstance(loaded, _Model) and loaded.linear.bias is None
    x = torch.randn(4, 3)
    assert torch.equal(loaded(x), model(x))
    assert weights_digest(loaded) == weights_digest(model)
    with pytest.raises(CheckpointError, match="of kind 'toy', expected 'other'"):
        load_checkpoint(path, _Model, kind="other")


def test_an_unregistered_dataclass_argument_is_refused_naming_it(tmp_path: Path) -> None:
    @dataclass(frozen=True)
    class Unknown:
        size: int

    with pytest.raises(CheckpointError, match=r"init.shape \(type Unknown\) cannot be stored"):
        model, init = _Model(_Shape(1, 1)), {"shape": Unknown(1)}
        save_checkpoint(tmp_path / "m.pt", model, kind="toy", version="v", init=init)
    assert not (tmp_path / "m.pt").exists()


def test_a_second_dataclass_of_a_registered_name_is_refused() -> None:
    @dataclass(frozen=True)
    class _Shape:  # the name of the one registered above
        size: int

    with pytest.raises(CheckpointError, match="named '_Shape' is registered already"):
        register_init_dataclass(_Shape)
    with pytest.raises(CheckpointError, match="is not a dataclass"):
        register_init_dataclass(int)


def test_the_device_and_seeds() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    if not torch.cuda.is_available():
        with pytest.raises(DeviceError, match="no CUDA device"):
            resolve_device("cuda")
    first = torch.rand(3, generator=seed_everything(7))
    assert torch.equal(first, torch.rand(3, generator=seed_everything(7)))
