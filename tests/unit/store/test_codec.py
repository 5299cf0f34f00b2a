"""The record codec and write validation: round trips for every view, absent and short
records, mixed record lengths, the offline rows, and what ``normalize`` refuses."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from solaris.store.codec import (
    ViewRows,
    decode_records,
    encode_records,
    f16_round,
    normalize,
    offline_schema,
    rows_from_table,
)
from solaris.store.contract import (
    EVENT_TS,
    IAGG,
    MAX_EPOCH_S,
    NBR,
    PAIR,
    UAGG,
    UNN,
    VIEWS,
    InvalidWriteError,
    Kind,
    ViewParams,
    ViewSpec,
)

D = 4
PARAMS = ViewParams(z_dim=D, read_ttl_s=3600, retention_s=7200)
N = 5
T0_US = 1_700_000_000_000_000  # event times are whole seconds
US = 1_000_000
TS_TYPE = pa.timestamp("us", tz="UTC")
MIXED_VERSIONS = ["fm-1", "fm-1", "fm-22", "é-v3", "fm-1"]  # several record lengths
ONE_VERSION = ["fm-1"] * N

SPECS = list(VIEWS.values())
SPEC_IDS = list(VIEWS)


def _data(spec: ViewSpec, versions: list[str] | None = None, seed: int = 0) -> dict[str, Any]:
    """Columns of ``N`` valid rows of ``spec`` (no computed_at: it is derived)."""
    rng = np.random.default_rng(seed)
    versions = versions or MIXED_VERSIONS
    data: dict[str, Any] = {}
    ids = {"user_id": [1, 1, 2, 3, 2**62], "item_id": [10, 11, 10, 0, 2**63 - 1]}
    for key in spec.join_keys:
        data[key] = ids[key]
    data[EVENT_TS] = [T0_US + k * 3_601 * US for k in range(N)]
    for f in spec.fields:
        if f.kind.is_vector:
            data[f.name] = (rng.standard_normal((N, D)) * 3).astype(np.float32)
        elif f.kind is Kind.INT64 and f.at_most_event_s:  # a window start: before its end
            data[f.name] = [t // US - 86_400 for t in data[EVENT_TS]]
        elif f.kind is Kind.INT64:
            data[f.name] = [1, 5, 7, 2**62, 123]
        elif f.kind is Kind.FLOAT32:
            data[f.name] = rng.random(N).astype(np.float32)
        elif f.kind is Kind.STRING:
            data[f.name] = list(versions)
        elif f.kind is Kind.INT64_LIST:
            data[f.name] = [[2, 3, 6], [], [4], [5, 2**62], [7, 8, 9, 10]]  # never the row's user
        elif f.kind is Kind.FLOAT32_LIST:
            data[f.name] = [[0.5, 0.25, 0.125], [], [1.0], [0.75, -0.5], [0.1, 0.2, 0.3, 0.4]]
    data[EVENT_TS] = data.pop(EVENT_TS)  # the last column, as before
    return data


def _table(data: dict[str, Any], spec: ViewSpec) -> pa.Table:
    columns: dict[str, pa.Array] = {}
    for name, values in data.items():
        if name == EVENT_TS:
            columns[name] = pa.array(values, TS_TYPE)
        elif name in spec.field_names and spec.field(name).kind.is_vector:
            columns[name] = pa.array([list(v) for v in values], pa.list_(pa.float32()))
        else:
            columns[name] = pa.array(values)
    return pa.table(columns)


def _records(spec: ViewSpec, data: dict[str, Any]) -> list[bytes]:
    return encode_records(spec, PARAMS, normalize(spec, PARAMS, _table(data, spec)))


def _assert_row(spec: ViewSpec, rows: ViewRows, out: int, data: dict[str, Any], src: int) -> None:
    """Row ``out`` of ``rows`` holds row ``src`` of ``data``, exactly as stored."""
    assert rows.found[out]
    assert rows.event_us[out] == data[EVENT_TS][src]
    for f in spec.fields:
        got = rows.values[f.name][out]
        if f.kind is Kind.VECTOR_F16:
            assert rows.values[f.name].dtype == np.float16
            np.testing.assert_array_equal(got, data[f.name][src].astype(np.float16))
        elif f.kind is Kind.VECTOR_F32:
            assert rows.values[f.name].dtype == np.float32
            np.testing.assert_array_equal(got, data[f.name][src])
        elif f.kind is Kind.EVENT_S:
            assert got == data[EVENT_TS][src] // US
        elif f.kind is Kind.INT64:
            assert got == data[f.name][src]
        elif f.kind is Kind.FLOAT32:
            assert got == np.float32(data[f.name][src])
        elif f.kind is Kind.STRING:
            assert bytes(got) == data[f.name][src].encode("utf-8")
        elif f.kind is Kind.INT64_LIST:
            np.testing.assert_array_equal(got, np.asarray(data[f.name][src], np.int64))
            assert got.dtype == np.int64
        else:
            np.testing.assert_array_equal(got, np.asarray(data[f.name][src], np.float32))
            assert got.dtype == np.float32


def _assert_absent(spec: ViewSpec, rows: ViewRows, out: int) -> None:
    assert not rows.found[out]
    assert rows.event_us[out] == 0
    for f in spec.fields:
        got = rows.values[f.name][out]
        if f.kind in (Kind.INT64_LIST, Kind.FLOAT32_LIST):
            assert got is None or len(got) == 0
        elif f.kind is Kind.STRING:
            assert bytes(got) == b""
        else:
            assert not np.any(got)


# --------------------------------------------------------------------------------------------
# Round trips
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("versions", [ONE_VERSION, MIXED_VERSIONS], ids=["one-len", "mixed-len"])
@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_encode_then_decode_returns_every_row_of_every_view(
    spec: ViewSpec, versions: list[str]
) -> None:
    data = _data(spec, versions)
    records = _records(spec, data)
    assert len(records) == N
    assert all(isinstance(r, bytes) for r in records)
    rows = decode_records(spec, PARAMS, records)
    assert len(rows) == N
    for k in range(N):
        _assert_row(spec, rows, k, data, k)


def test_float16_vectors_come_back_as_their_float16_rounding() -> None:
    data = _data(PAIR, ONE_VERSION)
    data["z"][0] = np.array([0.1, 1 / 3, 1000.3, -65504.0], np.float32)
    rows = decode_records(PAIR, PARAMS, _records(PAIR, data))
    np.testing.assert_array_equal(rows.values["z"].astype(np.float32), f16_round(data["z"]))
    assert rows.values["z"][0, 0] != np.float32(0.1)  # really rounded


def test_float32_vectors_come_back_bit_exact() -> None:
    data = _data(UAGG, ONE_VERSION)
    data["z_sum"][1] = np.array([0.1, 1 / 3, 1e6, -1e-30], np.float32)
    rows = decode_records(UAGG, PARAMS, _records(UAGG, data))
    np.testing.assert_array_equal(rows.values["z_sum"], data["z_sum"])


def test_computed_at_is_the_event_time_in_whole_seconds() -> None:
    data = _data(NBR)
    rows = decode_records(NBR, PARAMS, _records(NBR, data))
    np.testing.assert_array_equal(rows.values["computed_at"], np.asarray(data[EVENT_TS]) // US)
    np.testing.assert_array_equal(rows.event_us, data[EVENT_TS])


def test_computed_at_is_not_stored_in_the_record() -> None:
    data = _data(PAIR, ONE_VERSION)
    (record, *_) = _records(PAIR, data)
    # event_us (8 bytes) + d float16 + the version string, nothing else.
    assert len(record) == 8 + 2 * D + len("fm-1")
    assert int.from_bytes(record[:8], "little", signed=True) == data[EVENT_TS][0]


def test_unn_lists_round_trip_including_an_empty_list() -> None:
    data = _data(UNN)
    rows = decode_records(UNN, PARAMS, _records(UNN, data))
    assert len(rows.values["nbr_ids"][1]) == 0
    assert len(rows.values["nbr_sims"][1]) == 0
    np.testing.assert_array_equal(rows.values["nbr_ids"][3], [5, 2**62])


def test_encoding_no_rows_gives_no_records() -> None:
    table = normalize(PAIR, PARAMS, offline_schema(PAIR).empty_table())
    assert table.num_rows == 0
    assert encode_records(PAIR, PARAMS, table) == []


# --------------------------------------------------------------------------------------------
# Absent and damaged records
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("versions", [ONE_VERSION, MIXED_VERSIONS], ids=["one-len", "mixed-len"])
@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_none_replies_are_not_found_and_the_others_stay_aligned(
    spec: ViewSpec, versions: list[str]
) -> None:
    data = _data(spec, versions)
    records = _records(spec, data)
    replies = [None, records[0], None, records[2], records[3], None]
    rows = decode_records(spec, PARAMS, replies)
    assert len(rows) == len(replies)
    for out, src in ((1, 0), (3, 2), (4, 3)):
        _assert_row(spec, rows, out, data, src)
    for out in (0, 2, 5):
        _assert_absent(spec, rows, out)


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_only_none_replies_decode_to_empty_rows(spec: ViewSpec) -> None:
    rows = decode_records(spec, PARAMS, [None, None, None])
    assert rows.found.tolist() == [False, False, False]
    for k in range(3):
        _assert_absent(spec, rows, k)


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_no_replies_decode_to_zero_rows(spec: ViewSpec) -> None:
    rows = decode_records(spec, PARAMS, [])
    assert len(rows) == 0


def test_mixed_version_lengths_in_one_batch_decode_each_row_correctly() -> None:
    versions = ["a", "version-long", "bb", "a", "version-long"]
    data = _data(NBR, versions)
    records = _records(NBR, data)
    assert len({len(r) for r in records}) == 3
    rows = decode_records(NBR, PARAMS, records[::-1])
    for out in range(N):
        _assert_row(NBR, rows, out, data, N - 1 - out)
    assert [bytes(v) for v in rows.values["fm_version"]] == [v.encode() for v in versions[::-1]]


def _fixed_bytes(spec: ViewSpec) -> int:
    """Bytes of a record's fixed part: event_us, then the stored fixed-width fields."""
    width = {Kind.VECTOR_F16: 2 * D, Kind.VECTOR_F32: 4 * D, Kind.INT64: 8, Kind.FLOAT32: 4}
    return 8 + sum(width.get(f.kind, 0) for f in spec.fields)


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_a_record_shorter_than_the_fixed_part_is_treated_as_absent(spec: ViewSpec) -> None:
    data = _data(spec, ONE_VERSION)
    records = _records(spec, data)
    short = records[1][: _fixed_bytes(spec) - 1]
    rows = decode_records(spec, PARAMS, [records[0], short, b"", records[2]])
    _assert_row(spec, rows, 0, data, 0)
    _assert_absent(spec, rows, 1)
    _assert_absent(spec, rows, 2)
    _assert_row(spec, rows, 3, data, 2)


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_a_batch_of_only_short_records_is_all_absent(spec: ViewSpec) -> None:
    rows = decode_records(spec, PARAMS, [b"\x01" * 7, b"\x01" * 7])
    assert rows.found.tolist() == [False, False]


# --------------------------------------------------------------------------------------------
# Offline rows
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("versions", [ONE_VERSION, MIXED_VERSIONS], ids=["one-len", "mixed-len"])
@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_rows_from_table_equals_decode_records_on_the_same_rows(
    spec: ViewSpec, versions: list[str]
) -> None:
    data = _data(spec, versions)
    table = normalize(spec, PARAMS, _table(data, spec))
    records = encode_records(spec, PARAMS, table)
    absent = {1, 3}
    replies = [None if k in absent else r for k, r in enumerate(records)]
    events = table[EVENT_TS].to_pylist()
    offline = table.set_column(
        table.schema.get_field_index(EVENT_TS),
        EVENT_TS,
        pa.array([None if k in absent else e for k, e in enumerate(events)], TS_TYPE),
    )
    online = decode_records(spec, PARAMS, replies)
    historical = rows_from_table(spec, PARAMS, offline)
    np.testing.assert_array_equal(historical.found, online.found)
    np.testing.assert_array_equal(historical.event_us, online.event_us)
    assert set(historical.values) == set(online.values) == set(spec.field_names)
    for f in spec.fields:
        a, b = historical.values[f.name], online.values[f.name]
        if f.kind in (Kind.INT64_LIST, Kind.FLOAT32_LIST):
            for x, y in zip(a, b, strict=True):
                if x is None or y is None:
                    assert x is None and y is None
                else:
                    np.testing.assert_array_equal(x, y)
                    assert x.dtype == y.dtype
        elif f.kind is Kind.STRING:
            assert [bytes(x) for x in a] == [bytes(y) for y in b]
        else:
            assert a.dtype == b.dtype, f.name
            np.testing.assert_array_equal(a, b)


def test_rows_from_table_with_no_found_row_is_empty() -> None:
    table = normalize(PAIR, PARAMS, _table(_data(PAIR), PAIR))
    offline = table.set_column(
        table.schema.get_field_index(EVENT_TS), EVENT_TS, pa.nulls(N, TS_TYPE)
    )
    rows = rows_from_table(PAIR, PARAMS, offline)
    assert not rows.found.any()
    assert not rows.event_us.any()


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_offline_schema_orders_join_keys_then_fields_then_event_ts(spec: ViewSpec) -> None:
    schema = offline_schema(spec)
    assert schema.names == [*spec.join_keys, *spec.field_names, EVENT_TS]
    for key in spec.join_keys:
        assert schema.field(key).type == pa.int64()
    assert schema.field(EVENT_TS).type == TS_TYPE
    assert not any(f.nullable for f in schema)


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_normalize_returns_the_offline_schema_and_drops_extra_columns(spec: ViewSpec) -> None:
    table = _table(_data(spec), spec).append_column("extra", pa.array(range(N)))
    out = normalize(spec, PARAMS, table)
    assert out.schema == offline_schema(spec)
    assert out.num_rows == N


def test_normalize_rounds_float16_fields_to_float16_offline() -> None:
    data = _data(PAIR)
    out = normalize(PAIR, PARAMS, _table(data, PAIR))
    z = np.array(out["z"].to_pylist(), np.float32)
    np.testing.assert_array_equal(z, f16_round(data["z"]))


def test_normalize_accepts_a_pandas_frame_with_naive_datetimes_as_utc() -> None:
    data = _data(PAIR)
    frame = pd.DataFrame(
        {
            "user_id": data["user_id"],
            "item_id": data["item_id"],
            "z": list(data["z"]),
            "fm_version": data["fm_version"],
            EVENT_TS: pd.to_datetime(np.asarray(data[EVENT_TS]), unit="us"),
        }
    )
    out = normalize(PAIR, PARAMS, frame)
    assert out[EVENT_TS].cast(pa.int64()).to_pylist() == data[EVENT_TS]


def test_normalize_accepts_computed_at_omitted_or_equal_to_the_event_seconds() -> None:
    data = _data(PAIR)
    omitted = normalize(PAIR, PARAMS, _table(data, PAIR))
    given = normalize(
        PAIR, PARAMS, _table({**data, "computed_at": [t // US for t in data[EVENT_TS]]}, PAIR)
    )
    assert omitted.equals(given)
    assert omitted["computed_at"].to_pylist() == [t // US for t in data[EVENT_TS]]


def test_normalize_accepts_the_last_second_before_max_epoch() -> None:
    data = _data(PAIR)
    data[EVENT_TS] = [(MAX_EPOCH_S - 1) * US] * N
    normalize(PAIR, PARAMS, _table(data, PAIR))


def test_normalize_accepts_float16_range_values_in_a_float32_vector() -> None:
    data = _data(UAGG)
    data["z_sum"][2, 1] = 1e6
    out = normalize(UAGG, PARAMS, _table(data, UAGG))
    assert out["z_sum"].to_pylist()[2][1] == 1e6


# --------------------------------------------------------------------------------------------
# What normalize refuses
# --------------------------------------------------------------------------------------------


def _rejects(spec: ViewSpec, table: pa.Table | pd.DataFrame, column: str, row: int | None) -> str:
    """``normalize`` raises an InvalidWriteError naming the view, the column and the row."""
    with pytest.raises(InvalidWriteError) as info:
        normalize(spec, PARAMS, table)
    message = str(info.value)
    assert f"view {spec.name!r}" in message
    assert repr(column) in message
    if row is not None:
        assert f"row {row}" in message
    return message


def _with(spec: ViewSpec, column: str, array: pa.Array) -> pa.Table:
    """A valid table of ``spec`` with ``column`` replaced by ``array``."""
    table = _table(_data(spec), spec)
    if column in table.column_names:
        return table.set_column(table.schema.get_field_index(column), column, array)
    return table.append_column(column, array)


def _vectors(rows: list[list[float]]) -> pa.Array:
    return pa.array(rows, pa.list_(pa.float32()))


def _good_vectors() -> list[list[float]]:
    return [[0.5] * D for _ in range(N)]


@pytest.mark.parametrize("column", ["user_id", "item_id", "z", "fm_version", EVENT_TS])
def test_normalize_rejects_a_missing_column_naming_it(column: str) -> None:
    table = _table(_data(PAIR), PAIR).drop_columns([column])
    message = _rejects(PAIR, table, column, None)
    assert "missing" in message


def test_normalize_rejects_a_vector_with_d_minus_one_values() -> None:
    rows = _good_vectors()
    rows[2] = [0.5] * (D - 1)
    message = _rejects(PAIR, _with(PAIR, "z", _vectors(rows)), "z", 2)
    assert f"expected {D} values, got {D - 1}" in message


def test_normalize_rejects_a_vector_with_too_many_values() -> None:
    rows = _good_vectors()
    rows[4] = [0.5] * (D + 1)
    _rejects(UAGG, _with(UAGG, "z_sum", _vectors(rows)), "z_sum", 4)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_normalize_rejects_nan_or_inf_in_a_vector(bad: float) -> None:
    rows = _good_vectors()
    rows[3][1] = bad
    message = _rejects(NBR, _with(NBR, "z_mean", _vectors(rows)), "z_mean", 3)
    assert "NaN or inf" in message


def test_normalize_rejects_a_null_value_inside_a_vector() -> None:
    rows: list[list[float | None]] = [list(r) for r in _good_vectors()]
    rows[1][0] = None
    _rejects(PAIR, _with(PAIR, "z", _vectors(rows)), "z", 1)


def test_normalize_rejects_a_float16_overflowing_value_in_a_float16_field() -> None:
    rows = _good_vectors()
    rows[1][2] = 1e6
    message = _rejects(PAIR, _with(PAIR, "z", _vectors(rows)), "z", 1)
    assert "float16" in message


def test_normalize_rejects_a_negative_id() -> None:
    message = _rejects(PAIR, _with(PAIR, "item_id", pa.array([1, 2, -3, 4, 5])), "item_id", 2)
    assert ">= 0" in message


def test_normalize_rejects_a_uint64_id_above_int64_max() -> None:
    ids = pa.array([1, 2**63, 3, 4, 5], pa.uint64())
    message = _rejects(PAIR, _with(PAIR, "user_id", ids), "user_id", 1)
    assert "int64" in message


def test_normalize_accepts_uint64_ids_within_int64() -> None:
    ids = pa.array([1, 2**63 - 1, 3, 4, 5], pa.uint64())
    out = normalize(PAIR, PARAMS, _with(PAIR, "user_id", ids))
    assert out["user_id"].to_pylist() == [1, 2**63 - 1, 3, 4, 5]


def test_normalize_rejects_a_null_id() -> None:
    ids = pa.array([1, None, 3, 4, 5], pa.int64())
    message = _rejects(PAIR, _with(PAIR, "user_id", ids), "user_id", 1)
    assert "null" in message


def test_normalize_rejects_a_null_id_in_a_nullable_pandas_column() -> None:
    data = _data(UAGG)
    frame = pd.DataFrame(
        {
            "user_id": pd.array([1, 2, None, 4, 5], dtype="Int64"),
            "z_sum": list(data["z_sum"]),
            "count": data["count"],
            "window_start": data["window_start"],
            "fm_version": data["fm_version"],
            EVENT_TS: pd.to_datetime(np.asarray(data[EVENT_TS]), unit="us", utc=True),
        }
    )
    _rejects(UAGG, frame, "user_id", 2)


def test_normalize_rejects_a_float_id_column() -> None:
    ids = pa.array([1.0, 2.0, 3.0, 4.0, 5.0])
    message = _rejects(PAIR, _with(PAIR, "item_id", ids), "item_id", None)
    assert "integers" in message


def test_normalize_rejects_a_non_string_fm_version() -> None:
    message = _rejects(
        PAIR, _with(PAIR, "fm_version", pa.array([1, 2, 3, 4, 5])), "fm_version", None
    )
    assert "strings" in message


def test_normalize_rejects_an_empty_fm_version() -> None:
    versions = pa.array(["fm-1", "fm-1", "", "fm-1", "fm-1"])
    message = _rejects(IAGG, _with(IAGG, "fm_version", versions), "fm_version", 2)
    assert "empty" in message


def test_normalize_rejects_a_null_event_ts() -> None:
    events = pa.array([T0_US, None, T0_US, T0_US, T0_US], TS_TYPE)
    _rejects(PAIR, _with(PAIR, EVENT_TS, events), EVENT_TS, 1)


@pytest.mark.parametrize("bad_us", [-1, -86_400 * US], ids=["1969-12-31T23:59:59", "1969-12-31"])
def test_normalize_rejects_an_event_ts_before_1970(bad_us: int) -> None:
    events = pa.array([T0_US, T0_US, T0_US, bad_us, T0_US], TS_TYPE)
    _rejects(PAIR, _with(PAIR, EVENT_TS, events), EVENT_TS, 3)


@pytest.mark.parametrize("bad_us", [MAX_EPOCH_S * US, 2**62], ids=["max-epoch", "far-future"])
def test_normalize_rejects_an_event_ts_at_or_beyond_max_epoch(bad_us: int) -> None:
    events = pa.array([T0_US, T0_US, T0_US, T0_US, bad_us], TS_TYPE)
    _rejects(NBR, _with(NBR, EVENT_TS, events), EVENT_TS, 4)


def test_normalize_rejects_an_event_ts_that_is_not_a_timestamp() -> None:
    _rejects(PAIR, _with(PAIR, EVENT_TS, pa.array([T0_US] * N)), EVENT_TS, None)


def test_normalize_rejects_a_computed_at_different_from_the_event_time() -> None:
    seconds = [t // US for t in _data(PAIR)[EVENT_TS]]
    seconds[2] += 1
    message = _rejects(PAIR, _with(PAIR, "computed_at", pa.array(seconds)), "computed_at", 2)
    assert "event time" in message


def test_normalize_rejects_a_computed_at_in_milliseconds() -> None:
    millis = [t // 1000 for t in _data(PAIR)[EVENT_TS]]
    _rejects(PAIR, _with(PAIR, "computed_at", pa.array(millis)), "computed_at", 0)


def test_normalize_rejects_nan_in_a_float32_field() -> None:
    sims = pa.array([0.5, 0.5, 0.5, float("nan"), 0.5], pa.float32())
    _rejects(NBR, _with(NBR, "similarity", sims), "similarity", 3)


def test_normalize_rejects_a_null_inside_a_list_field() -> None:
    ids = pa.array([[1], [2, None], [3], [4], [5]], pa.list_(pa.int64()))
    _rejects(UNN, _with(UNN, "nbr_ids", ids), "nbr_ids", None)


def test_normalize_rejects_something_that_is_not_a_table() -> None:
    with pytest.raises(InvalidWriteError, match=r"view 'pair'.*pyarrow Table or a pandas"):
        normalize(PAIR, PARAMS, [{"user_id": 1}])  # type: ignore[arg-type]


def test_normalize_rejects_an_event_ts_with_a_fraction_of_a_second() -> None:
    events = pa.array([T0_US, T0_US, T0_US + 500_000, T0_US, T0_US], TS_TYPE)
    _rejects(PAIR, _with(PAIR, EVENT_TS, events), EVENT_TS, 2)


def test_normalize_rejects_infinite_and_float32_overflowing_aggregate_vectors() -> None:
    for bad in (np.inf, 1e39):
        z = np.ones((N, D))
        z[1, 2] = bad
        vectors = pa.array(list(z), pa.list_(pa.float64()))
        _rejects(UAGG, _with(UAGG, "z_sum", vectors), "z_sum", 1)


def test_normalize_rejects_negative_counts_and_neighbour_ids_and_unpaired_lists() -> None:
    _rejects(UAGG, _with(UAGG, "count", pa.array([1, 2, -1, 4, 5])), "count", 2)
    _rejects(NBR, _with(NBR, "src_user", pa.array([1, -3, 1, 4, 5])), "src_user", 1)
    ids = pa.array([[1, 2, 3], [], [-4], [5, 2], [7, 8, 9, 10]])
    _rejects(UNN, _with(UNN, "nbr_ids", ids), "nbr_ids", None)
    sims = pa.array([[0.5, 0.25], [], [1.0], [0.75, -0.5], [0.1, 0.2, 0.3, 0.4]])
    _rejects(UNN, _with(UNN, "nbr_sims", sims), "nbr_sims", 0)


@pytest.mark.parametrize("now", [1_700_000_000, 1_700_000_000.25, 1_700_000_000.999999, 3600])
@pytest.mark.parametrize("ttl", [0, 1, 3600, 6 * 3600.5])
def test_fresh_of_one_time_selects_the_rows_of_the_general_rule(now: float, ttl: float) -> None:
    """The request path's one-comparison freshness agrees with the general rule (one time
    per row) on every edge: both ends inclusive, absent rows never fresh."""
    now_us = int(now * 1_000_000)
    edges = np.array([now_us, now_us + 1, now_us - 1, int((now - ttl) * 1_000_000)])
    near = np.concatenate([edges, edges - 1, edges + 1, [0, 1, -5, 2**62]])
    found = np.resize([True, True, False], len(near))
    rows = ViewRows(found, np.where(found, near, 0).astype(np.int64), {})
    general = rows.current(np.full(len(near), now)) & (
        rows.event_us >= np.full(len(near), now) * 1_000_000 - ttl * 1_000_000
    )
    np.testing.assert_array_equal(rows.fresh(now, ttl), general)
    np.testing.assert_array_equal(rows.fresh(np.full(len(near), now), ttl), general)
