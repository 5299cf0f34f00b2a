"""The fill codes file: its round trip, its refusals and the fixed byte layout that lets
object storage be read by ranges (the ranged reads themselves against a real S3 endpoint:
``tests/integration/test_fill_codes_s3.py``)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from solaris.data.fill_codes import body_start, coalesce, read_fill_codes, write_fill_codes
from solaris.data.schemas import SchemaError

Z_DIM = 3


def test_fill_codes_round_trip_memory_mapped_and_exact(tmp_path: Path) -> None:
    users = np.array([1, 1, 4, 9], np.int64)
    items = np.array([3, 7, 3, 2], np.int64)
    z16 = np.arange(4 * Z_DIM, dtype=np.float16).reshape(4, Z_DIM) / 7
    target = tmp_path / "fc" / "00000.arrow"
    write_fill_codes(target, users, items, z16)
    back_u, back_i, back_z = read_fill_codes(target, z_dim=Z_DIM)
    assert back_u.tolist() == users.tolist() and back_i.tolist() == items.tolist()
    assert back_z.dtype == np.float16 and np.array_equal(back_z, z16)
    assert not back_z.flags.owndata  # a view of the mapping, not a copy
    write_fill_codes(target, users[:0], items[:0], z16[:0])
    assert [a.shape for a in read_fill_codes(target, z_dim=Z_DIM)] == [(0,), (0,), (0, Z_DIM)]


def test_fill_codes_written_in_several_batches_read_the_same(tmp_path: Path) -> None:
    """Another writer's file of several record batches is read as one (combined), with the
    same arrays as the one-batch file the cycle writes and maps."""
    users, items = np.array([1, 2, 2, 5], np.int64), np.array([3, 1, 4, 2], np.int64)
    z16 = np.arange(4 * Z_DIM, dtype=np.float16).reshape(4, Z_DIM)
    one = write_fill_codes(tmp_path / "one.arrow", users, items, z16)
    table = pa.ipc.open_file(pa.memory_map(str(one))).read_all()
    with pa.ipc.new_file(str(tmp_path / "many.arrow"), table.schema) as writer:
        writer.write_table(table, max_chunksize=1)
    assert pa.ipc.open_file(str(tmp_path / "many.arrow")).num_record_batches == 4
    for a, b in zip(
        read_fill_codes(one, z_dim=Z_DIM),
        read_fill_codes(tmp_path / "many.arrow", z_dim=Z_DIM),
        strict=True,
    ):
        assert np.array_equal(a, b)


def test_fill_codes_refuse_a_missing_file_another_width_and_unsorted_users(
    tmp_path: Path,
) -> None:
    target = tmp_path / "00003.arrow"
    with pytest.raises(SchemaError, match=r"00003\.arrow.*no such file"):
        read_fill_codes(target, z_dim=Z_DIM)
    z16 = np.zeros((3, Z_DIM), np.float16)
    write_fill_codes(target, np.array([5, 2, 8]), np.array([1, 1, 1]), z16)
    with pytest.raises(SchemaError, match=r"00003\.arrow.*user_id.*not sorted: row 1"):
        read_fill_codes(target, z_dim=Z_DIM)
    with pytest.raises(
        SchemaError, match=r"00003\.arrow.*halffloat>\[3\]\), expected.*halffloat>\[4\]\)"
    ):
        read_fill_codes(target, z_dim=4)
    target.write_bytes(b"not arrow")
    with pytest.raises(SchemaError, match=r"00003\.arrow.*cannot read fill codes"):
        read_fill_codes(target, z_dim=Z_DIM)


@pytest.mark.parametrize("z_dim", [1, 3, 8, 32])
@pytest.mark.parametrize("n", [1, 2, 7, 1001])
def test_fill_codes_columns_sit_where_the_ranged_reader_looks(
    tmp_path: Path, z_dim: int, n: int
) -> None:
    """``user_id`` at the body start (the same for every row count), ``item_id`` 8 n bytes
    on, ``z`` 16 n bytes on: checked against pyarrow's own reading of the written file."""
    rng = np.random.default_rng(n)
    users = np.sort(rng.integers(0, 1 << 40, n))
    items = rng.integers(0, 1 << 40, n)
    z16 = rng.standard_normal((n, z_dim)).astype(np.float16)
    path = write_fill_codes(tmp_path / "f.arrow", users, items, z16)
    data = path.read_bytes()
    body = body_start(z_dim)
    assert np.array_equal(np.frombuffer(data, np.int64, n, body), users)
    assert np.array_equal(np.frombuffer(data, np.int64, n, body + 8 * n), items)
    at = body + 16 * n
    assert np.array_equal(np.frombuffer(data, np.float16, n * z_dim, at).reshape(n, z_dim), z16)
    schema = pa.ipc.open_file(pa.py_buffer(data)).schema
    assert schema.metadata[b"solaris.rows"] == f"{n:020d}".encode()


def test_coalesce_merges_close_rows_and_bounds_the_ranges() -> None:
    rows = np.array([0, 1, 2, 10, 11, 500, 501, 900])
    # 8-byte rows, gaps under 64 bytes merged: [0, 11] (gap 7 rows = 56 bytes), then apart
    assert coalesce(rows, 8, 64, 16) == ([0, 500, 900], [11, 501, 900])
    # at most two ranges: the widest gap (501 -> 900 is 398 rows, 11 -> 500 is 488) kept
    assert coalesce(rows, 8, 64, 2) == ([0, 500], [11, 900])
    assert coalesce(rows, 8, 64, 1) == ([0], [900])
    assert coalesce(np.array([], np.int64), 8, 64, 4) == ([], [])
