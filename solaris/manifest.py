"""The codes manifest, ``codes.json``: which ``fm_version`` the cycle writes.

The autoencoder's training (:mod:`solaris.pipeline.codes`) writes it beside the models;
everything that needs only the version reads it here, without torch: the enrichment, the
serving endpoint, and an adopter's serving process (:func:`solaris.serving.current_fm_version`).

``{"fm_version": "<the version every served row carries>", "fm": "<FM.version>",
"z_dim": 32, "shared_dim": 24}``

An ``fm_version`` is a short printable token (:data:`FM_VERSION_PATTERN`, at most
:data:`FM_VERSION_MAX` characters): every served row repeats it, so one from a manifest, a
``SolarisFeatures(fm_version=...)`` argument or ``solaris serve --fm-version`` is checked
here (:func:`check_fm_version`), once, and a bad one is an :class:`FmVersionError` naming
where it came from.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from solaris.errors import SolarisError, shown

if TYPE_CHECKING:
    from solaris.config import SolarisConfig

__all__ = [
    "CODES_MANIFEST",
    "FM_VERSION_MAX",
    "FM_VERSION_PATTERN",
    "CodesError",
    "CodesManifest",
    "FmVersionError",
    "check_fm_version",
    "current_fm_version",
    "read_manifest",
]

CODES_MANIFEST = "codes.json"
FM_VERSION_MAX = 64
"""The longest ``fm_version``: the cycle's own are ``fm-`` and 12 hex digits."""
FM_VERSION_PATTERN = rf"[A-Za-z0-9][A-Za-z0-9._:+-]{{0,{FM_VERSION_MAX - 1}}}"
"""An ``fm_version``: a letter or digit, then letters, digits and ``. _ : + -``."""
_FM_VERSION = re.compile(FM_VERSION_PATTERN)


class FmVersionError(SolarisError, ValueError):
    """An ``fm_version`` that is not a short printable token; names where it came from."""


def check_fm_version(value: object, where: str = "fm_version") -> str:
    """``value`` when it is an ``fm_version`` (:data:`FM_VERSION_PATTERN`); otherwise an
    :class:`FmVersionError` naming ``where`` (the argument, option or file; empty where the
    caller names it), a cut of the value, its length and the rule."""
    named = f"{where}: " if where else ""
    if not isinstance(value, str):
        raise FmVersionError(
            f"{named}an fm_version is a string, got {type(value).__name__} {shown(value)}"
        )
    if _FM_VERSION.fullmatch(value) is None:
        size = f"{len(value):,} characters" if len(value) > FM_VERSION_MAX else "the value"
        raise FmVersionError(
            f"{named}{size} {shown(value)} is not an fm_version: at most {FM_VERSION_MAX} "
            "characters, a letter or digit then letters, digits and . _ : + - "
            "(e.g. 'fm-3f2a9c0b1d4e')"
        )
    return value


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
            check_fm_version(raw["fm_version"], "fm_version"),
            str(raw["fm"]),
            int(raw["z_dim"]),
            int(raw["shared_dim"]),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise CodesError(f"{path} is not a codes manifest: {exc}") from exc


def current_fm_version(cfg: SolarisConfig) -> str:
    """The ``fm_version`` the cycle writes now: what a VM trained on today's codes asks for
    (``SolarisFeatures(cfg, fm_version=...)``), from the models folder's manifest. A
    :class:`CodesError` when no autoencoder was trained."""
    from solaris.namespace import Namespace

    return read_manifest(Namespace.of(cfg).models_dir).fm_version
