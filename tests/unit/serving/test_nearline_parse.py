"""Embed-stream entries as the near-line embedder reads them (solaris.serving.nearline)."""

from __future__ import annotations

import numpy as np
import pytest

from solaris.serving.nearline import parse_entry, pending_key


def _fields(**changes) -> dict[bytes, bytes]:
    fields = {b"user": b"42", b"ts": b"1700000000", b"items": np.int64([3, 9]).tobytes()}
    for name, value in changes.items():
        if value is None:
            fields.pop(name.encode())
        else:
            fields[name.encode()] = value
    return fields


def test_a_good_entry_gives_its_user_time_and_items() -> None:
    entry = parse_entry(_fields())
    assert (entry.user, entry.ts, entry.items.tolist()) == (42, 1_700_000_000, [3, 9])
    flat = [x for kv in _fields().items() for x in kv]
    assert parse_entry(flat).items.tolist() == [3, 9]


@pytest.mark.parametrize(
    ("changes", "says"),
    [
        ({"items": None}, r"missing fields \['items'\]"),
        ({"user": b"-1"}, "user must be a decimal integer"),
        ({"user": b"+5"}, "user must be a decimal integer"),
        ({"user": b"1_000"}, "user must be a decimal integer"),
        ({"user": b" 7 "}, "user must be a decimal integer"),
        ({"user": "\u0667".encode()}, "user must be a decimal integer"),  # an Arabic-Indic 7
        ({"ts": b"+1700000000"}, "ts must be a decimal integer"),
        ({"ts": b"99999999999"}, "ts must be a decimal integer"),
        ({"ts": b"9000000000"}, "more than a day past the wall clock"),
        ({"items": b"12345"}, "items must be int64 bytes"),
        ({"items": b""}, "items must be int64 bytes"),
        ({"items": np.int64([1, -2]).tobytes()}, "negative item id"),
    ],
)
def test_a_malformed_entry_is_refused_naming_what_is_wrong(changes, says) -> None:
    with pytest.raises(ValueError, match=says):
        parse_entry(_fields(**changes))


def test_an_entry_with_more_items_than_a_request_may_hold_is_refused() -> None:
    with pytest.raises(ValueError, match=r"more than store\.max_candidates"):
        parse_entry(_fields(items=np.arange(5, dtype=np.int64).tobytes()), max_items=4)


def test_pending_marks_live_in_the_users_slot() -> None:
    assert pending_key("live", 17) == "live:nlpend:{u:17}"
