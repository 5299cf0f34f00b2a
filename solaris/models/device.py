"""The torch device and the seeds every model's training and inference start from."""

from __future__ import annotations

import random

import numpy as np
import torch

from solaris.errors import SolarisError

__all__ = ["DeviceError", "resolve_device", "seed_everything"]


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
