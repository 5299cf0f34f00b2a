"""The codes manifest, ``codes.json``: which ``fm_version`` the cycle writes.

The autoencoder's training (:mod:`solaris.pipeline.codes`) writes it beside the models;
everything that needs only the version reads it here, without torch: the enrichment, the
serving endpoint, and an adopter's serving process (:func:`solaris.serving.current_fm_version`).

``{"fm_version": "<the version every served row carries>", "fm": "<FM.version>",
"z_dim": 32, "shared_dim": 24}``
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from solaris.errors import SolarisError

if TYPE_CHECKING:
    from solaris.config import SolarisConfig

__all__ = ["CODES_MANIFEST", "CodesError", "CodesManifest", "current_fm_version", "read_manifest"]

CODES_MANIFEST = "codes.json"


class CodesError(SolarisError, RuntimeError):
    """The models folder has no usable autoencoder for the configured FM."""


@dataclass(frozen=True)
class CodesManifest:
    """``fm_version``: what rows are written with and a VM asks for; ``fm``: the FM's own
    version; ``z_dim`` and ``shared_dim``: the code's and ``h``'s widths."""

    fm_version: str
    fm: str
    z_dim: int
    shared_dim: int


def read_manifest(models_dir: Path) -> CodesManifest:
    """The manifest of ``models_dir`` (no torch import)."""
    path = Path(models_dir) / CODES_MANIFEST
    if not path.is_file():
        raise CodesError(
            f"no {CODES_MANIFEST} in {models_dir}: train the autoencoder on your FM first "
            "(`solaris fit-autoencoder`, or `make demo` for the MovieLens example)"
        )
    try:
        raw = json.loads(path.read_text())
        return CodesManifest(
            str(raw["fm_version"]), str(raw["fm"]), int(raw["z_dim"]), int(raw["shared_dim"])
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise CodesError(f"{path} is not a codes manifest: {exc}") from exc


def current_fm_version(cfg: SolarisConfig) -> str:
    """The ``fm_version`` the cycle writes now: what a VM trained on today's codes asks for
    (``SolarisFeatures(cfg, fm_version=...)``), from the models folder's manifest. A
    :class:`CodesError` when no autoencoder was trained."""
    from solaris.namespace import Namespace

    return read_manifest(Namespace.of(cfg).models_dir).fm_version
