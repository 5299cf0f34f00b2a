"""Request-log entries: what a read accepts (``_parse_entry``, ``_rows``, paging), what
``append_request`` refuses before it sends anything, and the argument checks of
``SolarisFeatures.log_request`` (which raise before anything is queued)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from solaris.config import SolarisConfig
from solaris.serving.client import SolarisFeatures, _check_scores
from solaris.serving.request_log import (
    _parse_entry,
    _rows,
    append_request,
    delete_entries,
    read_request_log,
)
from solaris.store.contract import MAX_EPOCH_S

RID = 2**62 + 5
USER = 42
TS = 1_700_000_000
ITEMS = np.array([1, 1682, 2**62], "<i8")
SCORES = np.array([0.25, -1.5, 3.0e-3], "<f4")


def _fields(**fields: Any) -> dict[bytes, Any]:
    """An entry as XRANGE returns it (a dict of bytes); ``None`` drops a field."""
    base: dict[str, Any] = {
        "rid": str(RID).encode(),
        "user": str(USER).encode(),
        "ts": str(TS).encode(),
        "items": ITEMS.tobytes(),
        "scores": SCORES.tobytes(),
    }
    base.update(fields)
    return {k.encode(): v for k, v in base.items() if v is not None}


class RefusingClient:
    """A Redis stand-in that fails the test if anything is sent."""

    def xadd(self, *args: Any, **kwargs: Any) -> bytes:
        raise AssertionError(f"xadd was called: {args} {kwargs}")


class FakeStream:
    """A Redis stand-in holding one stream: ``xadd`` (exact MAXLEN), ``xrange`` (with ``-``,
    ``+``, exclusive ``(`` starts and COUNT) and ``xdel``, as redis-py answers them."""

    def __init__(self) -> None:
        self.entries: list[tuple[bytes, dict[bytes, bytes]]] = []
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self._seq = 0

    def xadd(self, stream: str, fields: dict[str, Any], **kwargs: Any) -> bytes:
        self.calls.append(("xadd", (stream, fields), kwargs))
        self._seq += 1
        entry_id = f"1-{self._seq}".encode()
        raw = {
            k.encode(): v if isinstance(v, bytes) else str(v).encode() for k, v in fields.items()
        }
        self.entries.append((entry_id, raw))
        if kwargs.get("maxlen") is not None:
            self.entries = self.entries[-kwargs["maxlen"] :]
        return entry_id

    def xrange(self, stream: str, min: Any = "-", max: Any = "+", count: int | None = None):
        self.calls.append(("xrange", (stream, min, max), {"count": count}))
        assert max == "+"
        seq = lambda entry_id: int(entry_id.split(b"-")[1])  # noqa: E731
        out = self.entries
        if min != "-":
            bound = min if isinstance(min, bytes) else min.encode()
            assert bound.startswith(b"(")
            out = [e for e in out if seq(e[0]) > seq(bound[1:])]
        return out[:count] if count is not None else out

    def xdel(self, stream: str, *ids: bytes) -> int:
        self.calls.append(("xdel", (stream, *ids), {}))
        before = len(self.entries)
        self.entries = [e for e in self.entries if e[0] not in ids]
        return before - len(self.entries)


# --------------------------------------------------------------------------------------------
# _parse_entry and _rows
# --------------------------------------------------------------------------------------------


def test_parse_entry_reads_a_dict_and_a_flat_field_list() -> None:
    expected = (RID, USER, TS, ITEMS.tobytes(), SCORES.tobytes(), b"")
    assert _parse_entry(_fields()) == expected
    flat = [x for kv in _fields().items() for x in kv]
    assert _parse_entry(flat) == expected
    assert _parse_entry({k.decode(): v for k, v in _fields().items()}) == expected


def test_a_fake_entry_round_trips_through_append_and_the_parser() -> None:
    fake = FakeStream()
    entry_id = append_request(fake, "t:requests", 10, RID, USER, ITEMS, SCORES, TS)
    assert entry_id == b"1-1"
    (_, args, kwargs) = fake.calls[0]
    assert kwargs == {"maxlen": 10, "approximate": False}
    assert set(args[1]) == {"rid", "user", "ts", "items", "scores"}
    rows = _rows([_parse_entry(fake.entries[0][1])])
    expected = pd.DataFrame(
        {
            "request_id": np.full(3, RID, np.int64),
            "user_id": np.full(3, USER, np.int64),
            "item_id": ITEMS.astype(np.int64),
            "ts": np.full(3, TS, np.int64),
            "score": SCORES,
            "nearline": np.zeros(3, bool),
        }
    )
    pd.testing.assert_frame_equal(rows, expected)
    assert rows["score"].dtype == np.float32


def test_rows_of_nothing_is_an_empty_frame_with_the_columns_and_dtypes() -> None:
    rows = _rows([])
    assert list(rows.columns) == ["request_id", "user_id", "item_id", "ts", "score", "nearline"]
    assert rows.empty
    assert [str(t) for t in rows.dtypes] == ["int64"] * 4 + ["float32", "bool"]


@pytest.mark.parametrize("missing", ["rid", "user", "ts", "items", "scores"])
def test_parse_entry_names_a_missing_field(missing: str) -> None:
    with pytest.raises(ValueError, match=f"missing fields \\['{missing}'\\]"):
        _parse_entry(_fields(**{missing: None}))


@pytest.mark.parametrize("field", ["rid", "user", "ts"])
@pytest.mark.parametrize("value", [b"abc", b"4.2", b"", b"1e3"])
def test_parse_entry_rejects_ids_and_ts_that_are_not_decimal(field: str, value: bytes) -> None:
    with pytest.raises(ValueError, match=r"must be a decimal integer in \[0, "):
        _parse_entry(_fields(**{field: value}))


@pytest.mark.parametrize("field", ["rid", "user", "ts"])
@pytest.mark.parametrize("value", [b"+5", b"1_000", b" 7 ", b"\xd9\xa5", b"0x1f"])
def test_parse_entry_takes_only_plain_ascii_decimals(field: str, value: bytes) -> None:
    """The drill's cases: ``int()`` reads each of these as a number."""
    with pytest.raises(ValueError, match=r"must be a decimal integer in \[0, "):
        _parse_entry(_fields(**{field: value}))


def test_parse_entry_refuses_more_items_than_a_request_holds() -> None:
    many = np.arange(301, dtype="<i8")
    scores = np.zeros(301, "<f4")
    with pytest.raises(ValueError, match=r"301 items in one entry, more than .*\(300\)"):
        _parse_entry(_fields(items=many.tobytes(), scores=scores.tobytes()), 300)
    parsed = _parse_entry(_fields(items=many[:300].tobytes(), scores=scores[:300].tobytes()), 300)
    assert len(parsed[3]) == 300 * 8


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("ts", -1),
        ("ts", MAX_EPOCH_S),
        ("ts", 1_700_000_000_000),  # milliseconds
        ("user", -1),
        ("user", 2**63),
        ("rid", -1),
        ("rid", 2**63),
    ],
)
def test_parse_entry_rejects_ids_or_ts_out_of_range(field: str, value: int) -> None:
    with pytest.raises(ValueError, match=r"must be a decimal integer in \[0, |past the wall clock"):
        _parse_entry(_fields(**{field: str(value).encode()}))


@pytest.mark.parametrize("size", [0, 1, 7, 9])
def test_parse_entry_rejects_items_that_are_not_whole_int64s(size: int) -> None:
    with pytest.raises(ValueError, match=f"int64 bytes, got {size} bytes"):
        _parse_entry(_fields(items=b"\x01" * size))


@pytest.mark.parametrize("size", [0, 8, 11, 16])
def test_parse_entry_rejects_scores_that_do_not_match_the_items(size: int) -> None:
    with pytest.raises(ValueError, match="one float32 per item"):
        _parse_entry(_fields(scores=b"\x00" * size))


def test_parse_entry_rejects_a_negative_item_id() -> None:
    with pytest.raises(ValueError, match="negative item id"):
        _parse_entry(_fields(items=np.array([5, -1, 6], "<i8").tobytes()))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_parse_entry_rejects_a_score_that_is_not_finite(bad: float) -> None:
    with pytest.raises(ValueError, match="not finite"):
        _parse_entry(_fields(scores=np.array([0.0, bad, 1.0], "<f4").tobytes()))


@pytest.mark.parametrize("raw", [[b"rid", b"1", b"user"], None, 42], ids=repr)
def test_parse_entry_rejects_malformed_field_lists(raw: Any) -> None:
    with pytest.raises(ValueError, match=r"malformed fields|no fields"):
        _parse_entry(raw)


# --------------------------------------------------------------------------------------------
# append_request: validation before any command
# --------------------------------------------------------------------------------------------


def _append(client: Any = None, **kw: Any) -> bytes | None:
    args: dict[str, Any] = dict(
        request_id=RID, user_id=USER, item_ids=ITEMS, scores=SCORES, ts=TS, maxlen=100
    )
    args.update(kw)
    return append_request(client or RefusingClient(), "t:requests", **args)


@pytest.mark.parametrize("name", ["request_id", "user_id"])
@pytest.mark.parametrize("value", [-1, 2**63, 1.0, "7", True, None], ids=repr)
def test_append_request_rejects_bad_ids(name: str, value: Any) -> None:
    with pytest.raises(ValueError, match=name):
        _append(**{name: value})


@pytest.mark.parametrize(
    "ts", [-1, MAX_EPOCH_S, 1_700_000_000_000, 1.7e9, True, "1700000000"], ids=repr
)
def test_append_request_rejects_a_ts_that_is_not_integer_epoch_seconds(ts: Any) -> None:
    with pytest.raises(ValueError, match="ts"):
        _append(ts=ts)


@pytest.mark.parametrize(
    "items",
    [[1, -2], np.array([2**63], np.uint64), [0.5, 1.0, 2.0], ["a", "b", "c"]],
    ids=["negative", "above-int64", "floats", "strings"],
)
def test_append_request_rejects_item_ids_that_are_not_int64_ids(items: Any) -> None:
    with pytest.raises(ValueError, match=r"\[0, 2\*\*63\)"):
        _append(item_ids=items, scores=np.zeros(len(items), np.float32))


@pytest.mark.parametrize(
    ("items", "scores"),
    [([1, 2, 3], [0.1, 0.2]), ([1], [0.1, 0.2]), ([], [0.5]), ([[1, 2]], [[0.1, 0.2]])],
)
def test_append_request_rejects_mismatched_or_non_1d_items_and_scores(
    items: Any, scores: Any
) -> None:
    with pytest.raises(ValueError, match=r"scores|one-dimensional"):
        _append(item_ids=items, scores=scores)


@pytest.mark.parametrize(
    "scores",
    [[0.1, np.nan, 0.3], [np.inf, 0, 0], [0, 0, -np.inf], [0.0, 1e39, 0.0]],
    ids=["nan", "inf", "-inf", "beyond-float32"],
)
def test_append_request_rejects_scores_that_are_not_finite_float32(scores: Any) -> None:
    with pytest.raises(ValueError, match="finite"):
        _append(scores=scores)


@pytest.mark.parametrize("scores", [[True, False, True], ["a", "b", "c"], [None, 1.0, 2.0]])
def test_append_request_rejects_scores_that_are_not_numbers(scores: Any) -> None:
    with pytest.raises(ValueError, match="numbers"):
        _append(scores=scores)


@pytest.mark.parametrize("maxlen", [0, -1])
def test_append_request_rejects_a_maxlen_below_one(maxlen: int) -> None:
    with pytest.raises(ValueError, match="maxlen"):
        _append(maxlen=maxlen)


def test_append_request_of_no_items_sends_nothing() -> None:
    assert _append(item_ids=[], scores=[]) is None
    assert _append(item_ids=np.zeros(0, np.int64), scores=np.zeros(0, np.float32)) is None


def test_append_request_stores_integer_scores_as_float32() -> None:
    fake = FakeStream()
    _append(fake, item_ids=[3, 4], scores=[1, 2])
    assert np.frombuffer(fake.entries[0][1][b"scores"], "<f4").tolist() == [1.0, 2.0]


# --------------------------------------------------------------------------------------------
# read_request_log and delete_entries on a fake stream
# --------------------------------------------------------------------------------------------


def test_read_pages_through_a_long_stream_and_honours_count(monkeypatch) -> None:
    import solaris.serving.request_log as request_log

    monkeypatch.setattr(request_log, "_PAGE", 3)
    fake = FakeStream()
    for rid in range(10):
        append_request(fake, "s", 100, rid, 1, [rid], [float(rid)], 100 + rid)
    batch = read_request_log(fake, "s", before=10**9)
    assert batch.rows["request_id"].tolist() == list(range(10))
    assert batch.ids == [f"1-{i}".encode() for i in range(1, 11)]
    assert (batch.later, batch.skipped) == (0, [])
    xranges = [c for c in fake.calls if c[0] == "xrange"]
    assert [c[2]["count"] for c in xranges] == [3, 3, 3, 3]
    assert [c[1][1] for c in xranges] == ["-", b"(1-3", b"(1-6", b"(1-9"]

    limited = read_request_log(fake, "s", before=105, count=7)
    assert limited.rows["request_id"].tolist() == [0, 1, 2, 3, 4]
    assert limited.later == 2
    assert len(fake.entries) == 10  # a read deletes nothing


def test_read_skips_bad_entries_returns_their_ids_and_warns(caplog) -> None:
    fake = FakeStream()
    append_request(fake, "s", 100, 1, 1, [10], [0.5], 100)
    fake.xadd("s", {"rid": "2", "user": "x", "ts": "100", "items": b"", "scores": b""})
    append_request(fake, "s", 100, 3, 1, [30], [0.5], 500)
    with caplog.at_level("WARNING"):
        batch = read_request_log(fake, "s", before=200)
    assert batch.rows["request_id"].tolist() == [1]
    assert batch.ids == [b"1-1", b"1-2"]
    assert batch.later == 1
    assert batch.skipped == [
        (b"1-2", "user must be a decimal integer in [0, 9223372036854775808), got b'x'")
    ]
    assert "skipped 1 unreadable" in caplog.text


@pytest.mark.parametrize("before", [-1, MAX_EPOCH_S, 1_700_000_000_000, float("nan"), True])
def test_read_rejects_a_before_that_is_not_epoch_seconds(before: Any) -> None:
    with pytest.raises(ValueError, match="before"):
        read_request_log(FakeStream(), "s", before=before)


@pytest.mark.parametrize("count", [0, -1, 1.5, True])
def test_read_rejects_a_count_below_one(count: Any) -> None:
    with pytest.raises(ValueError, match="count"):
        read_request_log(FakeStream(), "s", before=1, count=count)


def test_delete_entries_deletes_in_chunks_of_1000() -> None:
    fake = FakeStream()
    for rid in range(2_500):
        append_request(fake, "s", 10_000, rid, 1, [rid], [0.0], 100)
    ids = [e[0] for e in fake.entries[:2_100]] + [b"9-9"]  # one already gone
    assert delete_entries(fake, "s", ids) == 2_100
    xdels = [c for c in fake.calls if c[0] == "xdel"]
    assert [len(c[1]) - 1 for c in xdels] == [1000, 1000, 101]
    assert len(fake.entries) == 400
    assert delete_entries(fake, "s", []) == 0


# --------------------------------------------------------------------------------------------
# SolarisFeatures.log_request: argument checks on the calling thread
# --------------------------------------------------------------------------------------------


def test_check_scores_returns_a_float32_copy() -> None:
    given = np.array([0.5, 1.5], np.float32)
    out = _check_scores(given, 2)
    assert out.dtype == np.float32
    assert out.tolist() == [0.5, 1.5]
    assert out is not given and not np.shares_memory(out, given)


@pytest.fixture
def features() -> SolarisFeatures:
    # Port 1: nothing is ever sent, every case below raises before queueing.
    client = SolarisFeatures(SolarisConfig(namespace="t_unit"), redis="127.0.0.1:1", fm_version="v")
    yield client
    client.close()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"request_id": -1}, "request_id"),
        ({"request_id": 2**63}, "request_id"),
        ({"request_id": 1.0}, "request_id"),
        ({"request_id": True}, "request_id"),
        ({"user_id": -1}, "user_id"),
        ({"user_id": "7"}, "user_id"),
        ({"item_ids": [1, -2]}, "item_ids"),
        ({"item_ids": [1, 2, 3], "scores": [0.1, 0.2]}, "3 scores for 2|2 scores for 3"),
        ({"scores": [0.1]}, "1 scores for 2"),
        ({"scores": [[0.1, 0.2]]}, "one-dimensional"),
        ({"scores": [0.1, float("nan")]}, "NaN or inf"),
        ({"scores": [0.1, float("inf")]}, "NaN or inf"),
        ({"scores": [True, False]}, "numbers"),
        ({"scores": "ab"}, "not a string"),
        ({"now": 1_700_000_000_000}, "milliseconds"),
        ({"now": -1}, "now"),
        ({"now": float("nan")}, "now"),
    ],
)
def test_log_request_rejects_bad_arguments_before_queueing(
    features: SolarisFeatures, kwargs: dict[str, Any], match: str
) -> None:
    args: dict[str, Any] = dict(request_id=1, user_id=2, item_ids=[1, 2], scores=[0.1, 0.2])
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        features.log_request(**args)
    assert not any(features._pending_writes.values())
    assert features.stats.requests_logged == features.stats.requests_dropped == 0


def test_log_request_of_no_items_queues_nothing(features: SolarisFeatures) -> None:
    features.log_request(1, 2, [], [], now=100)
    assert not any(features._pending_writes.values())
    assert "requests_logged" in features.stats.as_dict()
    assert "requests_dropped" in features.stats.as_dict()


def test_a_full_miss_backlog_never_crowds_out_the_request_log(features: SolarisFeatures) -> None:
    """Each stream's queued writes are bounded on their own: with the miss backlog full
    (Redis slow), a served request is still queued for the request log."""
    from concurrent.futures import Future

    from solaris.serving import client as client_module

    stuck = {Future() for _ in range(client_module._MAX_PENDING_WRITES)}  # never done
    features._pending_writes["misses_dropped"] = stuck
    features._log_misses(2, np.array([1, 2], np.int64), 100)
    assert features.stats.misses_dropped == 1
    features.log_request(1, 2, [1, 2], [0.5, 0.25], now=100)
    assert len(features._pending_writes["requests_dropped"]) == 1
    features._pending_writes["misses_dropped"] = set()  # let the fixture's close() finish
