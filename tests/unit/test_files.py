"""solaris.files: atomic writes under concurrency, and paths read from artifacts confined."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from solaris.errors import SolarisError
from solaris.files import (
    ArtifactPathError,
    arrow_source,
    artifact_path,
    atomic_torch_save,
    atomic_write,
    atomic_write_bytes,
    atomic_write_parquet,
    is_local,
    remove_tree,
    state_file_problem,
    state_path,
)

SIZE = 1 << 20  # 1 MiB: a write takes long enough for a reader to catch it half-done


def _payload(writer: int, k: int) -> bytes:
    return bytes([(writer * 101 + k) % 251]) * SIZE


def test_concurrent_writers_and_a_reader_never_see_a_missing_or_partial_file(tmp_path: Path):
    target = tmp_path / "shared" / "state.bin"
    atomic_write_bytes(target, _payload(0, 0))
    stop = threading.Event()
    errors: list[BaseException] = []
    reads: list[int] = []

    def write(writer: int) -> None:
        try:
            for k in range(60):
                atomic_write_bytes(target, _payload(writer, k))
        except BaseException as exc:  # recorded, asserted on below
            errors.append(exc)

    def read() -> None:
        try:
            while not stop.is_set():
                data = target.read_bytes()  # FileNotFoundError would be a failure
                if len(data) != SIZE or data != data[:1] * SIZE:
                    raise AssertionError(f"partial file: {len(data)} bytes")
                reads.append(len(data))
        except BaseException as exc:
            errors.append(exc)

    writers = [threading.Thread(target=write, args=(w,)) for w in (1, 2)]
    reader = threading.Thread(target=read)
    reader.start()
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    reader.join()
    assert errors == []
    assert len(reads) > 10
    assert sorted(p.name for p in target.parent.iterdir()) == ["state.bin"]  # no temp left


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path: Path):
    target = tmp_path / "f.bin"
    atomic_write_bytes(target, b"old")

    def fail(fh) -> None:
        fh.write(b"half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write(target, fail)
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin"]


def test_parquet_and_tensor_helpers_write_readable_files(tmp_path: Path):
    table = pa.table({"a": [1, 2, 3]})
    assert pq.read_table(atomic_write_parquet(tmp_path / "t.parquet", table)).equals(table)
    path = atomic_torch_save(tmp_path / "w.pt", {"w": torch.ones(2)})
    assert torch.equal(torch.load(path, weights_only=True)["w"], torch.ones(2))
    with pytest.raises(TypeError, match="'meta' is a dict; a checkpoint holds tensors only"):
        atomic_torch_save(tmp_path / "bad.pt", {"meta": {"version": 1}})
    assert not (tmp_path / "bad.pt").exists()


# --- object storage (fsspec's in-process memory filesystem) -------------------------------


@pytest.fixture
def bucket():
    """A fresh ``memory://`` prefix, removed after the test."""
    import uuid

    root = state_path(f"memory://solaris-test-{uuid.uuid4().hex[:8]}")
    yield root
    remove_tree(root)


def test_state_path_keeps_a_folder_local_and_gives_a_url_its_filesystem(tmp_path: Path, bucket):
    assert is_local(state_path(tmp_path)) and isinstance(state_path(str(tmp_path)), Path)
    assert not is_local(bucket) and bucket.protocol == "memory"
    assert arrow_source(state_path(tmp_path / "a.parquet")) == (str(tmp_path / "a.parquet"), None)
    where, filesystem = arrow_source(bucket / "a.parquet")
    assert where.endswith("/a.parquet") and filesystem is bucket.fs


def test_a_file_url_is_a_local_folder(tmp_path: Path) -> None:
    path = state_path(f"file://{tmp_path}/state")
    assert is_local(path) and path == tmp_path / "state"
    atomic_write_bytes(path / "a" / "b.json", b"{}")  # parents made, renamed into place
    assert (tmp_path / "state" / "a" / "b.json").read_bytes() == b"{}"


def test_a_remote_write_puts_the_whole_object_and_a_failed_one_leaves_the_old(bucket):
    target = bucket / "ledgers" / "one.parquet"
    atomic_write_parquet(target, pa.table({"x": [1, 2, 3]}))
    with target.open("rb") as fh:
        assert pq.read_table(fh).column("x").to_pylist() == [1, 2, 3]

    def fail(fh) -> None:
        fh.write(b"half")
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        atomic_write(target, fail)
    with target.open("rb") as fh:
        assert pq.read_table(fh).num_rows == 3  # untouched
    assert [p.name for p in (bucket / "ledgers").iterdir()] == ["one.parquet"]  # no leftover


def test_remove_tree_removes_a_remote_folder_and_ignores_an_absent_one(bucket):
    atomic_write_bytes(bucket / "gen" / "a" / "shard-0000.parquet", b"x")
    atomic_write_bytes(bucket / "keep.json", b"{}")
    remove_tree(bucket / "gen")
    remove_tree(bucket / "absent")
    assert [p.name for p in bucket.iterdir()] == ["keep.json"]


def test_artifact_path_under_a_remote_root_takes_only_relative_paths(bucket):
    assert str(artifact_path(bucket, "training/1/vm.pt", source="pub")) == str(
        bucket / "training" / "1" / "vm.pt"
    )
    for value in ("/etc/passwd", "s3://other/vm.pt", "training/../../x"):
        with pytest.raises(ArtifactPathError, match="pub"):
            artifact_path(bucket, value, source="pub")


# --- artifact_path ---------------------------------------------------------------------------


def test_artifact_path_accepts_relative_and_absolute_paths_inside_the_root(tmp_path: Path):
    root = tmp_path / "artifacts"
    (root / "a").mkdir(parents=True)
    source = root / "pub.json"
    assert artifact_path(root, "a/x.pt", source=source) == (root / "a" / "x.pt").resolve()
    inside = str((root / "a" / "x.pt").resolve())
    assert artifact_path(root, inside, source=source) == Path(inside)


@pytest.mark.parametrize(
    "value", ["/etc/passwd", "../outside.pt", "a/../../outside.pt", "", None, 3, "a\x00b"]
)
def test_artifact_path_refuses_what_leads_out_of_the_root(tmp_path: Path, value):
    root = tmp_path / "artifacts"
    root.mkdir()
    source = root / "pub.json"
    with pytest.raises(ArtifactPathError, match=r"pub\.json") as raised:
        artifact_path(root, value, source=source)
    assert isinstance(raised.value, SolarisError) and isinstance(raised.value, ValueError)


def test_artifact_path_refuses_a_symlink_leading_out(tmp_path: Path):
    root = tmp_path / "artifacts"
    root.mkdir()
    (tmp_path / "secret.pt").write_bytes(b"x")
    os.symlink(tmp_path / "secret.pt", root / "link.pt")
    os.symlink(tmp_path, root / "dir")
    for value in ("link.pt", "dir/secret.pt"):
        with pytest.raises(ArtifactPathError, match="outside the artifacts root"):
            artifact_path(root, value, source=root / "pub.json")


def _state_files(folder: Path) -> list[Path]:
    """One good file of each kind the cycle checks before a task writes."""
    import io
    import json

    import numpy as np

    table = pa.table({"x": pa.array(range(1000), pa.int64())})
    parquet = atomic_write_parquet(folder / "a.parquet", table)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    arrow = atomic_write_bytes(folder / "a.arrow", sink.getvalue().to_pybytes())
    buffer = io.BytesIO()
    np.savez(buffer, x=np.arange(1000))
    npz = atomic_write_bytes(folder / "a.npz", buffer.getvalue())
    record = atomic_write_bytes(folder / "a.json", json.dumps({"built_at": 1}).encode())
    return [parquet, arrow, npz, record]


@pytest.mark.parametrize("how", ["missing", "truncated", "garbage"])
def test_state_file_problem_tells_a_lost_or_torn_file_from_its_footer(tmp_path: Path, how):
    import numpy as np

    for path in _state_files(tmp_path):
        assert state_file_problem(path) is None, path
        data = path.read_bytes()
        if how == "missing":
            path.unlink()
        elif how == "truncated":
            path.write_bytes(data[: len(data) // 2])
        else:
            path.write_bytes(np.random.default_rng(1).bytes(len(data)))
        problem = state_file_problem(path)
        want = "missing" if how == "missing" else "unreadable ("
        assert problem is not None and problem.startswith(want), (path, problem)
        assert "\n" not in problem
