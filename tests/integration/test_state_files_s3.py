"""State files on object storage (a real S3 endpoint: moto's server) are checked from their
tail and read whole with one ranged GET each: the same verdicts as on a local disk."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from solaris.files import read_state_bytes, state_file_problem, state_path


def _parquet() -> bytes:
    out = io.BytesIO()
    pq.write_table(pa.table({"user_id": np.arange(50_000)}), out)
    return out.getvalue()


def _arrow() -> bytes:
    sink = pa.BufferOutputStream()
    table = pa.table({"user_id": np.arange(50_000)})
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def test_remote_state_files_are_judged_from_their_tail_like_local_ones(
    s3_bucket: str, tmp_path
) -> None:
    cases = {
        "good.parquet": _parquet(),
        "torn.parquet": _parquet()[:-100],
        "good.arrow": _arrow(),
        "torn.arrow": _arrow()[: len(_arrow()) // 2],
        "text.parquet": b"not parquet at all",
    }
    for name, data in cases.items():
        remote = state_path(f"{s3_bucket}/state/{name}")
        remote.fs.pipe_file(remote.path, data)
        (tmp_path / name).write_bytes(data)
        local_verdict = state_file_problem(tmp_path / name)
        remote_verdict = state_file_problem(remote)
        assert (remote_verdict is None) == (local_verdict is None), name
        assert (remote_verdict is None) == name.startswith("good"), (name, remote_verdict)
        assert read_state_bytes(remote) == data
    missing = state_path(f"{s3_bucket}/state/none.parquet")
    assert state_file_problem(missing) == "missing"


def test_remote_tables_read_file_by_file_give_what_a_local_read_gives(
    s3_bucket: str, tmp_path
) -> None:
    import pytest

    from solaris.data.schemas import SchemaError, read_table

    parts = [
        pa.table(
            {
                "request_id": pa.array([k, k + 10], pa.int64()),
                "user_id": pa.array([5, 6], pa.int64()),
                "ts": pa.array([100 + 10 * k, 101 + 10 * k], pa.int64()),
                "extra": pa.array(["x", "y"]),  # not the schema's: dropped
            }
        )
        for k in range(3)
    ]
    remote, local = [], []
    for k, table in enumerate(parts):
        out = io.BytesIO()
        pq.write_table(table, out)
        r = state_path(f"{s3_bucket}/state/req/{k}.parquet")
        r.fs.pipe_file(r.path, out.getvalue())
        (tmp_path / f"{k}.parquet").write_bytes(out.getvalue())
        remote.append(r)
        local.append(tmp_path / f"{k}.parquet")
    assert read_table(remote, "requests").equals(read_table(local, "requests"))
    assert read_table(remote[1], "requests").equals(read_table(local[1], "requests"))
    assert read_table(state_path(f"{s3_bucket}/state/req"), "requests").num_rows == 6  # a folder
    gone = state_path(f"{s3_bucket}/state/req/9.parquet")
    with pytest.raises(SchemaError, match=r"9\.parquet.*no such file"):
        read_table([remote[0], gone], "requests")
    bad = state_path(f"{s3_bucket}/state/req/bad.parquet")
    out = io.BytesIO()
    pq.write_table(pa.table({"user_id": pa.array([1], pa.int64())}), out)
    bad.fs.pipe_file(bad.path, out.getvalue())
    with pytest.raises(SchemaError, match=r"bad\.parquet.*request_id"):
        read_table(bad, "requests")
