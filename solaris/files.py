"""Atomic file writes: the one way SOLARIS writes a file another process may read.

Data goes to a uniquely named hidden temp file in the target folder (same filesystem, so
the rename is atomic), is fsynced, and is renamed over the target: a reader sees the old
file or the new one, never half of one, and two writers of the same target never trip
over each other's temp file. The temp name ends in ``.tmp``, so no parquet reader (pyarrow
datasets skip hidden files; dask's reader, under Feast's file offline store, reads only
names ending in ``.parquet``) ever takes it for data.

The cycle's state may live in object storage (``cycle.state_uri``, any fsspec URL):
:func:`state_path` gives a local :class:`~pathlib.Path` (a ``PosixUPath``) for a folder and
a :class:`~upath.UPath` for a URL, and the writers here take either. There is no rename on
an object store, but there a single PUT is atomic: an object appears whole or not at all,
so a remote write buffers the file and puts it in one call (a large one as one multipart
upload, which becomes visible only when complete).

Paths read back from an artifact (a verifier publication, a manifest) are data another
process wrote, so :func:`artifact_path` confines them to the artifacts root before any of
them is opened.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, TypeAlias

from solaris.errors import SolarisError

if TYPE_CHECKING:
    import pyarrow as pa
    import torch
    from upath import UPath

__all__ = [
    "ArgumentTypeError",
    "ArtifactPathError",
    "StatePath",
    "arrow_source",
    "artifact_name",
    "artifact_path",
    "atomic_torch_save",
    "atomic_write",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_parquet",
    "atomic_write_private",
    "is_local",
    "parquet_input",
    "publish_file",
    "read_state_bytes",
    "remove_tree",
    "state_file_problem",
    "state_path",
    "temp_path",
    "tensor_bytes",
]

# A file or folder of the cycle's state: a local path, or an fsspec path (a UPath). A string
# at run time: universal_pathlib (and fsspec) are imported only where a path is made, not by
# every module that names the type (the DAG files and serving import this one).
StatePath: TypeAlias = "Path | UPath"


def state_path(value: str | os.PathLike[str] | UPath, **storage_options: Any) -> StatePath:
    """``value`` as a path of the cycle's state: a local folder or file stays a local path
    (a ``PosixUPath``, which is a :class:`~pathlib.Path`; ``file://`` URLs too); a URL
    (``s3://bucket/x``, ``memory://x``) becomes the :class:`~upath.UPath` of its fsspec
    filesystem, opened with ``storage_options`` (an S3 ``endpoint_url``, say).

    The first URL of a protocol also turns off fsspec's directory-listing cache for that
    protocol in this process (unless fsspec's configuration already says otherwise): other
    processes add files to the folders the cycle lists, and a cached listing would hide
    them, from SOLARIS and from the readers Feast opens alike.
    """
    from upath import UPath

    path = value if isinstance(value, UPath) else UPath(value, **storage_options)
    if path.protocol in ("file", "local"):  # a folder after all: renames and fsync work
        return UPath(path.path)
    if not is_local(path):
        _fresh_listings(path.protocol)
    return path


def _fresh_listings(protocol: str) -> None:
    from fsspec.config import conf

    conf.setdefault(protocol, {}).setdefault("use_listings_cache", False)


def is_local(path: StatePath) -> bool:
    """Whether ``path`` is on this machine's filesystem (renames, fsync and ``os`` calls
    work on it), as opposed to a path of a remote fsspec filesystem."""
    return isinstance(path, Path)


def arrow_source(path: StatePath) -> tuple[str, Any]:
    """``(path, filesystem)`` for pyarrow's readers: a local path with pyarrow's own
    filesystem (``None``), a remote one with its fsspec filesystem (pyarrow wraps it)."""
    if is_local(path):
        return str(path), None
    return path.path, path.fs


def remove_tree(path: StatePath) -> None:
    """Remove the folder ``path`` and everything below it, if it is there."""
    if is_local(path):
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists():
        path.fs.rm(path.path, recursive=True)


_TAIL_BYTES = 64 << 10  # a state file's footer fits here (else the file is opened whole)


def read_state_bytes(path: StatePath) -> bytes:
    """The whole of the state file ``path``. On a remote filesystem this is one ranged
    ``GET`` (``bytes=0-``): fsspec's ``open`` and a plain ``cat`` both ask the object's size
    first (a ``HEAD``), which doubles the requests of the many small files an interval
    reads. Raises ``FileNotFoundError`` when it is not there."""
    if is_local(path):
        return path.read_bytes()
    where, filesystem = arrow_source(path)
    data: bytes = filesystem.cat_file(where, start=0)
    return data


def parquet_input(path: StatePath) -> Any:
    """What pyarrow's parquet readers take for the state file ``path``: the local path (read
    column by column from disk), or the whole remote object in memory, fetched with one
    ranged ``GET`` (:func:`read_state_bytes`; the cycle's files are small, and pyarrow's own
    fsspec reads cost a ``HEAD`` and a listing each)."""
    if is_local(path):
        return str(path)
    import pyarrow as pa

    return pa.BufferReader(read_state_bytes(path))


def _remote_footer_problem(path: StatePath) -> str | bool | None:
    """:func:`state_file_problem` of a remote ``.parquet`` or ``.arrow`` file from its tail
    only (one suffix ``GET``, no ``HEAD``); False when the tail does not settle it (a footer
    larger than the tail: the file is then opened as any other)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    where, filesystem = arrow_source(path)
    try:
        tail = filesystem.cat_file(where, start=-_TAIL_BYTES)
    except FileNotFoundError:
        return "missing"
    try:
        if path.suffix == ".parquet":
            pq.read_metadata(pa.BufferReader(tail))
        else:
            pa.ipc.open_file(pa.py_buffer(tail))
    except (pa.ArrowException, OSError, ValueError) as exc:
        if len(tail) >= _TAIL_BYTES:
            return False
        line = (str(exc).strip().splitlines() or [""])[0]
        return f"unreadable ({type(exc).__name__}: {line})"
    return None


def state_file_problem(path: StatePath) -> str | None:
    """What is wrong with the state file ``path``, from its footer or header only (nothing
    else of it is read): None when it opens, ``"missing"``, or ``"unreadable (<the reader's
    error, one line>)"``. By its suffix: ``.parquet`` (the footer), ``.arrow`` (an Arrow IPC
    file's footer), ``.npz`` (the zip's central directory), anything else (``.json``: small)
    parsed whole as JSON. A check that a task's inputs are all there before it writes: a
    file torn inside its data still fails the read itself."""
    import zipfile

    import pyarrow as pa
    import pyarrow.parquet as pq

    if not is_local(path) and path.suffix in (".parquet", ".arrow"):
        settled = _remote_footer_problem(path)
        if settled is None or isinstance(settled, str):
            return settled
    where, filesystem = arrow_source(path)
    try:
        with open(where, "rb") if filesystem is None else filesystem.open(where, "rb") as fh:
            if path.suffix == ".parquet":
                pq.read_metadata(fh)
            elif path.suffix == ".arrow":
                pa.ipc.open_file(fh)
            elif path.suffix == ".npz":
                with zipfile.ZipFile(fh) as archive:
                    archive.infolist()
            else:
                json.load(fh)
    except FileNotFoundError:
        return "missing"
    except (pa.ArrowException, OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        line = (str(exc).strip().splitlines() or [""])[0]
        return f"unreadable ({type(exc).__name__}: {line})"
    return None


class ArtifactPathError(SolarisError, ValueError):
    """A path read from an artifact leads outside the artifacts root (an absolute path
    elsewhere, a ``..`` escape or a symlink out), or is not a path at all."""


class ArgumentTypeError(SolarisError, TypeError):
    """An argument of the wrong type: a caller's bug, not bad data."""


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


def atomic_write(path: StatePath, write: Callable[[BinaryIO], object]) -> StatePath:
    """``write(file)`` into a temp file beside ``path``, fsync it, rename it over ``path``.

    On any error the temp file is removed and ``path`` is untouched. The temp file is
    opened with ``open(..., "xb")`` (the umask's mode, not ``mkstemp``'s 0600), so the result
    is readable by the other users a file written here should be readable by.

    On a remote filesystem ``write`` fills a buffer that is put as one object: there is no
    temp file, and an error before the put leaves ``path`` untouched as well.
    """
    path = state_path(path)
    if not is_local(path):
        buffer = io.BytesIO()
        write(buffer)
        path.fs.pipe_file(path.path, buffer.getvalue())
        return path
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


def publish_file(staged: StatePath, target: StatePath) -> StatePath:
    """Give the complete file ``staged`` its final name ``target`` (atomically, durably):
    for files written under a name no reader takes, then made visible once their step has
    succeeded (:mod:`solaris.pipeline.materialize`). On object storage: a server-side copy
    (the object appears whole) and the staged object's removal."""
    staged, target = state_path(staged), state_path(target)
    if not is_local(target):
        target.fs.mv(staged.path, target.path)
        return target
    os.replace(staged, target)
    _fsync_dir(target.parent)
    return target


def atomic_write_bytes(path: StatePath, data: bytes) -> StatePath:
    return atomic_write(path, lambda fh: fh.write(data))


def atomic_write_json(path: StatePath, payload: Mapping[str, Any]) -> StatePath:
    return atomic_write_bytes(path, json.dumps(payload, indent=2, default=str).encode())


def atomic_write_parquet(path: StatePath, table: pa.Table) -> StatePath:
    """One parquet file of ``table`` (a pyarrow Table), atomically."""
    import pyarrow.parquet as pq

    return atomic_write(path, lambda fh: pq.write_table(table, fh))


def tensor_bytes(tensors: Mapping[str, torch.Tensor], *, where: object = "checkpoint") -> bytes:
    """``torch.save`` of a flat ``{name: tensor}`` mapping, as bytes.

    Only tensors are accepted, so the result loads with ``torch.load(..., weights_only=True)``
    and holds nothing a loader would have to trust; metadata belongs in a JSON file beside
    it. Raises ``TypeError`` naming ``where`` and the first entry that is not a tensor.
    """
    import torch

    plain: dict[str, torch.Tensor] = {}
    for name, value in tensors.items():
        if not isinstance(name, str) or not isinstance(value, torch.Tensor):
            raise ArgumentTypeError(
                f"{where}: entry {name!r} is a {type(value).__name__}; a checkpoint holds "
                "tensors only (put metadata in a JSON file beside it)"
            )
        plain[name] = value.detach().cpu()
    buffer = io.BytesIO()
    torch.save(plain, buffer)
    return buffer.getvalue()


def atomic_torch_save(path: StatePath, tensors: Mapping[str, torch.Tensor]) -> StatePath:
    """:func:`tensor_bytes` of ``tensors`` written atomically to ``path``."""
    return atomic_write_bytes(path, tensor_bytes(tensors, where=path))


def artifact_path(root: StatePath, value: object, *, source: object) -> StatePath:
    """The path ``value`` that artifact ``source`` names, resolved inside ``root``.

    A relative ``value`` is taken from ``root``; an absolute one must lie inside it. The
    result is resolved (symlinks followed) before the check, so neither ``..`` nor a link
    can lead out. Under a remote ``root`` (no links there) only a relative ``value`` is
    accepted. Raises :class:`ArtifactPathError` naming ``source`` and ``value``.
    """
    if not isinstance(value, str) or not value or "\x00" in value:
        raise ArtifactPathError(f"{source}: {value!r} is not a path")
    named = Path(value)
    if ".." in named.parts:
        raise ArtifactPathError(f"{source}: path {value!r} contains '..'")
    root = state_path(root)
    if not is_local(root):
        if named.is_absolute() or "://" in value:
            raise ArtifactPathError(
                f"{source}: path {value!r} is not relative to the state root {root}; "
                "refusing to read it"
            )
        return root.joinpath(*named.parts)
    base = Path(root).resolve()
    resolved = (named if named.is_absolute() else base / named).resolve()
    if not resolved.is_relative_to(base):
        raise ArtifactPathError(
            f"{source}: path {value!r} resolves to {resolved}, outside the artifacts root "
            f"{base}; refusing to read it"
        )
    return resolved


def artifact_name(root: StatePath, path: StatePath) -> str:
    """How an artifact names ``path``, a file under ``root``: its path relative to ``root``
    (so the root can move), the inverse of :func:`artifact_path`. Raises
    :class:`ArtifactPathError` when ``path`` is not under ``root``."""
    root, path = state_path(root), state_path(path)
    if is_local(root) and is_local(path):
        inside = artifact_path(root, str(Path(path).resolve()), source=path)
        return inside.relative_to(Path(root).resolve()).as_posix()
    inner, base = str(path), str(root).rstrip("/") + "/"
    if not inner.startswith(base):
        raise ArtifactPathError(f"{path}: not under the state root {root}")
    return inner.removeprefix(base)


def atomic_write_private(path: Path, data: bytes) -> Path:
    """:func:`atomic_write_bytes` for a file only its owner may read (mode 0600), such as
    exported settings that hold a password. The temp file is made 0600 before any byte is
    written to it, and the rename keeps that mode."""

    def write(fh: BinaryIO) -> None:
        os.fchmod(fh.fileno(), 0o600)
        fh.write(data)

    return atomic_write(path, write)
