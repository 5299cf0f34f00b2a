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


# -- reading: UniformReplies against hiredis ----------------------------------------------------


def _bulk_reply(value: bytes | None) -> bytes:
    return b"$-1\r\n" if value is None else b"$%d\r\n%s\r\n" % (len(value), value)


def _array_reply(values: list[bytes | None]) -> bytes:
    return b"*%d\r\n" % len(values) + b"".join(_bulk_reply(v) for v in values)


def _advance_in_chunks(stream: bytes, shapes: list, cuts: list[int]) -> object:
    """Feed ``stream`` to one parser cut at ``cuts``, as a socket would deliver it; the
    first answer that is not INCOMPLETE (or INCOMPLETE when the bytes run out)."""
    buf = np.frombuffer(stream + b"\0" * 7, np.uint8).copy()  # spare room, as a real buffer
    parser = resp.UniformReplies(shapes)
    for have in [*cuts, len(stream)]:
        answer = parser.advance(buf, have)
        if answer is not resp.INCOMPLETE:
            return answer
    return resp.INCOMPLETE


def _hiredis_all(stream: bytes, count: int) -> list:
    reader = hiredis.Reader()
    reader.feed(stream)
    return [reader.gets() for _ in range(count)]


def _as_python(reply: object) -> object:
    if isinstance(reply, np.ndarray):
        return [bytes(v) for v in reply.tolist()]
    return reply


def test_uniform_replies_parse_as_hiredis_does_at_every_cut() -> None:
    rng = np.random.default_rng(7)
    records = [bytes(rng.integers(0, 256, 87, dtype=np.uint8)) for _ in range(5)]
    records[2] = b"\r\n$87\r\n" * 12 + b"\r\n$"  # framing bytes inside a payload
    stream = _array_reply(records) + _bulk_reply(b"user row") + _array_reply(records[:2])
    shapes = [5, None, 2]
    expected = _hiredis_all(stream, 3)
    for cut in range(len(stream) + 1):
        answer = _advance_in_chunks(stream, shapes, [cut])
        assert [_as_python(r) for r in answer] == expected, cut


@pytest.mark.parametrize(
    "replies",
    [
        [[b"a" * 9, None, b"c" * 9]],  # a nil in an array
        [[b"a" * 9, b"b" * 10, b"c" * 9]],  # two lengths
        [[b"a" * 9, b"b" * 9, b"c" * 8]],  # the last one shorter
        [[b"a" * 9, b"b" * 9, None]],  # a nil last: the stream is shorter than uniform
        [[None, b"b" * 9]],  # a nil first
    ],
)
def test_replies_that_are_not_uniform_are_refused_before_any_wait(replies: list) -> None:
    """Every complete non-uniform stream, delivered in any two parts, is refused (None)
    once all of it has arrived, never answered INCOMPLETE: a reader would wait forever."""
    stream = b"".join(_array_reply(r) for r in replies)
    shapes = [len(r) for r in replies]
    for cut in range(len(stream) + 1):
        assert _advance_in_chunks(stream, shapes, [cut]) is None, cut


def test_an_error_reply_and_a_nil_get_are_told_apart() -> None:
    assert _advance_in_chunks(b"-WRONGTYPE Operation against a key\r\n", [None], []) is None
    assert _advance_in_chunks(b"$-1\r\n", [None], []) == [None]
    assert _advance_in_chunks(b"$-1\r\n*1\r\n$2\r\nab\r\n", [None, 1], [3])[0] is None


def test_bytes_beyond_the_replies_are_not_uniform() -> None:
    assert _advance_in_chunks(_array_reply([b"ab"]) + b"+OK\r\n", [1], []) is None


def _random_reply(rng: np.random.Generator) -> tuple[int | None, bytes, bool]:
    """(shape, bytes, uniform) of one random reply: an array (uniform or not) or a bulk
    string, a nil or an error."""
    kind = rng.integers(6)
    width = int(rng.choice([0, 1, 9, 10, 87, 171]))

    def payload(w: int) -> bytes:
        return bytes(rng.choice(np.frombuffer(b"$*\r\n-19a", np.uint8), w))

    if kind == 0:  # a bulk string, maybe a nil
        value = None if rng.random() < 0.3 else payload(width)
        return None, _bulk_reply(value), True
    if kind == 1:  # an error where a reply was due
        return int(rng.integers(1, 4)), b"-ERR wrong\r\n", False
    n = int(rng.integers(0, 6))
    values: list[bytes | None] = [payload(width) for _ in range(n)]
    uniform = width > 0 or n == 0  # an array of empty strings is not records
    if n and kind == 2:  # one nil
        values[int(rng.integers(n))] = None
        uniform = False
    elif n > 1 and kind == 3:  # one other length
        values[int(rng.integers(n))] = payload(width + int(rng.choice([-1, 1, 10])) if width else 1)
        uniform = False
    return n, _array_reply(values), uniform


@pytest.mark.parametrize("seed", range(40))
def test_random_reply_streams_are_parsed_as_hiredis_does_or_refused(seed: int) -> None:
    """Random streams of arrays, bulk strings, nils and errors, cut anywhere: a uniform
    stream gives hiredis's replies once complete; any other is refused (None) once it is all
    there; a cut that ends a uniform stream early is that stream's replies."""
    rng = np.random.default_rng(seed)
    parts = [_random_reply(rng) for _ in range(int(rng.integers(1, 4)))]
    shapes = [shape for shape, _, _ in parts]
    stream = b"".join(raw for _, raw, _ in parts)
    uniform = all(ok for _, _, ok in parts)
    extra = not uniform or rng.random() < 0.2
    cuts = sorted(int(c) for c in rng.integers(0, len(stream), 3))  # before the end
    if uniform and extra:  # bytes after the last reply, in the same delivery
        stream += b"+OK\r\n"
    answer = _advance_in_chunks(stream, shapes, cuts)
    if uniform and not extra:
        expected = _hiredis_all(stream, len(shapes))
        assert [_as_python(r) for r in answer] == expected
    else:
        assert answer is None
    for cut in range(len(stream)):  # a prefix is replies only where hiredis reads them
        prefix = _advance_in_chunks(stream[:cut], shapes, [])
        if isinstance(prefix, list):
            reader = hiredis.Reader()
            reader.feed(stream[:cut])
            assert [_as_python(r) for r in prefix] == [reader.gets() for _ in shapes], cut
            assert not reader.has_data(), cut
