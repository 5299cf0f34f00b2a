"""The candidates DAG's pure steps: misses as pseudo-requests, the ledger cache."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from solaris.namespace import Namespace
from solaris.orchestration.candidates import (
    PSEUDO_REQUEST_BASE,
    _without_nearline,
    code_age,
    ledger_cache,
    with_misses,
)
from solaris.orchestration.layout import CycleLayout, Interval
from solaris.orchestration.resources import write_parquet


def test_misses_become_unlabelled_unscored_pseudo_requests_unless_the_log_has_them() -> None:
    requests = pd.DataFrame(
        {
            "request_id": [1, 1],
            "user_id": [7, 7],
            "item_id": [10, 11],
            "ts": [500, 500],
            "label": pd.array([pd.NA, pd.NA], "Int8"),
            "score": np.array([0.5, 0.25], np.float32),
        }
    )
    misses = pd.DataFrame({"user_id": [7, 7, 8], "item_id": [10, 12, 12], "ts": [500, 500, 520]})
    got = with_misses(requests, misses)
    added = got[got["request_id"] >= PSEUDO_REQUEST_BASE]
    assert sorted(zip(added["user_id"], added["item_id"], strict=True)) == [(7, 12), (8, 12)]
    assert added["label"].isna().all() and added["score"].isna().all()
    assert added["request_id"].nunique() == 2  # one pseudo-request per (user, ts)
    assert got["ts"].is_monotonic_increasing
    assert list(got.columns) == list(requests.columns)


def test_ledger_cache_keeps_a_pair_that_expires_exactly_when_the_interval_starts(
    tmp_path,
) -> None:
    layout = CycleLayout(Namespace("t", tmp_path, tmp_path))
    hour, ttl = 3_600, 6 * 3_600
    for start, item in ((-3_600, 1), (0, 2), (3_600, 3)):  # ends at 0 h, 1 h, 2 h
        end = start + hour
        write_parquet(
            pd.DataFrame({"user_id": [7], "item_id": [item], "expires_at": [end + ttl]}),
            layout.selections(Interval(start, end)),
        )
    # Interval [7 h, 8 h): the code of [0 h, 1 h) expires at 7 h, inclusive: still cached.
    cache = ledger_cache(layout, Interval(7 * hour, 8 * hour), ttl)
    assert sorted(cache["item_id"]) == [2, 3]


def test_the_ledger_cache_holds_the_pairs_serving_selected_near_line(tmp_path) -> None:
    layout = CycleLayout(Namespace("t", tmp_path, tmp_path))
    hour, ttl = 3_600, 6 * 3_600
    write_parquet(
        pd.DataFrame({"user_id": [7], "item_id": [1], "expires_at": [hour + ttl]}),
        layout.selections(Interval(0, hour)),
    )
    write_parquet(
        pd.DataFrame({"user_id": [7], "item_id": [2], "expires_at": [hour // 2 + ttl]}),
        layout.nearline(Interval(0, hour)),
    )
    cache = ledger_cache(layout, Interval(hour, 2 * hour), ttl)
    assert sorted(cache["item_id"]) == [1, 2]


def _interval_rows(nearline: list[bool]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "request_id": [1, 1, 1, 2, 2, 3],
            "user_id": [7, 7, 7, 8, 8, 7],
            "item_id": [10, 11, 12, 10, 13, 11],
            "ts": [100, 100, 100, 110, 110, 120],
            "label": pd.array([pd.NA] * 6, "Int8"),
            "score": np.ones(6, np.float32),
            "nearline": nearline,
        }
    )


def test_requests_that_selected_near_line_spend_no_cycle_budget_and_their_pairs_are_skipped():
    batch, nearline = _without_nearline(
        _interval_rows([False, True, False, False, False, False]), ttl_s=3_600
    )
    assert batch["request_id"].tolist() == [2, 2, 3]  # request 1's budget went near-line
    assert "nearline" not in batch
    assert nearline.to_dict("records") == [
        {
            "request_id": 1,
            "user_id": 7,
            "item_id": 11,
            "ts": 100,
            "computed_at": 100,
            "expires_at": 3_700,
        }
    ]


def test_a_retried_selection_keeps_what_the_first_attempt_recorded_near_line() -> None:
    _, first = _without_nearline(
        _interval_rows([False, True, False, False, False, False]), ttl_s=3_600
    )
    # The retry re-reads the drained rows from the request-log file: their marks are gone.
    batch, again = _without_nearline(_interval_rows([False] * 6), ttl_s=3_600, earlier=first)
    assert batch["request_id"].tolist() == [2, 2, 3]
    pd.testing.assert_frame_equal(again, first)


def test_a_candidates_run_waits_for_the_previous_intervals_embeddings_and_enrichment(
    tmp_path, monkeypatch
) -> None:
    from solaris.orchestration.candidates import previous_published
    from solaris.orchestration.layout import write_run_record

    monkeypatch.setenv("SOLARIS_ARTIFACTS_DIR", str(tmp_path))
    layout = CycleLayout(Namespace("replay_x", tmp_path, tmp_path))
    conf = {"namespace": "replay_x", "interval_start": 900, "interval_end": 1_800}
    assert previous_published(conf, None, None)  # the first interval waits for nothing
    write_parquet(pd.DataFrame({"user_id": [1]}), layout.selections(Interval(0, 900)))
    assert previous_published(conf, None, None)  # a run that failed part-way is not waited for
    write_run_record(layout, "solaris_candidates", Interval(0, 900).key, {})
    assert not previous_published(conf, None, None)
    layout.embeddings_done(Interval(0, 900)).parent.mkdir(parents=True)
    layout.embeddings_done(Interval(0, 900)).touch()
    assert not previous_published(conf, None, None)  # its enrichment has not run yet
    for view in ("uagg", "iagg"):
        write_run_record(layout, "solaris_enrichment", f"{900:011d}-{view}", {})
    assert not previous_published(conf, None, None)  # every view of it
    write_run_record(layout, "solaris_enrichment", f"{900:011d}-nbr", {})
    assert previous_published(conf, None, None)


def test_the_sensors_poke_selects_nothing_while_the_previous_interval_is_unpublished(
    tmp_path, monkeypatch
) -> None:

    from solaris.orchestration import candidates
    from solaris.orchestration.layout import write_run_record

    monkeypatch.setenv("SOLARIS_ARTIFACTS_DIR", str(tmp_path))
    layout = CycleLayout(Namespace("replay_x", tmp_path, tmp_path))
    write_run_record(layout, "solaris_candidates", Interval(0, 900).key, {})
    planned = []
    monkeypatch.setattr(candidates, "prepare", lambda *args: planned.append(args) or (["unit"], []))
    conf = {"namespace": "replay_x", "interval_start": 900, "interval_end": 1_800}

    assert not candidates.select_when_published(conf, None, None)
    assert planned == []

    layout.embeddings_done(Interval(0, 900)).parent.mkdir(parents=True)
    layout.embeddings_done(Interval(0, 900)).touch()
    for view in ("uagg", "iagg", "nbr"):
        write_run_record(layout, "solaris_enrichment", f"{900:011d}-{view}", {})
    done = candidates.select_when_published(conf, None, None)
    assert len(planned) == 1 and done.is_done and done.xcom_value == ["unit"]


def test_a_replay_also_waits_for_the_clustering_due_between_two_intervals(
    tmp_path, monkeypatch
) -> None:
    from solaris.orchestration.candidates import previous_published
    from solaris.orchestration.clustering import enrichment_published
    from solaris.orchestration.layout import write_run_record

    monkeypatch.setenv("SOLARIS_ARTIFACTS_DIR", str(tmp_path))
    layout = CycleLayout(Namespace("replay_x", tmp_path, tmp_path))
    midnight = 891_302_400
    before, after = Interval(midnight - 3_600, midnight), Interval(midnight, midnight + 3_600)
    write_run_record(layout, "solaris_candidates", before.key, {})
    layout.embeddings_done(before).parent.mkdir(parents=True)
    layout.embeddings_done(before).touch()
    for view in ("uagg", "iagg", "nbr"):
        write_run_record(layout, "solaris_enrichment", f"{midnight:011d}-{view}", {})
    replay = {"namespace": "replay_x", "replay": True, **after.as_dict()}
    live = {"namespace": "replay_x", "replay": False, **after.as_dict()}
    assert previous_published(live, None, None)  # live runs do not wait for clustering
    assert not previous_published(replay, None, None)
    cluster = {"namespace": "replay_x", "replay": True, **before.as_dict()}
    assert enrichment_published(cluster, None, None)  # clustering may run now ...
    write_run_record(layout, "solaris_clustering", f"{midnight:011d}-unn", {})
    assert previous_published(replay, None, None)  # ... and the next interval after it


def test_code_age_counts_only_codes_that_could_still_serve_the_interval(tmp_path) -> None:
    layout = CycleLayout(Namespace("t", tmp_path, tmp_path))
    ttl_s, step = 6 * 3600, 900
    live = Interval(1_800_000_000, 1_800_000_000 + step)
    assert code_age(layout, live, ttl_s) is None  # before the first codes
    old = Interval(891_000_000, 891_000_000 + step)  # a 1998 window run in this namespace
    layout.embeddings_done(old).parent.mkdir(parents=True)
    layout.embeddings_done(old).touch()
    assert code_age(layout, live, ttl_s) is None  # not 30 years "old": expired, not served
    previous = Interval(live.start - step, live.start)
    layout.embeddings_done(previous).parent.mkdir(parents=True)
    layout.embeddings_done(previous).touch()
    assert code_age(layout, live, ttl_s) == step


def test_a_replay_run_days_after_its_previous_interval_fails_fast_naming_what_it_waits_for(
    tmp_path, monkeypatch
) -> None:
    """The scheduler's run of a current interval in a replay namespace would wait in its
    sensor for a clustering run per day since the replayed window, which nothing schedules:
    it fails at once and says so. A run the next day still waits for its one clustering
    run, and goes once it is recorded."""
    from solaris.orchestration.candidates import previous_published
    from solaris.orchestration.layout import write_run_record
    from solaris.orchestration.resources import CycleInputError

    monkeypatch.setenv("SOLARIS_ARTIFACTS_DIR", str(tmp_path))
    monkeypatch.setenv("SOLARIS_REPLAY", "true")
    layout = CycleLayout(Namespace("replay_x", tmp_path, tmp_path))
    day = 86_400
    previous = Interval(10 * day - 900, 10 * day)
    write_run_record(layout, "solaris_candidates", previous.key, {})
    layout.embeddings_done(previous).parent.mkdir(parents=True)
    layout.embeddings_done(previous).touch()
    for view in ("uagg", "iagg", "nbr"):
        write_run_record(layout, "solaris_enrichment", f"{previous.end:011d}-{view}", {})

    later = {"namespace": "replay_x", "interval_start": 40 * day, "interval_end": 40 * day + 900}
    with pytest.raises(CycleInputError, match=r"30\.0 days after .* 31 clustering runs"):
        previous_published(later, None, None)

    next_day = {"namespace": "replay_x", "interval_start": 11 * day, "interval_end": 11 * day + 900}
    assert not previous_published(next_day, None, None)  # its clustering, not yet run
    for t in (10 * day, 11 * day):  # the daily runs due in (previous interval, its start]
        write_run_record(layout, "solaris_clustering", f"{t:011d}-unn", {})
    assert previous_published(next_day, None, None)
