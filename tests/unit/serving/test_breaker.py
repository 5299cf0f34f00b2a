"""CircuitBreaker on a fake clock: opening, the cool-down, the single half-open probe."""

from __future__ import annotations

import threading

import pytest

from solaris.serving.client import CircuitBreaker

FAILURES = 3
COOLDOWN = 1.0
TICK = 2.0**-10  # exact in binary: clock sums stay exact


class FakeClock:
    """A monotonic clock that moves only when told to."""

    def __init__(self, start: float = 100.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def breaker(clock: FakeClock) -> CircuitBreaker:
    return CircuitBreaker(FAILURES, COOLDOWN, clock=clock)


def _fail(breaker: CircuitBreaker, times: int) -> None:
    for _ in range(times):
        breaker.record(False)


def _open(breaker: CircuitBreaker) -> None:
    _fail(breaker, FAILURES)
    assert breaker.state == "open"


def test_a_new_breaker_is_closed_and_allows_every_call(breaker: CircuitBreaker) -> None:
    assert breaker.state == "closed"
    assert all(breaker.allow() for _ in range(10))


def test_fewer_consecutive_failures_than_the_threshold_keep_it_closed(
    breaker: CircuitBreaker,
) -> None:
    _fail(breaker, FAILURES - 1)
    assert breaker.state == "closed"
    assert breaker.allow()


def test_the_threshold_of_consecutive_failures_opens_it(breaker: CircuitBreaker) -> None:
    _fail(breaker, FAILURES)
    assert breaker.state == "open"
    assert not breaker.allow()


def test_a_success_resets_the_failure_count(breaker: CircuitBreaker) -> None:
    _fail(breaker, FAILURES - 1)
    breaker.record(True)
    _fail(breaker, FAILURES - 1)
    assert breaker.state == "closed"
    assert breaker.allow()
    breaker.record(False)
    assert breaker.state == "open"


def test_one_failure_opens_a_breaker_with_threshold_one(clock: FakeClock) -> None:
    breaker = CircuitBreaker(1, COOLDOWN, clock=clock)
    breaker.record(False)
    assert breaker.state == "open"


def test_while_open_every_call_is_refused_until_the_cool_down_ends(
    breaker: CircuitBreaker, clock: FakeClock
) -> None:
    _open(breaker)
    for _ in range(5):
        clock.advance(COOLDOWN / 8)
        assert not breaker.allow()
        assert breaker.state == "open"
    clock.advance(COOLDOWN * 3 / 8 - TICK)  # just before the end
    assert not breaker.allow()
    clock.advance(TICK)
    assert breaker.allow()


def test_after_the_cool_down_it_is_half_open_and_lets_exactly_one_probe_through(
    breaker: CircuitBreaker, clock: FakeClock
) -> None:
    _open(breaker)
    clock.advance(COOLDOWN)
    assert breaker.state == "half-open"
    assert breaker.allow()  # the probe
    assert not breaker.allow()  # a second caller while the probe runs
    assert not breaker.allow()
    assert breaker.state == "half-open"


def test_concurrent_callers_after_the_cool_down_get_one_probe_between_them(
    breaker: CircuitBreaker, clock: FakeClock
) -> None:
    _open(breaker)
    clock.advance(COOLDOWN)
    start = threading.Barrier(16)
    allowed: list[bool] = []
    lock = threading.Lock()

    def call() -> None:
        start.wait()
        ok = breaker.allow()
        with lock:
            allowed.append(ok)

    threads = [threading.Thread(target=call) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert len(allowed) == 16
    assert sum(allowed) == 1


def test_a_successful_probe_closes_it(breaker: CircuitBreaker, clock: FakeClock) -> None:
    _open(breaker)
    clock.advance(COOLDOWN)
    assert breaker.allow()
    breaker.record(True)
    assert breaker.state == "closed"
    assert all(breaker.allow() for _ in range(5))
    _fail(breaker, FAILURES - 1)  # and the count starts again from zero
    assert breaker.state == "closed"


def test_a_failed_probe_reopens_it_for_another_full_cool_down(
    breaker: CircuitBreaker, clock: FakeClock
) -> None:
    _open(breaker)
    clock.advance(COOLDOWN + 5)  # the probe comes late
    assert breaker.allow()
    breaker.record(False)
    assert breaker.state == "open"
    assert not breaker.allow()
    clock.advance(COOLDOWN - TICK)
    assert not breaker.allow()
    assert breaker.state == "open"
    clock.advance(TICK)
    assert breaker.state == "half-open"
    assert breaker.allow()
    assert not breaker.allow()


def test_state_reports_closed_open_and_half_open(breaker: CircuitBreaker, clock: FakeClock) -> None:
    seen = [breaker.state]
    _fail(breaker, FAILURES)
    seen.append(breaker.state)
    clock.advance(COOLDOWN)
    seen.append(breaker.state)
    breaker.allow()
    breaker.record(True)
    seen.append(breaker.state)
    assert seen == ["closed", "open", "half-open", "closed"]


def test_reading_state_does_not_take_the_probe(breaker: CircuitBreaker, clock: FakeClock) -> None:
    _open(breaker)
    clock.advance(COOLDOWN)
    for _ in range(3):
        assert breaker.state == "half-open"
    assert breaker.allow()


def test_the_default_clock_is_monotonic_time() -> None:
    breaker = CircuitBreaker(1, 3600.0)
    breaker.record(False)
    assert breaker.state == "open"
    assert not breaker.allow()


@pytest.mark.parametrize(
    ("failures", "cooldown_s"),
    [(0, 1.0), (-1, 1.0), (1, 0.0), (1, -1.0), (0, 0.0)],
)
def test_bad_constructor_arguments_raise(failures: int, cooldown_s: float) -> None:
    with pytest.raises(ValueError, match="failures >= 1 and cooldown_s > 0"):
        CircuitBreaker(failures, cooldown_s)


def test_a_nan_cool_down_is_refused() -> None:
    with pytest.raises(ValueError):
        CircuitBreaker(FAILURES, float("nan"))
