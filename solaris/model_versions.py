"""Model versions: every training run writes a new folder, and each namespace reads the one
pinned for it.

The models folder (``<artifacts_dir>/models``) is shared by every namespace, so a run that
rewrote it in place (the demo, ``solaris fit-autoencoder``) changed what a live namespace
serves under it: its next codes carried another FM's ``fm_version`` than its VM was trained
with, and the old models were gone. So nothing in it is ever rewritten::

    <artifacts_dir>/models/
        versions/<id>/      one training run's files (checkpoints, codes.json, ...), read-only
        pins/<name>.json    the version namespace <name> reads: {"version": "<id>", ...}
        codes.json, *.pt    the older, flat layout (read by a namespace with no pin)

A version's ``<id>`` is its creation time and a digest of its files
(``20261207T225612.041337Z-3f2a9c0b``): ids sort by age, and two runs never share one. A version
is built in a hidden folder and renamed into ``versions/`` complete (:func:`commit_version`),
its files made read-only; a reader never sees half of one, and a folder in ``versions/`` is
never written again.

:attr:`solaris.namespace.Namespace.models_dir` resolves the pin (:func:`models_folder`), so
every reader (the cycle, the near-line embedder, serving, the manifest checks) reads the
pinned version without knowing about versions. A pin changes only by :func:`pin_version`:
``solaris models promote``, or a training run pinning its own new version for its own
namespace; both refuse a namespace holding live state unless forced (the caller judges
liveness, :func:`solaris.orchestration.resources.live_state`, and passes the reason).

The older flat layout keeps working: a namespace without a pin reads the flat files, which
no run writes any more. A namespace with neither a pin nor flat files, where versions
exist, gets a :class:`ModelVersionError` naming them and the promote command.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from solaris.errors import SolarisError
from solaris.files import atomic_write_json

__all__ = [
    "NEWEST",
    "PINS",
    "VERSIONS",
    "VERSION_PATTERN",
    "ModelPinError",
    "ModelVersionError",
    "Pin",
    "check_version",
    "commit_version",
    "draft_folder",
    "flat_layout",
    "models_folder",
    "pin_version",
    "pinned",
    "pins",
    "refuse_live_pin",
    "version_folder",
    "versions",
]

VERSIONS = "versions"
PINS = "pins"
VERSION_PATTERN = r"\d{8}T\d{6}\.\d{6}Z-[0-9a-f]{8}"
"""A version id: UTC creation time to the microsecond, then 8 hex digits of its files'
digest."""
_VERSION = re.compile(VERSION_PATTERN)
_DRAFT = ".draft-"
NEWEST = "newest"
"""Names the newest version where a version is asked for (a script's replay namespace)."""


class ModelVersionError(SolarisError, LookupError):
    """A model version that is not there: an unknown id, a pin naming a missing or
    unreadable version, or a namespace that pins none while versions exist."""


class ModelPinError(SolarisError, RuntimeError):
    """A pin change refused: the namespace holds live state and the change was not forced.
    Nothing was written."""


@dataclass(frozen=True)
class Pin:
    """A namespace's pin: the version it reads, when and how it was set."""

    namespace: str
    version: str
    promoted_at: str
    forced: bool
    previous: str | None


def _pin_file(root: Path, name: str) -> Path:
    return Path(root) / PINS / f"{name}.json"


def version_folder(root: Path, version: str) -> Path:
    """The folder of ``version`` (which need not exist)."""
    return Path(root) / VERSIONS / version


def versions(root: Path) -> list[str]:
    """Every complete version under ``root``, oldest first (drafts are hidden folders and
    never listed)."""
    folder = Path(root) / VERSIONS
    if not folder.is_dir():
        return []
    return sorted(
        p.name for p in folder.iterdir() if p.is_dir() and _VERSION.fullmatch(p.name) is not None
    )


def flat_layout(root: Path) -> bool:
    """Whether ``root`` holds models in the older, flat layout (files beside ``versions/``)."""
    root = Path(root)
    return root.is_dir() and any(p.is_file() and not p.name.startswith(".") for p in root.iterdir())


def _read_pin(root: Path, name: str) -> Pin | None:
    path = _pin_file(root, name)
    if not path.is_file():
        return None
    try:
        raw = json.loads(path.read_text())
        pin = Pin(
            str(raw["namespace"]),
            str(raw["version"]),
            str(raw["promoted_at"]),
            bool(raw["forced"]),
            None if raw.get("previous") is None else str(raw["previous"]),
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ModelVersionError(
            f"{path} is not a model pin ({type(exc).__name__}: {exc}): promote a version "
            f"again (`solaris models promote --namespace {name} VERSION`)"
        ) from None
    if _VERSION.fullmatch(pin.version) is None or pin.namespace != name:
        raise ModelVersionError(
            f"{path} pins {pin.version!r} for namespace {pin.namespace!r}: not a version of "
            f"namespace {name!r}; promote one again (`solaris models promote --namespace "
            f"{name} VERSION`)"
        )
    return pin


def pinned(root: Path, name: str) -> Pin | None:
    """Namespace ``name``'s pin, or None when it has none."""
    return _read_pin(root, name)


def pins(root: Path) -> dict[str, Pin]:
    """Every namespace's pin, by namespace."""
    folder = Path(root) / PINS
    if not folder.is_dir():
        return {}
    found = {}
    for path in sorted(folder.glob("*.json")):
        if path.name.startswith("."):
            continue
        pin = _read_pin(root, path.stem)
        if pin is not None:
            found[path.stem] = pin
    return found


def _known(root: Path) -> str:
    names = versions(root)
    if not names:
        return f"there is none under {Path(root) / VERSIONS}"
    shown = ", ".join(names[-5:])
    more = f" (and {len(names) - 5} older)" if len(names) > 5 else ""
    return f"those under {Path(root) / VERSIONS} are {shown}{more}"


def models_folder(root: Path, name: str) -> Path:
    """The folder namespace ``name`` reads its models from: its pinned version; without a
    pin, ``root`` itself (the older flat layout, or nothing yet: the readers then say to
    train first).

    Raises:
        ModelVersionError: the pin is unreadable or names a version that is not there, or
            there is no pin and no flat layout while versions exist (naming them and the
            promote command)."""
    root = Path(root)
    pin = _read_pin(root, name)
    if pin is not None:
        folder = version_folder(root, pin.version)
        if not folder.is_dir():
            raise ModelVersionError(
                f"namespace {name!r} pins model version {pin.version} "
                f"({_pin_file(root, name)}), which is not there; {_known(root)}: promote one "
                f"(`solaris models promote --namespace {name} VERSION`)"
            )
        return folder
    if not flat_layout(root) and versions(root):
        raise ModelVersionError(
            f"namespace {name!r} pins no model version, and {_known(root)}: promote one "
            f"for it (`solaris models promote --namespace {name} VERSION`; "
            "`solaris models list` shows them)"
        )
    return root


def draft_folder(root: Path) -> Path:
    """A fresh hidden folder beside the versions to write a new one into, then
    :func:`commit_version` it (same filesystem: the rename is atomic)."""
    folder = Path(root) / VERSIONS / f"{_DRAFT}{uuid.uuid4().hex}"
    folder.mkdir(parents=True)
    return folder


def _digest(folder: Path) -> str:
    """A digest of every file's relative name and bytes, in name order."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0")
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        digest.update(b"\0")
    return digest.hexdigest()


def commit_version(root: Path, folder: Path) -> str:
    """Make the complete folder ``folder`` (a :func:`draft_folder`, or a staging folder on
    the same filesystem) a new version under ``root``; return its id.

    The files are made read-only and fsynced, then the folder is renamed into
    ``versions/<id>`` in one step: a reader sees the whole version or none. ``folder`` is
    gone afterwards."""
    folder = Path(folder)
    if not folder.is_dir() or not any(p.is_file() for p in folder.rglob("*")):
        raise ModelVersionError(f"{folder}: no model files to make a version of")
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    for path in files:
        with path.open("rb") as handle:
            os.fsync(handle.fileno())
        path.chmod(0o444)
    now = time.time_ns()
    second, micro = divmod(now // 1000, 1_000_000)
    stamp = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime(second))}.{micro:06d}Z"
    version = f"{stamp}-{_digest(folder)[:8]}"
    target = version_folder(root, version)
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():  # the same files in the same microsecond: that version already
        shutil.rmtree(folder)
        return version
    os.rename(folder, target)
    fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return version


def check_version(root: Path, version: object, name: str) -> str:
    """``version`` when it is a version under ``root`` (:data:`NEWEST`: the newest one);
    a :class:`ModelVersionError` naming those that are otherwise (``name``: the namespace
    it was to be pinned for)."""
    known = versions(root)
    if version == NEWEST and known:
        return known[-1]
    if not isinstance(version, str) or version not in known:
        raise ModelVersionError(
            f"no model version {version!r} to pin for namespace {name!r}: "
            f"{_known(Path(root))}. Nothing was changed"
        )
    return version


def refuse_live_pin(name: str, live: str | None, what: str, remedy: str, *, force: bool) -> None:
    """Raise :class:`ModelPinError` when ``live`` (why namespace ``name`` holds live state)
    is set and ``force`` is not: the one rule for every change of a pin. ``what``: the
    change refused; ``remedy``: how to force it (the command and its ``--force``)."""
    if live is None or force:
        return
    raise ModelPinError(
        f"will not {what}: {live}, and its VM was trained with the codes of the models it "
        f"reads now. Nothing was changed: {remedy} does it anyway"
    )


def pin_version(
    root: Path, name: str, version: str, *, live: str | None, force: bool = False
) -> Pin:
    """Pin ``version`` (or :data:`NEWEST`) for namespace ``name`` (one small JSON file,
    written atomically); return the new pin.

    ``live``: why the namespace holds live state, or None (the caller's judgement,
    :func:`solaris.orchestration.resources.live_state`). Nothing is written when refused.

    Raises:
        ModelVersionError: ``version`` is not a version under ``root`` (naming those that are).
        ModelPinError: ``live`` is set and ``force`` is not (naming the namespace and
            ``--force``)."""
    root = Path(root)
    version = check_version(root, version, name)
    current = _read_pin(root, name)
    if current is not None and current.version == version:
        return current
    refuse_live_pin(
        name,
        live,
        f"change the models namespace {name!r} reads to {version}",
        f"`solaris models promote --namespace {name} {version} --force`",
        force=force,
    )
    pin = Pin(
        name,
        version,
        time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        live is not None,
        current.version if current else None,
    )
    atomic_write_json(_pin_file(root, name), pin.__dict__)
    return pin
