"""Atomic file writes: the one way SOLARIS writes a file another process may read.

Data goes to a uniquely named hidden temp file in the target folder (same filesystem, so
the rename is atomic), is fsynced, and is renamed over the target: a reader sees the old
file or the new one, never half of one, and two writers of the same target never trip
over each other's temp file. The temp name ends in ``.tmp``, so no parquet reader (pyarrow
datasets skip hidden files; dask's reader, under Feast's file offline store, reads only
names ending in ``.parquet``) ever takes it for data.

Paths read back from an artifact (a verifier publication, a manifest) are data another
process wrote, so :func:`artifact_path` confines them to the artifacts root before any of
them is opened.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from solaris.errors import SolarisError

if TYPE_CHECKING:
    import pyarrow as pa
    import torch

__all__ = [
    "ArtifactPathError",
    "artifact_path",
    "atomic_torch_save",
    "atomic_write",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_parquet",
    "atomic_write_private",
    "publish_file",
    "replace_dir",
    "temp_path",
    "tensor_bytes",
]


class ArtifactPathError(SolarisError, ValueError):
    """A path read from an artifact leads outside the artifacts root (an absolute path
    elsewhere, a ``..`` escape or a symlink out), or is not a path at all."""


def temp_path(path: Path) -> Path:
    """A hidden temp name beside ``path``, unique to this writer."""
    return path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"


def _fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (best effort: not every filesystem allows it)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: Path, write: Callable[[BinaryIO], object]) -> Path:
    """``write(file)`` into a temp file beside ``path``, fsync it, rename it over ``path``.

    On any error the temp file is removed and ``path`` is untouched. The temp file is
    opened with ``open(..., "xb")`` (the umask's mode, not ``mkstemp``'s 0600), so the result
    is readable by the other users a file written here should be readable by.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    try:
        with open(tmp, "xb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())  # the rename must not become visible before the data
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(path.parent)
    return path


def publish_file(staged: Path, target: Path) -> Path:
    """Give the complete file ``staged`` its final name ``target`` (atomically, durably):
    for files written under a name no reader takes, then made visible once their step has
    succeeded (:mod:`solaris.pipeline.materialize`)."""
    os.replace(staged, target)
    _fsync_dir(Path(target).parent)
    return Path(target)


def replace_dir(new: Path, target: Path) -> Path:
    """Put the complete folder ``new`` at ``target`` (creating ``new`` empty if absent).

    The old ``target`` is renamed aside first and removed only once ``new`` is in place, so
    a finished folder is never lost before its replacement is complete; between the two
    renames (an instant) ``target`` is absent, never half-written.
    """
    new, target = Path(new), Path(target)
    new.mkdir(parents=True, exist_ok=True)
    aside = target.with_name(f".{target.name}~old-{uuid.uuid4().hex[:12]}")
    if target.exists():
        target.rename(aside)
    new.rename(target)
    _fsync_dir(target.parent)
    shutil.rmtree(aside, ignore_errors=True)
    return target


def atomic_write_bytes(path: Path, data: bytes) -> Path:
    return atomic_write(path, lambda fh: fh.write(data))


def atomic_write_json(path: Path, payload: Mapping[str, Any]) -> Path:
    return atomic_write_bytes(path, json.dumps(payload, indent=2, default=str).encode())


def atomic_write_parquet(path: Path, table: pa.Table) -> Path:
    """One parquet file of ``table`` (a pyarrow Table), atomically."""
    import pyarrow.parquet as pq

    return atomic_write(path, lambda fh: pq.write_table(table, fh))


def tensor_bytes(tensors: Mapping[str, torch.Tensor], *, where: object = "checkpoint") -> bytes:
    """``torch.save`` of a flat ``{name: tensor}`` mapping, as bytes.

    Only tensors are accepted, so the result loads with ``torch.load(..., weights_only=True)``
    and holds nothing a loader would have to trust; metadata belongs in a JSON file beside
    it. Raises ``TypeError`` naming ``where`` and the first entry that is not a tensor.
    """
    import io

    import torch

    plain: dict[str, torch.Tensor] = {}
    for name, value in tensors.items():
        if not isinstance(name, str) or not isinstance(value, torch.Tensor):
            raise TypeError(
                f"{where}: entry {name!r} is a {type(value).__name__}; a checkpoint holds "
                "tensors only (put metadata in a JSON file beside it)"
            )
        plain[name] = value.detach().cpu()
    buffer = io.BytesIO()
    torch.save(plain, buffer)
    return buffer.getvalue()


def atomic_torch_save(path: Path, tensors: Mapping[str, torch.Tensor]) -> Path:
    """:func:`tensor_bytes` of ``tensors`` written atomically to ``path``."""
    return atomic_write_bytes(path, tensor_bytes(tensors, where=path))


def artifact_path(root: Path, value: object, *, source: Path) -> Path:
    """The path ``value`` that artifact ``source`` names, resolved inside ``root``.

    A relative ``value`` is taken from ``root``; an absolute one must lie inside it. The
    result is resolved (symlinks followed) before the check, so neither ``..`` nor a link
    can lead out. Raises :class:`ArtifactPathError` naming ``source`` and ``value``.
    """
    if not isinstance(value, str) or not value or "\x00" in value:
        raise ArtifactPathError(f"{source}: {value!r} is not a path")
    named = Path(value)
    if ".." in named.parts:
        raise ArtifactPathError(f"{source}: path {value!r} contains '..'")
    base = Path(root).resolve()
    resolved = (named if named.is_absolute() else base / named).resolve()
    if not resolved.is_relative_to(base):
        raise ArtifactPathError(
            f"{source}: path {value!r} resolves to {resolved}, outside the artifacts root "
            f"{base}; refusing to read it"
        )
    return resolved


def atomic_write_private(path: Path, data: bytes) -> Path:
    """:func:`atomic_write_bytes` for a file only its owner may read (mode 0600), such as
    exported settings that hold a password. The temp file is made 0600 before any byte is
    written to it, and the rename keeps that mode."""

    def write(fh: BinaryIO) -> None:
        os.fchmod(fh.fileno(), 0o600)
        fh.write(data)

    return atomic_write(path, write)
