"""solaris.store.resp packs exactly the bytes hiredis packs for the same commands."""

from __future__ import annotations

import hiredis
import numpy as np
import pytest

from solaris.store import resp
from solaris.store.keys import member_fields


def _void(rows: list[bytes]) -> np.ndarray:
    width = len(rows[0])
    return np.frombuffer(b"".join(rows), dtype=f"V{width}")


@pytest.mark.parametrize("ids", [[1], [0, 1682, 2**63 - 1], list(range(300))])
def test_an_hmget_of_member_fields_is_packed_as_hiredis_packs_it(ids: list[int]) -> None:
    fields = member_fields(np.array(ids, np.int64))
    expected = hiredis.pack_command(("HMGET", "p:pair:{u:42}", *fields.tolist()))
    assert resp.bulk(b"HMGET", ["p:pair:{u:42}"], fields) == expected


def test_hset_pairs_are_interleaved_fields_and_records() -> None:
    fields = member_fields(np.array([3, 1, 2], np.int64))
    records = _void([b"a" * 87, b"\x00" * 87, b"\r\n" * 43 + b"z"])
    body = resp.pairs(fields, records).tobytes()
    args = [v for pair in zip(fields.tolist(), records.tolist(), strict=True) for v in pair]
    expected = hiredis.pack_command(("HSET", "k", *args))
    assert resp.command(b"HSET", ["k"], body, 6) == expected


def test_a_slice_of_pairs_is_a_valid_command_of_its_own() -> None:
    fields = member_fields(np.arange(10, dtype=np.int64))
    records = _void([bytes([k]) * 5 for k in range(10)])
    framed = resp.pairs(fields, records)
    args = [v for k in range(4, 7) for v in (fields.tolist()[k], records.tolist()[k])]
    expected = hiredis.pack_command(("HSET", "k", *args))
    assert resp.command(b"HSET", ["k"], framed[4:7].tobytes(), 6) == expected


def test_head_arguments_of_every_type_are_packed_by_hiredis() -> None:
    packed = resp.command(b"EVALSHA", ["abc", 1, "key", 86_400_000], b"", 0)
    assert packed == hiredis.pack_command(("EVALSHA", "abc", 1, "key", 86_400_000))
