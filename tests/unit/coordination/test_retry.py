"""The retry policy (coordination/retry.py): Backoff's delays (count, growth, cap, jitter, time
budget) and retry()'s choice of what to retry and what to re-raise."""

from __future__ import annotations

import asyncio
import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clients.errors import ConnectionFailed, InvalidArgument, NotFound, RequestTimeout, TributaryError
from coordination.retry import Backoff, is_retriable, retry

FAST = Backoff(initial_seconds=0.0005, multiplier=1.0, max_delay_seconds=0.0005, attempts=5, jitter=0.0)


class Flaky:
    """An async operation that fails with the given errors in turn, then returns ``result``."""

    def __init__(self, errors, result="ok"):
        self.errors = list(errors)
        self.result = result
        self.calls = 0

    async def __call__(self):
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return self.result


# ---------------------------------------------------------------------- Backoff


def test_delays_grow_then_cap_without_jitter():
    """Without jitter the delays are initial * multiplier**n capped at max_delay, attempts - 1 of them."""
    policy = Backoff(initial_seconds=1.0, multiplier=2.0, max_delay_seconds=5.0, attempts=7, jitter=0.0)
    assert list(policy.delays()) == [1.0, 2.0, 4.0, 5.0, 5.0, 5.0]


def test_single_attempt_has_no_delays():
    """attempts=1 means no retry at all."""
    assert list(Backoff(attempts=1).delays()) == []


def test_unbounded_attempts_never_end():
    """attempts=None keeps yielding capped delays."""
    FOREVER = Backoff(attempts=None)
    delays = list(itertools.islice(FOREVER.delays(), 200))
    assert len(delays) == 200
    assert max(delays) <= FOREVER.max_delay_seconds * (1 + FOREVER.jitter) + 1e-12


def test_total_seconds_bounds_the_waiting():
    """total_seconds clips the last delay so the sum is exactly the budget, then stops."""
    policy = Backoff(initial_seconds=1.0, multiplier=2.0, max_delay_seconds=10.0, attempts=None,
                     total_seconds=5.5, jitter=0.0)
    assert list(policy.delays()) == [1.0, 2.0, 2.5]
    assert list(Backoff(attempts=None, total_seconds=0.0).delays()) == []


@pytest.mark.parametrize("kwargs", [
    {"initial_seconds": -0.1}, {"multiplier": 0.5}, {"max_delay_seconds": -1.0}, {"attempts": 0}, {"attempts": -3},
])
def test_invalid_backoff_is_rejected(kwargs):
    """Negative delays, shrinking multipliers and fewer than one attempt raise ValueError."""
    with pytest.raises(ValueError):
        Backoff(**kwargs)


@settings(max_examples=200, deadline=None)
@given(initial=st.floats(0.0, 10.0), multiplier=st.floats(1.0, 8.0), cap=st.floats(0.0, 10.0),
       attempts=st.integers(1, 15), jitter=st.floats(0.0, 1.0),
       total=st.none() | st.floats(0.0, 30.0))
def test_delays_respect_count_cap_jitter_and_budget(initial, multiplier, cap, attempts, jitter, total):
    """At most attempts - 1 delays, each within [base, base * (1 + jitter)] of its capped base, summing to <= total_seconds."""
    policy = Backoff(initial_seconds=initial, multiplier=multiplier, max_delay_seconds=cap, attempts=attempts,
                     total_seconds=total, jitter=jitter)
    delays = list(policy.delays())
    assert len(delays) <= attempts - 1
    waited = 0.0
    for index, delay in enumerate(delays):
        base = min(initial * multiplier ** index, cap)
        assert delay >= 0.0
        assert delay <= base * (1 + jitter) + 1e-9
        if total is None or waited + base * (1 + jitter) < total - 1e-9:
            assert delay >= base - 1e-9  # only the budget may cut a delay below its base
        waited += delay
    if total is None:
        assert len(delays) == attempts - 1
    else:
        assert waited <= total + 1e-9
        if len(delays) < attempts - 1:  # stopped early: only because the budget was used up
            assert math.isclose(waited, total, rel_tol=1e-9, abs_tol=1e-9)


# ---------------------------------------------------------------------- is_retriable / retry


def test_is_retriable():
    """Retriable typed errors and timeouts are retriable; everything else is not."""
    assert is_retriable(ConnectionFailed("x")) and is_retriable(RequestTimeout("x"))
    assert is_retriable(asyncio.TimeoutError()) and is_retriable(TimeoutError())
    assert not is_retriable(InvalidArgument("x")) and not is_retriable(NotFound("x"))
    assert not is_retriable(ValueError("x")) and not is_retriable(TributaryError("x"))


async def test_retry_returns_after_retriable_failures():
    """Retriable failures are retried until the operation succeeds; its result is returned."""
    operation = Flaky([ConnectionFailed("a"), RequestTimeout("b"), asyncio.TimeoutError()], result=42)
    seen = []
    assert await retry(operation, FAST, on_retry=lambda error, delay: seen.append((type(error), delay))) == 42
    assert operation.calls == 4
    assert seen == [(ConnectionFailed, 0.0005), (RequestTimeout, 0.0005), (asyncio.TimeoutError, 0.0005)]


async def test_retry_does_not_retry_non_retriable_errors():
    """A non-retriable error (typed or plain) is raised at once, after a single call."""
    for error in (InvalidArgument("bad"), NotFound("gone"), ValueError("plain"), KeyError("k")):
        operation = Flaky([error, ConnectionFailed("never reached")])
        with pytest.raises(type(error)) as raised:
            await retry(operation, FAST)
        assert raised.value is error
        assert operation.calls == 1


async def test_retry_stops_at_a_non_retriable_error_after_retriable_ones():
    """Retriable failures are retried, but the first non-retriable one ends the loop."""
    fatal = InvalidArgument("fatal")
    operation = Flaky([ConnectionFailed("1"), ConnectionFailed("2"), fatal, ConnectionFailed("3")])
    with pytest.raises(InvalidArgument) as raised:
        await retry(operation, FAST)
    assert raised.value is fatal and operation.calls == 3


async def test_retry_reraises_the_last_error_when_attempts_are_spent():
    """With every attempt failing, exactly ``attempts`` calls are made and the last error is raised as is."""
    errors = [ConnectionFailed(str(n)) for n in range(10)]
    operation = Flaky(errors[:])
    retries = []
    with pytest.raises(ConnectionFailed) as raised:
        await retry(operation, FAST, on_retry=lambda error, delay: retries.append(error))
    assert operation.calls == FAST.attempts == 5
    assert raised.value is errors[4]
    assert retries == errors[:4]


async def test_retry_reraises_the_last_error_when_time_is_spent():
    """With only a time budget, retrying stops once the waits add up to total_seconds."""
    policy = Backoff(initial_seconds=0.001, multiplier=2.0, max_delay_seconds=0.004, attempts=None,
                     total_seconds=0.02, jitter=0.0)
    operation = Flaky([RequestTimeout(str(n)) for n in range(1000)])
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(RequestTimeout) as raised:
        await retry(operation, policy)
    assert 1 < operation.calls < 20
    assert raised.value.args == (str(operation.calls - 1),)
    assert loop.time() - started >= 0.019


async def test_retry_with_a_custom_predicate():
    """A custom ``retriable`` predicate replaces the default choice."""
    operation = Flaky([KeyError("retry me"), KeyError("and me")], result="done")
    assert await retry(operation, FAST, retriable=lambda error: isinstance(error, KeyError)) == "done"
    assert operation.calls == 3
    refused = Flaky([ConnectionFailed("not by this predicate")])
    with pytest.raises(ConnectionFailed):
        await retry(refused, FAST, retriable=lambda error: False)
    assert refused.calls == 1


async def test_retry_does_not_swallow_cancellation():
    """CancelledError is not an Exception: it propagates after one call."""
    operation = Flaky([asyncio.CancelledError()])
    with pytest.raises(asyncio.CancelledError):
        await retry(operation, FAST)
    assert operation.calls == 1


async def test_retry_sleeps_the_backoff_delays():
    """Between attempts retry() really waits the policy's delays."""
    policy = Backoff(initial_seconds=0.01, multiplier=1.0, max_delay_seconds=0.01, attempts=3, jitter=0.0)
    operation = Flaky([ConnectionFailed("a"), ConnectionFailed("b")])
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await retry(operation, policy) == "ok"
    assert loop.time() - started >= 0.019


async def test_retry_stops_before_a_wait_that_would_end_after_the_deadline():
    """With a deadline, the waits that end before it are taken, the first that would not is not."""
    policy = Backoff(initial_seconds=0.02, multiplier=1.0, max_delay_seconds=0.02, attempts=None, jitter=0.0)
    loop = asyncio.get_running_loop()
    operation = Flaky([ConnectionFailed(str(n)) for n in range(100)])
    started = loop.time()
    with pytest.raises(ConnectionFailed):
        await retry(operation, policy, deadline=started + 0.07)
    assert 3 <= operation.calls <= 4  # tries at about 0, 20, 40 (and 60) ms; a wait to 80 ms is not begun
    assert loop.time() - started < 0.08  # had the wait to 80 ms begun, it would be later (scheduling may add a little)
    past = Flaky([ConnectionFailed("late")])
    with pytest.raises(ConnectionFailed):
        await retry(past, policy, deadline=loop.time())  # no time left: one try, no wait
    assert past.calls == 1
