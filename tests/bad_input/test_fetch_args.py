"""Bad arguments of a feature read: unknown feature references, too many items, wrong types,
negative ids, empty lists, users and items of different lengths, request times that are
not epoch seconds.

Through the serving client (:meth:`~solaris.serving.client.SolarisFeatures.fetch` and
:meth:`~solaris.serving.client.SolarisFeatures.log_request`) and Feast's
``get_online_features`` on the SOLARIS online store. Only bad arguments raise, and nothing
is written for them: not a miss-stream entry, not a request-log entry (every Redis key of
the project is compared before and after).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from solaris.errors import SolarisError
from solaris.manifest import CODES_MANIFEST, CodesError, FmVersionError, read_manifest
from solaris.serving.client import FetchArgumentError, SolarisFeatures
from solaris.store.contract import FEATURE_SERVICE
from solaris.store.online import FeatureRequestError

from .conftest import FM_VERSION, MAX_CANDIDATES, NOW, FeastWorld

pytestmark = pytest.mark.integration

INT64_MAX = 2**63 - 1


@pytest.fixture
def features(feast_world: FeastWorld) -> Iterator[SolarisFeatures]:
    """A serving client on the suite's store (no periodic metrics windows: they would write
    to Redis while a case compares its keys)."""
    client = SolarisFeatures(
        feast_world.cfg,
        redis=feast_world.cfg.store.redis,
        fm_version=FM_VERSION,
        store=feast_world.store,
        metrics_publish_s=None,
    )
    yield client
    client.close()


@pytest.fixture
def redis_unchanged(feast_world: FeastWorld, snapshot_redis) -> Callable[[], None]:
    """Snapshots the project's Redis keys (views, miss stream, request log) now; calling the
    result asserts that none changed."""
    keys = snapshot_redis(feast_world.client, feast_world.key_pattern)
    before = keys()

    def check() -> None:
        assert keys() == before, "a Redis key changed"

    return check


# --------------------------------------------------------------------------------------------
# SolarisFeatures.fetch and log_request
# --------------------------------------------------------------------------------------------

# (id, call on the client, what the message must match today, the index it should name)
CLIENT_CASES: list[tuple[str, Callable[[SolarisFeatures], object], str, int | None]] = [
    ("too-many-items", lambda f: f.fetch(1, list(range(MAX_CANDIDATES + 1)), now=NOW),
     rf"{MAX_CANDIDATES + 1} item_ids exceed store\.max_candidates \({MAX_CANDIDATES}\)", None),
    ("negative-item-id", lambda f: f.fetch(1, [10, -11], now=NOW), r"item_ids must be >= 0", 1),
    ("item-id-beyond-int64", lambda f: f.fetch(1, np.array([10, 2**63], np.uint64), now=NOW),
     r"item_ids hold integers outside int64", 1),
    ("item-ids-as-a-string", lambda f: f.fetch(1, "10,11", now=NOW),
     r"item_ids must be a sequence of integers, not a string", None),
    ("item-ids-as-floats", lambda f: f.fetch(1, [10.0, 11.5], now=NOW),
     r"item_ids must be whole numbers", 1),
    ("item-id-nan", lambda f: f.fetch(1, [10.0, float("nan")], now=NOW),
     r"item_ids contain NaN or inf", 1),
    ("item-ids-as-bools", lambda f: f.fetch(1, [True, False], now=NOW),
     r"item_ids must be integers, got dtype bool", None),
    ("item-ids-two-dimensional", lambda f: f.fetch(1, [[10], [11]], now=NOW),
     r"item_ids must be one-dimensional, got shape \(2, 1\)", None),
    ("negative-user-id", lambda f: f.fetch(-1, [10], now=NOW),
     r"user_id must be in \[0, 2\*\*63\), got -1", None),
    ("user-id-as-a-string", lambda f: f.fetch("1", [10], now=NOW),
     r"user_id must be an integer, got '1'", None),
    ("user-id-as-a-bool", lambda f: f.fetch(True, [10], now=NOW),
     r"user_id must be an integer, got True", None),
    ("users-as-a-list", lambda f: f.fetch([1, 2], [10, 11], now=NOW),
     r"user_id must be an integer, got \[1, 2\]", None),
    ("now-in-milliseconds", lambda f: f.fetch(1, [10], now=NOW * 1000),
     r"now must be epoch seconds in \[0, 1e\+10\) \(not milliseconds\)", None),
    ("now-nan", lambda f: f.fetch(1, [10], now=float("nan")), r"now must be epoch seconds", None),
    ("now-as-a-string", lambda f: f.fetch(1, [10], now="2023-11-14"),
     r"now must be epoch seconds, got '2023-11-14'", None),
    ("log-fewer-scores-than-items", lambda f: f.log_request(7, 1, [10, 11], [0.5], now=NOW),
     r"1 scores for 2 item_ids", None),
    ("log-score-nan", lambda f: f.log_request(7, 1, [10, 11], [0.5, float("nan")], now=NOW),
     r"scores contain NaN or inf", 1),
    ("log-negative-request-id", lambda f: f.log_request(-7, 1, [10], [0.5], now=NOW),
     r"request_id must be in \[0, 2\*\*63\), got -7", None),
    ("log-request-id-as-a-float", lambda f: f.log_request(7.5, 1, [10], [0.5], now=NOW),
     r"request_id must be an integer, got 7\.5", None),
    ("log-negative-item-id", lambda f: f.log_request(7, 1, [10, -1], [0.5, 0.4], now=NOW),
     r"item_ids must be >= 0", 1),
]  # fmt: skip


@pytest.mark.parametrize(
    ("call", "message"), [c[1:3] for c in CLIENT_CASES], ids=[c[0] for c in CLIENT_CASES]
)
def test_the_client_refuses_a_bad_argument_naming_it_and_writes_nothing(
    call: Callable[[SolarisFeatures], object],
    message: str,
    features: SolarisFeatures,
    redis_unchanged,
) -> None:
    with pytest.raises(ValueError, match=message):
        call(features)

    assert features.flush(timeout_s=5.0)  # nothing queued would land later either
    assert features.stats.requests == 0
    redis_unchanged()


HUGE_VERSION = "fm-" + "x" * 1_000_000  # a megabyte: every served row would repeat it

FM_VERSION_CASES = [
    pytest.param(HUGE_VERSION, r"^fm_version: 1,000,003 characters 'fm-xxx+\.\.\. is not an "
                 r"fm_version: at most 64 characters", id="a-megabyte"),
    pytest.param("fm 1\n", r"^fm_version: the value 'fm 1\\n' is not an fm_version", id="spaces"),
    pytest.param("", r"^fm_version: the value '' is not an fm_version", id="empty"),
    pytest.param(5, r"^fm_version: an fm_version is a string, got int 5", id="a-number"),
]  # fmt: skip


@pytest.mark.parametrize(("version", "message"), FM_VERSION_CASES)
def test_the_client_refuses_an_fm_version_that_is_not_a_short_token(
    version: object, message: str, feast_world: FeastWorld, redis_unchanged
) -> None:
    with pytest.raises(FmVersionError, match=message) as caught:
        SolarisFeatures(
            feast_world.cfg,
            redis=feast_world.cfg.store.redis,
            fm_version=version,  # type: ignore[arg-type]
            store=feast_world.store,
            metrics_publish_s=None,
        )
    assert isinstance(caught.value, SolarisError) and isinstance(caught.value, ValueError)
    assert len(str(caught.value)) < 300  # the message quotes a cut, never the megabyte
    redis_unchanged()


def test_a_codes_manifest_with_a_megabyte_fm_version_is_refused_naming_the_file(
    tmp_path: Path, snapshot_files
) -> None:
    manifest = {"fm_version": HUGE_VERSION, "fm": "fm-model-1", "z_dim": 8, "shared_dim": 16}
    (tmp_path / CODES_MANIFEST).write_text(json.dumps(manifest))
    files = snapshot_files(tmp_path)
    before = files()

    with pytest.raises(CodesError, match=rf"{tmp_path}/codes\.json is not a codes manifest: "
                       r"fm_version: 1,000,003 characters .* at most 64") as caught:  # fmt: skip
        read_manifest(tmp_path)
    assert len(str(caught.value)) < 400
    assert files() == before


@pytest.mark.parametrize(
    ("call", "index"), [(c[1], c[3]) for c in CLIENT_CASES], ids=[c[0] for c in CLIENT_CASES]
)
def test_the_clients_argument_errors_are_solaris_errors_naming_the_index(
    call: Callable[[SolarisFeatures], object], index: int | None, features: SolarisFeatures
) -> None:
    with pytest.raises(FetchArgumentError) as caught:
        call(features)
    assert isinstance(caught.value, SolarisError) and isinstance(caught.value, ValueError)
    if index is not None:
        assert f"index {index}" in str(caught.value)


def test_an_empty_candidate_list_is_answered_with_no_rows_and_writes_nothing(
    features: SolarisFeatures, redis_unchanged
) -> None:
    out = features.fetch(1, [], now=NOW)
    features.log_request(7, 1, [], [], now=NOW)
    assert features.flush(timeout_s=5.0)
    assert out.features.shape[0] == 0 and out.mask.shape[0] == 0
    redis_unchanged()


def test_a_good_fetch_with_a_miss_does_write_so_the_snapshot_would_catch_one(
    feast_world: FeastWorld, features: SolarisFeatures, snapshot_redis
) -> None:
    keys = snapshot_redis(feast_world.client, f"{feast_world.project}:misses")
    before = keys()
    out = features.fetch(1, [10, 999], now=NOW)  # item 10 was seeded; 999 is a miss
    assert features.flush(timeout_s=5.0)
    assert out.tier.tolist()[0] == "pair"
    assert keys() != before


# --------------------------------------------------------------------------------------------
# Feast's get_online_features on the SOLARIS online store
# --------------------------------------------------------------------------------------------


def _service_read(feast_world: FeastWorld, entity_rows: object) -> object:
    store = feast_world.store
    return store.get_online_features(
        features=store.get_feature_service(FEATURE_SERVICE),
        entity_rows=entity_rows,
        full_feature_names=True,
    )


def _refs_read(feast_world: FeastWorld, refs: list[str]) -> object:
    return feast_world.store.get_online_features(
        features=refs, entity_rows={"user_id": [1], "item_id": [10]}
    )


READ_CASES: list[tuple[str, Callable[[FeastWorld], object], str]] = [
    ("unknown-feature", lambda w: _refs_read(w, ["pair:z", "pair:zz"]),
     r"unknown feature reference in \['pair:z', 'pair:zz'\] \(project 'b_[0-9a-f]{8}'\): "
     r"Feature zz not found in projection pair"),
    ("unknown-view", lambda w: _refs_read(w, ["pairs:z"]),
     r"unknown feature reference in \['pairs:z'\].*pairs"),
    ("users-and-items-of-different-lengths",
     lambda w: _service_read(w, {"user_id": [1, 1, 1], "item_id": [10, 11]}),
     r"entity_rows columns differ in length: item_id has 2, user_id has 3"),
    ("item-ids-missing", lambda w: _service_read(w, {"user_id": [1, 1]}),
     r"entity_rows lacks the join keys \['item_id'\] \(given: \['user_id'\]\)"),
    ("empty-entity-rows", lambda w: _service_read(w, []), r"entity_rows is empty"),
    ("user-ids-as-strings", lambda w: _service_read(w, {"user_id": ["1"], "item_id": [10]}),
     r"entity column 'user_id' must hold integers, got <U1"),
    ("item-ids-as-floats", lambda w: _service_read(w, {"user_id": [1], "item_id": [10.5]}),
     r"entity column 'item_id' must hold integers, got float64"),
    ("user-ids-as-bools", lambda w: _service_read(w, {"user_id": [True], "item_id": [10]}),
     r"entity column 'user_id' must hold integers, got bool"),
    ("negative-item-id", lambda w: _service_read(w, {"user_id": [1, 1], "item_id": [10, -2]}),
     r"entity column 'item_id': ids must be >= 0, got -2 at row 1"),
    ("negative-user-id-as-int64",
     lambda w: _service_read(w, {"user_id": np.array([1, -1], np.int64), "item_id": [10, 11]}),
     r"entity column 'user_id': ids must be >= 0, got -1 at row 1"),
    ("item-id-beyond-int64",
     lambda w: _service_read(w, {"user_id": [1, 1], "item_id": np.array([10, 2**63], np.uint64)}),
     r"entity column 'item_id' holds ids outside int64 \(first at row 1\)"),
    ("item-ids-two-dimensional", lambda w: _service_read(w, {"user_id": [[1]], "item_id": [[10]]}),
     r"entity column 'user_id' must be one-dimensional, got shape \(1, 1\)"),
    ("request-time-nan",
     lambda w: _service_read(w, {"user_id": [1], "item_id": [10], "request_ts": float("nan")}),
     r"'request_ts' must be epoch seconds in \[0, 1e\+10\)"),
    ("request-time-in-milliseconds",
     lambda w: _service_read(w, {"user_id": [1, 1], "item_id": [10, 11],
                                 "request_ts": [NOW, NOW * 1000]}),
     r"'request_ts' must be epoch seconds in \[0, 1e\+10\) \(not milliseconds\), got "
     r"1700000000000\.0 at row 1"),
    ("one-request-time-for-two-rows",
     lambda w: _service_read(w, {"user_id": [1, 1, 1], "item_id": [10, 11, 12],
                                 "request_ts": [NOW, NOW]}),
     r"'request_ts' must be one time or one per entity row \(3\), got shape \(2,\)"),
    ("request-time-as-a-string",
     lambda w: _service_read(w, {"user_id": [1], "item_id": [10], "request_ts": ["yesterday"]}),
     r"'request_ts' must be epoch seconds \(numbers\), got \['yesterday'\]"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("read", "message"), [c[1:] for c in READ_CASES], ids=[c[0] for c in READ_CASES]
)
def test_get_online_features_refuses_a_bad_request_naming_what_and_where(
    read: Callable[[FeastWorld], object], message: str, feast_world: FeastWorld, redis_unchanged
) -> None:
    with pytest.raises(FeatureRequestError, match=message) as caught:
        read(feast_world)

    assert isinstance(caught.value, SolarisError) and isinstance(caught.value, ValueError)
    redis_unchanged()


def test_the_valid_read_of_these_cases_is_answered(feast_world: FeastWorld) -> None:
    response = _service_read(
        feast_world, {"user_id": [1, 1], "item_id": [10, 11], "request_ts": NOW}
    )
    assert response.to_dict()["pair__fm_version"] == [FM_VERSION, FM_VERSION]
