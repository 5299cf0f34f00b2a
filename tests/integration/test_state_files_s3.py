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
