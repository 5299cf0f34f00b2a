"""Unit tests for table validation in :mod:`solaris.data.schemas`.

Each test builds a small table that breaks exactly one rule and checks that the SchemaError
names the source, the column and the problem.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from solaris.data.fill_codes import write_fill_codes
from solaris.data.schemas import (
    CANDIDATES_SCHEMA,
    REQUESTS_SCHEMA,
    SchemaError,
    pair_embeddings_schema,
    read_table,
    validate_candidates,
    validate_pair_embeddings,
    validate_requests,
    write_table,
)

Z_DIM = 3


def _requests(**overrides: pa.Array | list) -> pa.Table:
    columns: dict[str, pa.Array | list] = {
        "request_id": pa.array([0, 1, 2], pa.int64()),
        "user_id": pa.array([10, 11, 12], pa.int64()),
        "ts": pa.array([100, 100, 105], pa.int64()),
    }
    columns.update(overrides)
    return pa.table(columns)


def _candidates(**overrides: pa.Array | list) -> pa.Table:
    columns: dict[str, pa.Array | list] = {
        "request_id": pa.array([0, 0, 1], pa.int64()),
        "user_id": pa.array([10, 10, 11], pa.int64()),
        "item_id": pa.array([7, 8, 9], pa.int64()),
        "ts": pa.array([100, 100, 105], pa.int64()),
        "label": pa.array([1, 0, None], pa.int8()),
    }
    columns.update(overrides)
    return pa.table(columns)


def _pair_embeddings(**overrides: pa.Array | list) -> pa.Table:
    columns: dict[str, pa.Array | list] = {
        "user_id": pa.array([10, 11], pa.int64()),
        "item_id": pa.array([7, 8], pa.int64()),
        "z": pa.array([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]], pa.list_(pa.float32())),
        "fm_version": pa.array(["fm-1", "fm-1"]),
        "computed_at": pa.array([1_000_000, 2_000_000], pa.timestamp("us", tz="UTC")),
    }
    columns.update(overrides)
    return pa.table(columns)


def test_missing_column_names_column_and_lists_present_columns() -> None:
    table = _requests().drop_columns(["user_id"])
    with pytest.raises(SchemaError, match=r"req\.parquet: column 'user_id': missing column") as exc:
        validate_requests(table, "req.parquet")
    assert exc.value.column == "user_id"
    assert exc.value.source == "req.parquet"
    assert "request_id" in exc.value.problem and "ts" in exc.value.problem


def test_wrong_dtype_rejects_string_user_id_and_float_item_id() -> None:
    strings = _requests(user_id=pa.array(["10", "11", "12"]))
    with pytest.raises(SchemaError, match=r"req: column 'user_id': wrong type: got string") as exc:
        validate_requests(strings, "req")
    assert exc.value.column == "user_id"
    assert "int64" in exc.value.problem

    floats = _candidates(item_id=pa.array([7.0, 8.0, 9.0]))
    with pytest.raises(SchemaError, match=r"cand: column 'item_id': wrong type: got double") as exc:
        validate_candidates(floats, "cand")
    assert exc.value.column == "item_id"
    assert "int64" in exc.value.problem


def test_null_ids_report_count_and_first_row() -> None:
    table = _candidates(item_id=pa.array([7, None, None], pa.int64()))
    with pytest.raises(
        SchemaError, match=r"cand: column 'item_id': 2 null values \(first at row 1\)"
    ) as exc:
        validate_candidates(table, "cand")
    assert exc.value.column == "item_id"


def test_negative_ids_report_count_and_first_row() -> None:
    table = _requests(user_id=pa.array([10, -1, -5], pa.int64()))
    with pytest.raises(
        SchemaError, match=r"req: column 'user_id': 2 negative ids \(first at row 1"
    ) as exc:
        validate_requests(table, "req")
    assert exc.value.column == "user_id"


def test_nan_embedding_is_rejected_with_row() -> None:
    z = pa.array([[0.1, 0.2, 0.3], [0.4, float("nan"), 0.6]], pa.list_(pa.float64()))
    with pytest.raises(
        SchemaError, match=r"pe: column 'z': 1 NaN or inf values .*first at row 1"
    ) as exc:
        validate_pair_embeddings(_pair_embeddings(z=z), "pe", z_dim=Z_DIM)
    assert exc.value.column == "z"


def test_wrong_size_embedding_reports_expected_dim_and_bad_length() -> None:
    z = pa.array([[0.1, 0.2, 0.3], [0.4, 0.5]], pa.list_(pa.float32()))
    with pytest.raises(
        SchemaError,
        match=r"pe: column 'z': wrong length: expected d=3, 1 rows differ "
        r"\(first at row 1: length 2\)",
    ) as exc:
        validate_pair_embeddings(_pair_embeddings(z=z), "pe", z_dim=Z_DIM)
    assert exc.value.column == "z"


def test_unsorted_ts_reports_first_offending_row() -> None:
    table = _requests(ts=pa.array([100, 105, 101], pa.int64()))
    with pytest.raises(
        SchemaError, match=r"req: column 'ts': not sorted by ts .*row 2 has ts=101"
    ) as exc:
        validate_requests(table, "req")
    assert exc.value.column == "ts"


def test_future_ts_after_as_of_is_rejected() -> None:
    with pytest.raises(
        SchemaError,
        match=r"cand: column 'ts': 1 timestamps after as_of=104 \(first at row 2: 105\)",
    ) as exc:
        validate_candidates(_candidates(), "cand", as_of=104)
    assert exc.value.column == "ts"
    # The boundary itself is allowed: rows *at* as_of are not in the future.
    assert validate_candidates(_candidates(), "cand", as_of=105).num_rows == 3


def test_bad_label_value_is_rejected() -> None:
    table = _candidates(label=pa.array([1, 2, None], pa.int64()))
    with pytest.raises(
        SchemaError, match=r"cand: column 'label': 1 values outside \{0, 1\} \(first at row 1: 2\)"
    ) as exc:
        validate_candidates(table, "cand")
    assert exc.value.column == "label"


@pytest.mark.parametrize("content", [b"user_id,item_id\n1,2\n", b"PAR1\x00\x01\x02"])
def test_malformed_parquet_file_raises_schema_error_naming_file(
    tmp_path: Path, content: bytes
) -> None:
    # A text file, and a file that starts like parquet but is truncated.
    path = tmp_path / "broken.parquet"
    path.write_bytes(content)
    with pytest.raises(SchemaError, match=re.escape(f"{path}: cannot read parquet")) as exc:
        read_table(path, "requests")
    assert exc.value.column is None
    assert exc.value.source == str(path)


def test_missing_file_raises_schema_error_naming_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.parquet"
    with pytest.raises(SchemaError, match=re.escape(f"{path}: cannot read parquet")):
        read_table(path, "candidates")


def test_round_trip_casts_int32_to_int64_and_drops_extra_columns(tmp_path: Path) -> None:
    table = _candidates(
        request_id=pa.array([0, 0, 1], pa.int32()),
        item_id=pa.array([7, 8, 9], pa.uint16()),
        label=pa.array([1, 0, None], pa.int64()),
        extra=pa.array(["a", "b", "c"]),
    )
    target = tmp_path / "nested" / "dir" / "cand.parquet"
    assert write_table(table, target, "candidates") == target

    back = read_table(target, "candidates")
    assert back.schema.equals(CANDIDATES_SCHEMA)
    assert back.column("request_id").to_pylist() == [0, 0, 1]
    assert back.column("label").to_pylist() == [1, 0, None]
    # Only the target is left in the directory: no temp file survives a successful write.
    assert [p.name for p in target.parent.iterdir()] == ["cand.parquet"]


def test_round_trip_pair_embeddings_normalises_z_and_computed_at(tmp_path: Path) -> None:
    table = _pair_embeddings(
        z=pa.array([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]], pa.large_list(pa.float64())),
        computed_at=pa.array([1, 2], pa.timestamp("s")),  # naive: taken as UTC
    )
    target = tmp_path / "pe.parquet"
    write_table(table, target, "pair_embeddings", z_dim=Z_DIM)

    back = read_table(target, "pair_embeddings", z_dim=Z_DIM, as_of=2)
    assert back.schema.equals(pair_embeddings_schema(Z_DIM))
    assert back.column("computed_at").cast(pa.int64()).to_pylist() == [1_000_000, 2_000_000]


def test_read_table_accepts_directory_of_parquet_files(tmp_path: Path) -> None:
    pq.write_table(_requests().slice(0, 2), tmp_path / "part-0.parquet")
    pq.write_table(_requests().slice(2), tmp_path / "part-1.parquet")
    back = read_table(tmp_path, "requests")
    assert back.schema.equals(REQUESTS_SCHEMA)
    assert back.num_rows == 3


def test_write_table_on_invalid_data_leaves_no_file(tmp_path: Path) -> None:
    target = tmp_path / "out" / "req.parquet"
    bad = _requests(ts=pa.array([3, 2, 1], pa.int64()))
    with pytest.raises(SchemaError, match=re.escape(f"{target}: column 'ts': not sorted")):
        write_table(bad, target, "requests")
    assert not target.exists()
    assert not target.parent.exists() or list(target.parent.iterdir()) == []


def test_write_table_failure_mid_write_leaves_no_file_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_write(table: pa.Table, where: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(pq, "write_table", broken_write)
    target = tmp_path / "req.parquet"
    with pytest.raises(OSError, match="disk full"):
        write_table(_requests(), target, "requests")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: validate_pair_embeddings(pa.table({}), "t.parquet", z_dim=0), "t.parquet: z_dim"),
        (lambda: read_table([], "pair_embeddings"), "z_dim is required"),
        (lambda: read_table([], "nosuch"), "unknown table kind 'nosuch'"),
        (
            lambda: validate_pair_embeddings(
                pair_embeddings_schema(3).empty_table(),
                "p.parquet",
                z_dim=3,
                as_of=pd.Timestamp("2024-01-01"),
            ),
            "as_of: must be timezone-aware",
        ),
        (
            lambda: write_fill_codes(
                "x.arrow", np.zeros(2, np.int64), np.zeros(1, np.int64), np.zeros((2, 3))
            ),
            "x.arrow: fill codes: users, items and z16",
        ),
    ],
)
def test_every_contract_error_is_a_schema_error_naming_what_was_wrong(call, message) -> None:
    """Each of these was a ``TypeError`` (a one-argument ``SchemaError``) before."""
    with pytest.raises(SchemaError, match=re.escape(message)):
        call()
