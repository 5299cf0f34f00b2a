"""Redis key names: formats, one hash slot per user (Redis Cluster hash tags), patterns."""

from __future__ import annotations

import fnmatch

import numpy as np
import pytest
from redis.crc import key_slot

from solaris.store import keys
from solaris.store.contract import IAGG, NBR, PAIR, UAGG, UNN, VIEWS, ViewSpec

PROJECT = "solaris_test"
PARTITIONED = [spec for spec in VIEWS.values() if spec.partition is not None]


def _crc16_xmodem(data: bytes) -> int:
    """CRC-16/XMODEM (poly 0x1021, init 0), the checksum of Redis Cluster key slots."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def _slot(key: str) -> int:
    """The Redis Cluster slot of ``key`` as the cluster spec defines it (hash tags included)."""
    raw = key.encode()
    start = raw.find(b"{")
    if start != -1:
        end = raw.find(b"}", start + 1)
        if end > start + 1:
            raw = raw[start + 1 : end]
    return _crc16_xmodem(raw) % 16384


def _key(spec: ViewSpec, partition_id: int, project: str = PROJECT) -> str:
    return keys.partition_key(keys.view_key(project, spec), spec, partition_id)


def test_crc16_helper_matches_the_reference_check_value_and_redis_py() -> None:
    assert _crc16_xmodem(b"123456789") == 0x31C3
    for key in ("foo", "{user1000}.following", "solaris:pair:{u:42}", "", "{}x"):
        assert _slot(key) == key_slot(key.encode())


def test_partitioned_view_keys_are_project_view_and_hash_tagged_user() -> None:
    assert _key(PAIR, 42, "solaris") == "solaris:pair:{u:42}"
    assert _key(NBR, 42, "solaris") == "solaris:nbr:{u:42}"
    assert _key(UAGG, 42, "solaris") == "solaris:uagg:{u:42}"
    assert _key(UNN, 7, "solaris") == "solaris:unn:{u:7}"


def test_partition_ids_are_written_in_decimal() -> None:
    assert _key(PAIR, 0) == f"{PROJECT}:pair:{{u:0}}"
    assert _key(PAIR, 2**63 - 1) == f"{PROJECT}:pair:{{u:9223372036854775807}}"


def test_the_item_aggregate_is_one_key_per_project() -> None:
    assert keys.view_key("solaris", IAGG) == "solaris:iagg"
    assert keys.view_key(PROJECT, IAGG) == f"{PROJECT}:iagg"


def test_view_key_is_the_prefix_of_every_partition_key() -> None:
    for spec in PARTITIONED:
        assert _key(spec, 5).startswith(keys.view_key(PROJECT, spec) + ":")


@pytest.mark.parametrize("user", [0, 1, 42, 943, 123_456_789, 2**63 - 1])
def test_every_key_of_one_user_lives_in_the_slot_of_its_hash_tag(user: int) -> None:
    slots = {_slot(_key(spec, user)) for spec in PARTITIONED}
    assert slots == {_slot(f"u:{user}")}
    assert {key_slot(_key(spec, user).encode()) for spec in PARTITIONED} == slots


def test_the_slot_does_not_depend_on_the_project() -> None:
    assert _slot(_key(PAIR, 42, "a")) == _slot(_key(UAGG, 42, "another_project"))


def test_different_users_spread_over_many_slots() -> None:
    slots = {_slot(_key(PAIR, user)) for user in range(1, 201)}
    assert len(slots) > 150


def test_keys_of_one_user_contain_exactly_one_hash_tag() -> None:
    for spec in PARTITIONED:
        key = _key(spec, 42)
        assert key.count("{") == key.count("}") == 1


def test_view_patterns_match_every_key_of_the_view_and_no_other_view() -> None:
    for spec in PARTITIONED:
        (pattern,) = keys.view_patterns(PROJECT, spec)
        assert pattern == f"{PROJECT}:{spec.name}:*"
        assert fnmatch.fnmatchcase(_key(spec, 42), pattern)
        for other in VIEWS.values():
            if other is not spec:
                other_key = _key(other, 42) if other.partition else keys.view_key(PROJECT, other)
                assert not fnmatch.fnmatchcase(other_key, pattern)


def test_the_iagg_pattern_is_its_one_key() -> None:
    assert keys.view_patterns(PROJECT, IAGG) == (f"{PROJECT}:iagg",)


def test_project_pattern_matches_every_key_of_the_project_only() -> None:
    pattern = keys.project_pattern(PROJECT)
    assert pattern == f"{PROJECT}:*"
    assert fnmatch.fnmatchcase(_key(PAIR, 1), pattern)
    assert fnmatch.fnmatchcase(keys.view_key(PROJECT, IAGG), pattern)
    assert not fnmatch.fnmatchcase(_key(PAIR, 1, "other"), pattern)


def test_server_settings_size_small_hashes_for_records_up_to_256_bytes() -> None:
    assert keys.SERVER_SETTINGS == {
        "hash-max-ziplist-value": "256",
        "hash-max-ziplist-entries": "512",
    }


@pytest.mark.parametrize("member", [0, 1, 1682, 2**63 - 1])
def test_member_fields_are_eight_little_endian_bytes(member: int) -> None:
    expected = member.to_bytes(8, "little", signed=True)
    assert keys.member_field(member) == expected
    assert keys.member_fields(np.array([member, 7], np.int64)).tolist()[0] == expected
