"""Miss-stream entries: what a drain accepts (``_parse_entry``) and what ``append_misses``
refuses before it sends anything."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from solaris.serving.misses import _parse_entry, append_misses
from solaris.serving.streams import FUTURE_SLACK_S
from solaris.store.contract import MAX_EPOCH_S

USER = 42
TS = 1_700_000_000
ITEMS = np.array([1, 1682, 2**62], "<i8")
BLOB = ITEMS.tobytes()


def _flat(**fields: Any) -> list[Any]:
    """An entry as EVAL returns it: ``[k1, v1, k2, v2, ...]`` (values as given)."""
    base: dict[str, Any] = {"user": str(USER).encode(), "ts": str(TS).encode(), "items": BLOB}
    base.update(fields)
    out: list[Any] = []
    for key, value in base.items():
        if value is not None:
            out += [key.encode(), value]
    return out


class RefusingClient:
    """A Redis stand-in that fails the test if anything is sent."""

    def xadd(self, *args: Any, **kwargs: Any) -> bytes:
        raise AssertionError(f"xadd was called: {args} {kwargs}")


class RecordingClient:
    """A Redis stand-in that records ``xadd`` calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def xadd(self, *args: Any, **kwargs: Any) -> bytes:
        self.calls.append((args, kwargs))
        return b"1-0"


# --------------------------------------------------------------------------------------------
# _parse_entry
# --------------------------------------------------------------------------------------------


def test_parse_entry_reads_a_flat_field_list() -> None:
    user, ts, blob = _parse_entry(_flat())
    assert (user, ts, blob) == (USER, TS, BLOB)
    np.testing.assert_array_equal(np.frombuffer(blob, "<i8"), ITEMS)


def test_parse_entry_reads_a_dict_with_bytes_or_str_keys() -> None:
    assert _parse_entry({b"user": b"42", b"ts": str(TS).encode(), b"items": BLOB}) == (
        USER,
        TS,
        BLOB,
    )
    assert _parse_entry({"user": "42", "ts": TS, "items": BLOB}) == (USER, TS, BLOB)


def test_parse_entry_ignores_extra_fields_and_field_order() -> None:
    raw = [b"items", BLOB, b"extra", b"x", b"ts", str(TS).encode(), b"user", b"42"]
    assert _parse_entry(raw) == (USER, TS, BLOB)


def test_parse_entry_accepts_the_bounds_of_the_ranges() -> None:
    soon = int(time.time()) + FUTURE_SLACK_S - 60  # a stamp may run a day ahead of the clock
    raw = _flat(user=str(2**63 - 1).encode(), ts=str(soon).encode())
    assert _parse_entry(raw)[:2] == (2**63 - 1, soon)
    assert _parse_entry(_flat(user=b"0", ts=b"0", items=bytes(8)))[:2] == (0, 0)


@pytest.mark.parametrize("user", [b"+5", b"1_000", b" 7 ", b"007", b"-0", "\u0667".encode()])
def test_parse_entry_takes_only_plain_ascii_decimals(user: bytes) -> None:
    """The drill's cases: ``int()`` reads each of these as a number."""
    with pytest.raises(ValueError, match=r"user must be a decimal integer in \[0, "):
        _parse_entry(_flat(user=user))


def test_parse_entry_refuses_a_stamp_far_past_the_clock_and_more_items_than_a_request() -> None:
    with pytest.raises(ValueError, match=r"ts 9100000000 is more than a day past the wall clock"):
        _parse_entry(_flat(ts=b"9100000000"))  # 2258: it would wait in the stream forever
    many = np.arange(301, dtype="<i8").tobytes()
    with pytest.raises(ValueError, match=r"301 items in one entry, more than .*\(300\)"):
        _parse_entry(_flat(items=many), 300)
    assert len(_parse_entry(_flat(items=many[:-8]), 300)[2]) == 300 * 8


@pytest.mark.parametrize("missing", ["user", "ts", "items"])
def test_parse_entry_names_a_missing_field(missing: str) -> None:
    with pytest.raises(ValueError, match=f"missing fields \\['{missing}'\\]"):
        _parse_entry(_flat(**{missing: None}))


def test_parse_entry_names_every_missing_field() -> None:
    with pytest.raises(ValueError, match=r"missing fields \['user', 'ts', 'items'\]"):
        _parse_entry([])


@pytest.mark.parametrize("user", [b"abc", b"4.2", b"0x2a", b"", b"1e3"])
def test_parse_entry_rejects_a_user_that_is_not_decimal(user: bytes) -> None:
    with pytest.raises(ValueError, match=r"must be a decimal integer in \[0, "):
        _parse_entry(_flat(user=user))


@pytest.mark.parametrize("ts", [b"soon", b"1.7e9", b""])
def test_parse_entry_rejects_a_ts_that_is_not_decimal(ts: bytes) -> None:
    with pytest.raises(ValueError, match=r"must be a decimal integer in \[0, "):
        _parse_entry(_flat(ts=ts))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("ts", -1),
        ("ts", MAX_EPOCH_S),
        ("ts", 1_700_000_000_000),  # milliseconds
        ("user", -1),
        ("user", 2**63),
    ],
)
def test_parse_entry_rejects_a_user_or_ts_out_of_range(field: str, value: int) -> None:
    with pytest.raises(ValueError, match=r"must be a decimal integer in \[0, |past the wall clock"):
        _parse_entry(_flat(**{field: str(value).encode()}))


@pytest.mark.parametrize("size", [1, 7, 9, 23])
def test_parse_entry_rejects_items_that_are_not_whole_int64s(size: int) -> None:
    with pytest.raises(ValueError, match=f"int64 bytes, got {size} bytes"):
        _parse_entry(_flat(items=b"\x01" * size))


def test_parse_entry_rejects_empty_items() -> None:
    with pytest.raises(ValueError, match="got 0 bytes"):
        _parse_entry(_flat(items=b""))


def test_parse_entry_rejects_a_negative_item_id() -> None:
    blob = np.array([5, -1, 6], "<i8").tobytes()
    with pytest.raises(ValueError, match="negative item id"):
        _parse_entry(_flat(items=blob))


@pytest.mark.parametrize("raw", [[b"user", b"42", b"ts"], None, 42], ids=repr)
def test_parse_entry_rejects_malformed_field_lists(raw: Any) -> None:
    with pytest.raises(ValueError, match="malformed fields"):
        _parse_entry(raw)


# --------------------------------------------------------------------------------------------
# append_misses: validation before any command
# --------------------------------------------------------------------------------------------


def _append(
    client: Any, user: Any = USER, items: Any = ITEMS, ts: Any = TS, maxlen: int = 100
) -> bytes | None:
    return append_misses(client, "test:misses", maxlen, user, items, ts)


@pytest.mark.parametrize(
    "items",
    [[1, -2], np.array([-1], np.int64), np.array([2**63], np.uint64), [2**64]],
    ids=["negative", "negative-int64", "uint64-above-int64", "huge-python-int"],
)
def test_append_misses_rejects_item_ids_outside_int64_before_sending(items: Any) -> None:
    with pytest.raises(ValueError, match=r"\[0, 2\*\*63\)"):
        _append(RefusingClient(), items=items)


@pytest.mark.parametrize("items", [[1.0, 2.0], np.array([1.5]), ["1"], [True, False]], ids=repr)
def test_append_misses_rejects_item_ids_that_are_not_integers_before_sending(
    items: Any,
) -> None:
    with pytest.raises(ValueError, match="integers"):
        _append(RefusingClient(), items=items)


@pytest.mark.parametrize(
    ("user", "ts"),
    [(-1, TS), (2**63, TS), (USER, -1), (USER, 1_700_000_000_000), (USER, MAX_EPOCH_S)],
    ids=["negative-user", "huge-user", "negative-ts", "ts-in-ms", "ts-at-max"],
)
def test_append_misses_rejects_a_user_or_ts_out_of_range_before_sending(user: int, ts: int) -> None:
    with pytest.raises(ValueError, match="out of range"):
        _append(RefusingClient(), user=user, ts=ts)


def test_append_misses_rejects_a_ts_in_float_milliseconds_before_sending() -> None:
    with pytest.raises(ValueError, match="ts"):
        _append(RefusingClient(), ts=1.7e12)


@pytest.mark.parametrize("maxlen", [0, -1])
def test_append_misses_rejects_a_non_positive_maxlen_before_sending(maxlen: int) -> None:
    with pytest.raises(ValueError, match="maxlen"):
        _append(RefusingClient(), maxlen=maxlen)


def test_append_misses_rejects_a_fractional_user_before_sending() -> None:
    with pytest.raises(ValueError):
        _append(RefusingClient(), user=1.5)


def test_append_misses_sends_nothing_for_no_items() -> None:
    assert _append(RefusingClient(), items=[]) is None


def test_append_misses_sends_one_exact_maxlen_entry_that_parses_back() -> None:
    client = RecordingClient()
    assert _append(client, maxlen=7) == b"1-0"
    ((args, kwargs),) = client.calls
    stream, fields = args
    assert stream == "test:misses"
    assert kwargs == {"maxlen": 7, "approximate": False}
    flat = [v for k, value in fields.items() for v in (k.encode(), value)]
    assert _parse_entry(flat) == (USER, TS, BLOB)
