"""Atomic file writes: the one way SOLARIS writes a file another process may read.

Data goes to a uniquely named hidden temp file in the target folder (same filesystem, so
the rename is atomic), is fsynced, and is renamed over the target: a reader sees the old
file or the new one, never half of one, and two writers of the same target never trip
over each other's temp file.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

__all__ = ["atomic_write", "atomic_write_bytes", "atomic_write_json", "temp_path"]


def temp_path(path: Path) -> Path:
    """A hidden temp name beside ``path``, unique to this writer."""
    return path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"


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
    return path


def atomic_write_bytes(path: Path, data: bytes) -> Path:
    return atomic_write(path, lambda fh: fh.write(data))


def atomic_write_json(path: Path, payload: dict[str, Any]) -> Path:
    return atomic_write_bytes(path, json.dumps(payload, indent=2, default=str).encode())
