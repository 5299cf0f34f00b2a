"""Fill codes on object storage are read by ranges (a real S3 endpoint: moto's server):
the header and the key columns, then only the codes of the rows asked for, with no
``HEAD`` and a bounded number of requests; a missing or older file is refused by name."""

from __future__ import annotations

import numpy as np
import pytest

from solaris.data.fill_codes import (
    RangedCodes,
    fill_codes_schema,
    open_fill_codes,
    read_fill_codes,
    read_fill_codes_rows,
    write_fill_codes,
)
from solaris.data.schemas import SchemaError
from solaris.files import state_path

Z_DIM = 8


def test_ranged_fill_codes_read_the_same_codes_as_a_whole_read(s3_bucket: str) -> None:
    rng = np.random.default_rng(3)
    n = 5_000
    users = np.sort(rng.integers(0, 10**9, n))
    items = rng.integers(0, 10**6, n)
    z16 = rng.standard_normal((n, Z_DIM)).astype(np.float16)
    path = write_fill_codes(state_path(f"{s3_bucket}/fill/00001.arrow"), users, items, z16)

    rows = read_fill_codes_rows(path, z_dim=Z_DIM)
    assert rows == n
    got_u, got_i, got_z = open_fill_codes(path, z_dim=Z_DIM, rows=rows)
    assert np.array_equal(got_u, users) and np.array_equal(got_i, items)
    assert isinstance(got_z, RangedCodes) and got_z.requests == 0  # nothing read yet
    wanted = rng.choice(n, 300, replace=True)  # unsorted, repeated
    assert np.array_equal(got_z[wanted], z16[wanted])
    assert 1 <= got_z.requests <= 16
    assert got_z.bytes_read < z16.nbytes  # not the whole column
    # the whole-file reader agrees
    whole = read_fill_codes(path, z_dim=Z_DIM)
    assert np.array_equal(whole[2], z16)


def test_ranged_fill_codes_refuse_a_missing_file_and_one_without_a_row_count(
    s3_bucket: str,
) -> None:
    import pyarrow as pa

    missing = state_path(f"{s3_bucket}/fill/00007.arrow")
    with pytest.raises(SchemaError, match=r"00007\.arrow.*no such file"):
        read_fill_codes_rows(missing, z_dim=Z_DIM)
    older = state_path(f"{s3_bucket}/fill/00008.arrow")
    z = pa.FixedSizeListArray.from_arrays(pa.array(np.zeros(Z_DIM, np.float16)), Z_DIM)
    table = pa.Table.from_arrays(  # the schema without the row count
        [pa.array([1], pa.int64()), pa.array([2], pa.int64()), z], schema=fill_codes_schema(Z_DIM)
    )
    sink = pa.BufferOutputStream()
    with pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    older.fs.pipe_file(older.path, sink.getvalue().to_pybytes())
    with pytest.raises(SchemaError, match=r"00008\.arrow.*(row count|header)"):
        read_fill_codes_rows(older, z_dim=Z_DIM)
