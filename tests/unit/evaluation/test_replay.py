"""Offline replay: scheduling intervals, TTL cache, coverage of labelled impressions."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from solaris.evaluation.replay import (
    ReplayResult,
    interval_end,
    oracle_scores,
    random_scores,
    replay,
)

NA = pd.NA
SELECTION_COLUMNS = ["user_id", "item_id", "request_ts", "computed_at", "expires_at"]


def _log(rows: list[tuple]) -> pd.DataFrame:
    """``(request_id, user_id, item_id, ts, label)`` rows; ``label`` is ``pd.NA`` or 0/1."""
    frame = pd.DataFrame(rows, columns=["request_id", "user_id", "item_id", "ts", "label"])
    frame = frame.astype(
        {"request_id": "int64", "user_id": "int64", "item_id": "int64", "ts": "int64"}
    )
    frame["label"] = frame["label"].astype("Int8")
    return frame


def _selections(rows: list[tuple[int, int, int, int, int]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=SELECTION_COLUMNS).astype("int64")


def _assert_selections(actual: pd.DataFrame, expected: pd.DataFrame) -> None:
    assert list(actual.columns) == [*SELECTION_COLUMNS, "refresh"]
    pd.testing.assert_frame_equal(
        actual[SELECTION_COLUMNS].reset_index(drop=True).astype("int64"),
        expected.reset_index(drop=True),
    )


# --------------------------------------------------------------------------- hand-built log

# cadence 600 s, ttl 3600 s, share 1.0. Items 10 (X) and 11 (Y).
#   r1 u1 t=0     X, Y unlabelled  -> interval 0 selects X, Y: usable [600, 4200]
#   r2 u1 t=100   X labelled       -> same interval: miss; X pending, not re-selected
#   r3 u1 t=700   X, Y labelled    -> interval 1: both hit, nothing selected
#   r4 u2 t=700   X labelled       -> user 2's pair is independent: miss; selected [1200, 4800)
#   r5 u1 t=5000  X labelled       -> u1's X expired at 4200: miss; selected [5400, 9000)
HAND_LOG = [
    (1, 1, 10, 0, NA),
    (1, 1, 11, 0, NA),
    (2, 1, 10, 100, 1),
    (3, 1, 10, 700, 0),
    (3, 1, 11, 700, 1),
    (4, 2, 10, 700, 1),
    (5, 1, 10, 5000, 1),
]
HAND_KW = {"share": 1.0, "ttl_seconds": 3600, "cadence_seconds": 600}


def test_replay_hand_log_exact_coverage_hits_and_selections():
    log = _log(HAND_LOG)
    result = replay(log, np.ones(len(log)), **HAND_KW)
    np.testing.assert_array_equal(result.hit, [False, False, False, True, True, False, False])
    assert result.n_eval_impressions == 5
    assert result.n_hits == 2
    assert result.coverage == pytest.approx(2 / 5)
    assert result.n_selected == 4
    assert result.n_selected_eval == 4
    assert result.n_eval_requests == 5
    assert result.fm_passes_per_1k_requests == pytest.approx(800.0)
    _assert_selections(
        result.selections,
        _selections(
            [
                (1, 10, 0, 600, 4200),
                (1, 11, 0, 600, 4200),
                (2, 10, 700, 1200, 4800),
                (1, 10, 5000, 5400, 9000),
            ]
        ),
    )


def test_replay_eval_from_restricts_the_denominator_not_the_walk():
    log = _log(HAND_LOG)
    result = replay(log, np.ones(len(log)), eval_from=700, **HAND_KW)
    # The selections made before eval_from still feed the cache: r3 hits are kept.
    np.testing.assert_array_equal(result.hit, [False, False, False, True, True, False, False])
    assert result.n_eval_impressions == 4  # r3 X, r3 Y, r4 X, r5 X
    assert result.n_hits == 2
    assert result.coverage == pytest.approx(0.5)
    assert result.n_selected == 4
    assert result.n_selected_eval == 2  # r4 X, r5 X
    assert result.n_eval_requests == 3
    assert result.fm_passes_per_1k_requests == pytest.approx(2000 / 3)


def test_replay_eval_from_after_the_log_has_no_impressions_and_zero_coverage():
    log = _log(HAND_LOG)
    result = replay(log, np.ones(len(log)), eval_from=10_000, **HAND_KW)
    assert result.n_eval_impressions == 0
    assert result.n_hits == 0
    assert result.coverage == 0.0
    assert result.n_eval_requests == 0
    assert result.fm_passes_per_1k_requests == 0.0


def test_replay_request_never_hits_from_its_own_selection():
    log = _log([(1, 1, 10, 50, 1), (1, 1, 11, 50, 0)])
    result = replay(log, np.ones(2), share=1.0, ttl_seconds=3600, cadence_seconds=600)
    assert result.n_selected == 2
    assert result.n_hits == 0
    assert result.coverage == 0.0
    assert not result.hit.any()


def test_replay_interval_never_hits_from_its_own_selections():
    # All three requests in interval [0, 600): the first selects, the later ones cannot use it.
    log = _log([(1, 1, 10, 0, NA), (2, 1, 10, 300, 1), (3, 1, 10, 599, 1)])
    result = replay(log, np.ones(3), share=1.0, ttl_seconds=3600, cadence_seconds=600)
    assert result.n_hits == 0
    assert result.n_selected == 1  # r2, r3: pending, not re-selected


def test_replay_intervals_are_aligned_to_epoch_multiples_not_the_first_request():
    # 590 and 610 are 20 s apart but in different intervals: the selection at 590 is
    # computed at 600 and usable at 610.
    log = _log([(1, 1, 10, 590, NA), (2, 1, 10, 610, 1)])
    result = replay(log, np.ones(2), share=1.0, ttl_seconds=3600, cadence_seconds=600)
    assert result.n_hits == 1
    _assert_selections(result.selections, _selections([(1, 10, 590, 600, 4200)]))
    # 610 and 1190 are 580 s apart but in the same interval [600, 1200).
    log = _log([(1, 1, 10, 610, NA), (2, 1, 10, 1190, 1)])
    result = replay(log, np.ones(2), share=1.0, ttl_seconds=3600, cadence_seconds=600)
    assert result.n_hits == 0


def test_replay_usable_from_interval_end_through_expires_at_inclusive():
    # Selected at t=0 -> usable on [600, 4200], both ends inclusive like Feast's TTL rule.
    log = _log(
        [
            (1, 1, 10, 0, NA),
            (1, 2, 10, 0, NA),
            (2, 1, 10, 600, 1),  # == computed_at: hit
            (3, 2, 10, 4200, 1),  # == expires_at, the last fresh second: hit
            (4, 1, 10, 4201, 1),  # one second later: miss
        ]
    )
    result = replay(log, np.ones(len(log)), share=1.0, ttl_seconds=3600, cadence_seconds=600)
    np.testing.assert_array_equal(result.hit, [False, False, True, True, False])
    assert result.coverage == pytest.approx(2 / 3)


def test_replay_expired_pair_is_selected_again_and_covers_later_impressions():
    log = _log(
        [
            (1, 1, 10, 0, NA),
            (2, 1, 10, 5000, NA),  # expired (4200): re-selected, usable [5400, 9000]
            (3, 1, 10, 6000, 1),
        ]
    )
    result = replay(log, np.ones(3), share=1.0, ttl_seconds=3600, cadence_seconds=600)
    np.testing.assert_array_equal(result.hit, [False, False, True])
    _assert_selections(
        result.selections, _selections([(1, 10, 0, 600, 4200), (1, 10, 5000, 5400, 9000)])
    )


def test_replay_hit_counts_unlabelled_rows_but_coverage_only_labelled():
    log = _log([(1, 1, 10, 0, NA), (2, 1, 10, 700, NA), (2, 1, 11, 700, 1)])
    result = replay(log, np.ones(3), share=1.0, ttl_seconds=3600, cadence_seconds=600)
    np.testing.assert_array_equal(result.hit, [False, True, False])
    assert result.n_eval_impressions == 1
    assert result.coverage == 0.0


def test_replay_share_limits_selection_to_top_scores():
    # One request of 4 at t=0, share 0.5: items 12, 13 selected; later impressions of all 4.
    log = _log(
        [(1, 1, item, 0, NA) for item in (10, 11, 12, 13)]
        + [(2, 1, item, 700, 1) for item in (10, 11, 12, 13)]
    )
    scores = np.array([0.1, 0.2, 0.9, 0.8, 0.0, 0.0, 0.0, 0.0])
    result = replay(log, scores, share=0.5, ttl_seconds=3600, cadence_seconds=600)
    np.testing.assert_array_equal(result.hit[4:], [False, False, True, True])
    assert result.coverage == pytest.approx(0.5)
    # The second request (budget 2) skips the fresh 12, 13 and selects 10, 11.
    assert result.selections["item_id"].tolist() == [12, 13, 10, 11]


def test_replay_result_is_aligned_with_input_order_and_ignores_index():
    log = _log(HAND_LOG)
    log.index = np.arange(len(log))[::-1] * 10
    result = replay(log, np.ones(len(log)), **HAND_KW)
    np.testing.assert_array_equal(result.hit, [False, False, False, True, True, False, False])


# --------------------------------------------------------------------------- validation


def test_replay_unsorted_input_raises():
    log = _log([(1, 1, 10, 700, 1), (2, 1, 10, 0, NA)])
    with pytest.raises(ValueError, match="sorted"):
        replay(log, np.ones(2), share=1.0, ttl_seconds=3600, cadence_seconds=600)


@pytest.mark.parametrize("cadence", [0, -600])
def test_replay_zero_or_negative_cadence_raises(cadence):
    log = _log(HAND_LOG)
    with pytest.raises(ValueError, match="cadence"):
        replay(log, np.ones(len(log)), share=1.0, ttl_seconds=3600, cadence_seconds=cadence)


@pytest.mark.parametrize("ttl", [0, -1])
def test_replay_zero_or_negative_ttl_raises(ttl):
    log = _log(HAND_LOG)
    with pytest.raises(ValueError, match="ttl"):
        replay(log, np.ones(len(log)), share=1.0, ttl_seconds=ttl, cadence_seconds=600)


def test_replay_scores_length_mismatch_raises():
    log = _log(HAND_LOG)
    with pytest.raises(ValueError, match="scores"):
        replay(log, np.ones(len(log) - 1), **HAND_KW)


@pytest.mark.parametrize("share", [0.0, 1.5])
def test_replay_share_outside_zero_one_raises(share):
    log = _log(HAND_LOG)
    with pytest.raises(ValueError, match="share"):
        replay(log, np.ones(len(log)), share=share, ttl_seconds=3600, cadence_seconds=600)


# --------------------------------------------------------------------------- helpers


def test_interval_end_is_the_next_epoch_multiple_of_cadence():
    ts = np.array([0, 1, 599, 600, 601, 1199, 1200])
    np.testing.assert_array_equal(interval_end(ts, 600), [600, 600, 600, 1200, 1200, 1200, 1800])


def test_fm_passes_per_1k_requests_arithmetic():
    def result(n_selected_eval: int, n_eval_requests: int) -> ReplayResult:
        return ReplayResult(
            coverage=0.0,
            n_eval_impressions=0,
            n_hits=0,
            n_selected=n_selected_eval + 5,
            n_selected_eval=n_selected_eval,
            n_eval_requests=n_eval_requests,
            n_refreshed_eval=0,
            hit=np.zeros(0, dtype=bool),
            selections=_selections([]),
        )

    assert result(7, 20).fm_passes_per_1k_requests == pytest.approx(350.0)
    assert result(3, 3).fm_passes_per_1k_requests == pytest.approx(1000.0)
    assert result(1, 3).fm_passes_per_1k_requests == pytest.approx(1000 / 3)
    assert result(0, 0).fm_passes_per_1k_requests == 0.0  # no division by zero


def test_random_scores_are_deterministic_per_seed():
    first = random_scores(50, seed=7)
    np.testing.assert_array_equal(first, random_scores(50, seed=7))
    assert not np.array_equal(first, random_scores(50, seed=8))
    assert first.shape == (50,)
    assert ((first >= 0) & (first < 1)).all()
    assert random_scores(0, seed=7).shape == (0,)


def test_oracle_scores_mark_pairs_labelled_inside_the_usable_window():
    # cadence 600, ttl 3600: a row at ts is worth selecting when the pair's labelled
    # impression is in [interval_end(ts), interval_end(ts) + 3600).
    log = _log(
        [
            (1, 1, 10, 0, NA),  # window [600, 4200]; (1,10) labelled at 700 -> 1
            (1, 1, 11, 0, NA),  # (1,11) labelled at 5000 -> 0 (too late)
            (1, 1, 12, 0, NA),  # (1,12) never labelled -> 0
            (2, 2, 10, 0, NA),  # (2,10) labelled at 600 == window start -> 1
            (3, 3, 10, 0, NA),  # (3,10) labelled at 4200 == window end (inclusive) -> 1
            (4, 1, 10, 100, NA),  # same interval as t=0: window [600, 4200) -> 1
            (5, 2, 10, 600, 1),  # the impression itself: window [1200, 4800) -> 0
            (6, 1, 10, 700, 1),  # the impression itself -> 0
            (7, 1, 11, 2000, NA),  # window [2400, 6000) contains 5000 -> 1
            (8, 3, 10, 4200, 0),  # labelled 0 still counts as labelled; itself -> 0
            (9, 1, 11, 5000, 1),  # itself -> 0
            (10, 1, 12, 5000, NA),  # never labelled -> 0
        ]
    )
    scores = oracle_scores(log, ttl_seconds=3600, cadence_seconds=600)
    np.testing.assert_array_equal(scores, [1, 0, 0, 1, 1, 1, 0, 0, 1, 0, 0, 0])
    assert scores.dtype == np.float64


def test_oracle_scores_at_full_share_cover_every_coverable_impression():
    log = _log(
        [
            (1, 1, 10, 0, NA),
            (1, 1, 11, 0, NA),
            (2, 1, 10, 700, 1),  # coverable: selected at 0
            (2, 1, 11, 700, NA),
            (3, 1, 12, 800, 1),  # no earlier candidate row: not coverable
        ]
    )
    kw = {"ttl_seconds": 3600, "cadence_seconds": 600}
    scores = oracle_scores(log, **kw)
    result = replay(log, scores, share=0.5, **kw)
    assert result.n_hits == 1
    assert result.coverage == pytest.approx(0.5)


def test_oracle_scores_consider_every_labelled_impression_of_the_pair():
    log = _log(
        [
            (1, 1, 10, 50, 1),  # first label, in the past of the row below
            (2, 1, 10, 800, NA),  # window [1200, 4800) holds the label at 2000 -> should be 1
            (3, 1, 10, 2000, 1),
        ]
    )
    scores = oracle_scores(log, ttl_seconds=3600, cadence_seconds=600)
    assert scores[1] == 1.0


# --------------------------------------------------------------------------- brute-force reference


def _random_log(seed: int, n_rows: int = 200) -> pd.DataFrame:
    """A few users and items, requests of 1..6 distinct items, sorted by ts, random labels."""
    rng = np.random.default_rng(seed)
    rows = []
    ts = 0
    request_id = 0
    while len(rows) < n_rows:
        ts += int(rng.choice([0, 0, 50, 200, 400, 700, 1500]))
        request_id += 1
        user = int(rng.integers(3))
        k = int(rng.integers(1, 7))
        for item in rng.choice(8, size=k, replace=False):
            label = NA if rng.random() < 0.5 else int(rng.integers(2))
            rows.append((request_id, user, int(item), ts, label))
    return _log(rows)


def _reference_replay(
    log: pd.DataFrame, scores: np.ndarray, share: float, ttl: int, cadence: int
) -> tuple[list[bool], list[bool]]:
    """Per-row (hit, selected), by the design, with plain Python loops and a dict cache."""
    rows = list(log[["request_id", "user_id", "item_id", "ts"]].itertuples(index=False))
    exact_share = Fraction(str(share))
    cache: dict[tuple[int, int], int] = {}  # pair -> expires_at
    hit = [False] * len(rows)
    selected = [False] * len(rows)
    intervals: dict[int, list[int]] = {}
    for pos, row in enumerate(rows):
        intervals.setdefault(row.ts // cadence, []).append(pos)
    for interval in sorted(intervals):
        positions = intervals[interval]
        fresh = {}
        for pos in positions:
            pair = (rows[pos].user_id, rows[pos].item_id)
            fresh[pos] = cache.get(pair, -(10**18)) >= rows[pos].ts
            hit[pos] = fresh[pos]
        requests: dict[int, list[int]] = {}
        for pos in positions:
            requests.setdefault(rows[pos].request_id, []).append(pos)
        pending: set[tuple[int, int]] = set()
        for request in sorted(requests, key=lambda r: (rows[requests[r][0]].ts, r)):
            mine = requests[request]
            product = exact_share * len(mine)
            budget = -(-product.numerator // product.denominator)
            eligible = [
                p
                for p in mine
                if not fresh[p] and (rows[p].user_id, rows[p].item_id) not in pending
            ]
            eligible.sort(key=lambda p: (-scores[p], rows[p].item_id))
            for p in eligible[:budget]:
                selected[p] = True
                pending.add((rows[p].user_id, rows[p].item_id))
        for pair in pending:
            cache[pair] = (interval + 1) * cadence + ttl
    return hit, selected


def _check_against_reference(seed: int, share: float, ttl: int, cadence: int) -> None:
    log = _random_log(seed)
    scores = np.round(np.random.default_rng(seed + 1000).random(len(log)), 1)  # ties
    result = replay(log, scores, share=share, ttl_seconds=ttl, cadence_seconds=cadence)
    hit, selected = _reference_replay(log, scores, share, ttl, cadence)
    np.testing.assert_array_equal(result.hit, hit)
    chosen = log[np.array(selected)]
    computed_at = (chosen["ts"] // cadence + 1) * cadence
    expected = pd.DataFrame(
        {
            "user_id": chosen["user_id"],
            "item_id": chosen["item_id"],
            "request_ts": chosen["ts"],
            "computed_at": computed_at,
            "expires_at": computed_at + ttl,
        }
    ).astype("int64")
    _assert_selections(result.selections, expected)
    labelled = log["label"].notna().to_numpy()
    assert result.n_selected == sum(selected)
    assert result.n_eval_impressions == labelled.sum()
    assert result.n_hits == np.array(hit)[labelled].sum()
    assert result.coverage == pytest.approx(np.array(hit)[labelled].mean())


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize(("ttl", "cadence"), [(1800, 600), (3600, 900), (600, 600)])
def test_replay_matches_brute_force_reference_on_random_logs(seed, ttl, cadence):
    # ttl a multiple of cadence: every expiry falls on an interval boundary.
    _check_against_reference(seed, share=0.3, ttl=ttl, cadence=cadence)


def test_replay_matches_brute_force_reference_when_expiry_falls_mid_interval():
    # Not every random log triggers it (seeds 9, 12, 19, 21, ... do); 30 seeds surely do.
    for seed in range(30):
        _check_against_reference(seed, share=0.3, ttl=1000, cadence=600)


def test_replay_mid_interval_expiry_hand_case_hits_are_per_row():
    # Hits are computed per row even when the expiry is mid-interval (only selection is off).
    # cadence 600, ttl 1000: selected at 0 -> usable [600, 1600].
    log = _log([(1, 1, 10, 0, NA), (2, 1, 10, 1300, 1), (3, 1, 10, 1700, 1)])
    result = replay(log, np.ones(3), share=1.0, ttl_seconds=1000, cadence_seconds=600)
    np.testing.assert_array_equal(result.hit, [False, True, False])


def test_replay_request_after_mid_interval_expiry_reselects_the_pair():
    log = _log([(1, 1, 10, 0, NA), (2, 1, 10, 1300, 1), (3, 1, 10, 1700, 1)])
    result = replay(log, np.ones(3), share=1.0, ttl_seconds=1000, cadence_seconds=600)
    _assert_selections(
        result.selections, _selections([(1, 10, 0, 600, 1600), (1, 10, 1700, 1800, 2800)])
    )


# ------------------------------------------------------------------ the near-line path


def _reference_nearline(
    log: pd.DataFrame,
    scores: np.ndarray,
    share: float,
    ttl: int,
    latency: int,
    refresh: int | None = None,
    refresh_share: float = 0.02,
) -> tuple[list[bool], list[bool], list[bool]]:
    """Per-row (hit, selected, refreshed) of the near-line path, one request at a time: a
    pair selected at ``ts`` is pending until ``ts + latency``, then fresh for ``ttl``; with
    ``refresh``, a usable code the user's requests passed ``refresh`` times (strictly after
    it became usable, strictly before now) is stale: each request first selects its best
    stale codes on a budget of ``refresh_share``, then its best pairs with no code on
    ``share``; the old code serves until the new one is usable."""
    rows = list(log[["request_id", "user_id", "item_id", "ts"]].itertuples(index=False))
    exact_share = Fraction(str(share))
    exact_refresh = Fraction(str(refresh_share))
    # pair -> (usable_at, expires_at, the previous code's expires_at)
    never = -(10**18)
    cache: dict[tuple[int, int], tuple[int, int, int]] = {}
    hit = [False] * len(rows)
    selected = [False] * len(rows)
    refreshed = [False] * len(rows)
    requests: dict[int, list[int]] = {}
    for pos, row in enumerate(rows):
        requests.setdefault(row.request_id, []).append(pos)
    user_times: dict[int, list[int]] = {}
    for positions in requests.values():
        user_times.setdefault(rows[positions[0]].user_id, []).append(rows[positions[0]].ts)
    for request in sorted(requests, key=lambda r: (rows[requests[r][0]].ts, r)):
        mine = requests[request]
        ts, user = rows[mine[0]].ts, rows[mine[0]].user_id
        held, stale = {}, {}
        for p in mine:
            usable, expires, previous = cache.get((user, rows[p].item_id), (0, never, never))
            held[p] = expires >= ts
            current = held[p] and usable <= ts
            hit[p] = current or previous >= ts
            since = sum(usable < t < ts for t in user_times[user])
            stale[p] = current and refresh is not None and since >= refresh
        taken: set[int] = set()
        for fraction, eligible_rows, is_refresh in (
            (exact_refresh, [p for p in mine if stale[p]], True),
            (exact_share, [p for p in mine if not held[p]], False),
        ):
            product = fraction * len(mine)
            budget = -(-product.numerator // product.denominator)
            eligible = sorted(
                (p for p in eligible_rows if rows[p].item_id not in taken),
                key=lambda p: (-scores[p], rows[p].item_id),
            )
            chosen: set[int] = set()
            for p in eligible:
                if len(chosen) == budget or rows[p].item_id in chosen:
                    continue
                chosen.add(rows[p].item_id)
                selected[p] = True
                refreshed[p] = is_refresh
                old = cache.get((user, rows[p].item_id), (0, never, never))
                previous = old[1] if is_refresh else never
                cache[(user, rows[p].item_id)] = (ts + latency, ts + latency + ttl, previous)
            taken |= chosen
    return hit, selected, refreshed


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize(("ttl", "latency"), [(1800, 30), (3600, 600), (600, 1)])
def test_nearline_replay_matches_a_request_at_a_time_reference(seed, ttl, latency):
    log = _random_log(seed)
    scores = np.round(np.random.default_rng(seed + 1000).random(len(log)), 1)  # ties
    result = replay(
        log, scores, share=0.3, ttl_seconds=ttl, cadence_seconds=900, latency_seconds=latency
    )
    hit, selected, _ = _reference_nearline(log, scores, 0.3, ttl, latency)
    np.testing.assert_array_equal(result.hit, hit)
    chosen = log[np.array(selected)]
    expected = pd.DataFrame(
        {
            "user_id": chosen["user_id"],
            "item_id": chosen["item_id"],
            "request_ts": chosen["ts"],
            "computed_at": chosen["ts"] + latency,
            "expires_at": chosen["ts"] + latency + ttl,
        }
    ).astype("int64")
    _assert_selections(result.selections, expected)


def test_nearline_codes_serve_the_next_request_after_the_latency_not_before():
    log = _log([(1, 1, 7, 1000, NA), (2, 1, 7, 1004, 1), (3, 1, 7, 1005, 1)])
    result = replay(
        log, np.ones(3), share=1.0, ttl_seconds=3600, cadence_seconds=900, latency_seconds=5
    )
    assert result.hit.tolist() == [False, False, True]  # pending at 1004, usable from 1005
    assert result.n_selected == 1  # not selected again while pending


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ({"latency_seconds": 0}, "latency_seconds must be positive"),
        ({"latency_seconds": -5}, "latency_seconds must be positive"),
        ({"refresh_after_requests": 0}, "refresh_after_requests must be at least 1"),
        ({"refresh_after_requests": -1}, "refresh_after_requests must be at least 1"),
    ],
)
def test_replay_refuses_a_latency_or_refresh_count_out_of_range(option, message):
    with pytest.raises(ValueError, match=message):
        replay(
            _log([(1, 1, 7, 1000, 1)]),
            np.ones(1),
            share=1.0,
            ttl_seconds=60,
            cadence_seconds=60,
            **option,
        )


# ------------------------------------------------------------------ refresh on activity


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(
    ("latency", "refresh", "refresh_share"), [(5, 1, 0.1), (30, 2, 0.3), (200, 3, 0.05)]
)
def test_refresh_on_activity_replay_matches_a_request_at_a_time_reference(
    seed, latency, refresh, refresh_share
):
    log = _random_log(seed)
    scores = np.round(np.random.default_rng(seed + 2000).random(len(log)), 1)
    result = replay(
        log,
        scores,
        share=0.3,
        ttl_seconds=2000,
        cadence_seconds=900,
        latency_seconds=latency,
        refresh_after_requests=refresh,
        refresh_share=refresh_share,
    )
    hit, selected, refreshed = _reference_nearline(
        log, scores, 0.3, 2000, latency, refresh, refresh_share
    )
    np.testing.assert_array_equal(result.hit, hit)
    np.testing.assert_array_equal(
        result.selections["refresh"].to_numpy(), np.array(refreshed)[np.array(selected)]
    )
    assert result.n_selected == sum(selected)


def test_refresh_selects_a_code_again_after_k_requests_and_the_old_code_serves_meanwhile():
    # User 1 asks for item 7 at 1000 (usable 1005), then at 1010, 1020 and 1030. With K = 2
    # the code is stale at 1030 (requests 1010 and 1020 came after it): selected again, and
    # the old code still serves 1030 and 1034; the new one serves from 1035.
    log = _log([(r, 1, 7, t, 1) for r, t in enumerate([1000, 1010, 1020, 1030, 1034, 1040])])
    kw = {"share": 1.0, "ttl_seconds": 3600, "cadence_seconds": 900, "latency_seconds": 5}
    result = replay(log, np.ones(6), refresh_after_requests=2, **kw)
    assert result.hit.tolist() == [False, True, True, True, True, True]
    assert result.selections["computed_at"].tolist() == [1005, 1035]
    assert result.selections["refresh"].tolist() == [False, True]
    assert result.n_refreshed_eval == 1
    assert replay(log, np.ones(6), **kw).n_selected == 1  # without refresh: one pass


def test_refresh_counts_only_the_users_own_requests():
    # Another user's requests between user 1's code and its next request do not make it stale.
    log = _log([(1, 1, 7, 1000, 1), (2, 2, 8, 1010, 1), (3, 2, 8, 1020, 1), (4, 1, 7, 1030, 1)])
    result = replay(
        log,
        np.ones(4),
        share=1.0,
        ttl_seconds=3600,
        cadence_seconds=900,
        latency_seconds=5,
        refresh_after_requests=1,
    )
    assert result.n_refreshed_eval == 0
