"""The escalation policy: the standard's table, retries, backoff, limits."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from web_index.fetch import Action, EscalationPolicy, HttpFetcher, plan_fetchers
from web_index.fetch._browser import BrowserFetcher
from web_index.models import AttemptState as S
from web_index.models import Calibre

POLICY = EscalationPolicy(max_retries=2, max_attempts=10, jitter=0)


@pytest.mark.parametrize(
    ("state", "action"),
    [
        (S.SUCCESS, Action.STOP),
        (S.TIMEOUT, Action.RETRY),
        (S.UNREACHABLE, Action.RETRY),
        (S.SSL_ERROR, Action.RETRY),
        (S.RETRYABLE_ERROR, Action.RETRY),
        (S.LOW_QUALITY, Action.ESCALATE),
        (S.BLOCKED, Action.ESCALATE),
        (S.ESCALATE, Action.ESCALATE),
        (S.UNAUTHORISED, Action.STOP),
        (S.ERROR, Action.STOP),
    ],
)
def test_first_decision_follows_the_table(state: S, action: Action) -> None:
    decision = POLICY.decide(state, retries_here=0, attempts=1, can_escalate=True)
    assert decision.action is action


def test_retries_are_spent_before_escalating() -> None:
    d = POLICY.decide(S.TIMEOUT, retries_here=2, attempts=3, can_escalate=True)
    assert d.action is Action.ESCALATE
    d = POLICY.decide(S.TIMEOUT, retries_here=2, attempts=3, can_escalate=False)
    assert d.action is Action.STOP


def test_backoff_grows_and_honours_retry_after() -> None:
    delays = [POLICY.decide(S.TIMEOUT, retries_here=n, attempts=1, can_escalate=True).delay for n in range(2)]
    assert delays == [1.0, 2.0]
    d = POLICY.decide(S.RETRYABLE_ERROR, retries_here=0, attempts=1, can_escalate=True, retry_after=7)
    assert d.action is Action.RETRY and d.delay == 7


def test_retry_after_too_long_skips_to_escalation() -> None:
    policy = EscalationPolicy(max_retry_after=10, jitter=0)
    d = policy.decide(S.RETRYABLE_ERROR, retries_here=0, attempts=1, can_escalate=True, retry_after=3600)
    assert d.action is Action.ESCALATE and d.delay == 0


def test_attempt_limit_stops() -> None:
    policy = EscalationPolicy(max_attempts=3)
    d = policy.decide(S.TIMEOUT, retries_here=0, attempts=3, can_escalate=True)
    assert d.action is Action.STOP


def test_invalid_policies_are_refused() -> None:
    with pytest.raises(ValueError):
        EscalationPolicy(min_calibre=60, max_calibre=10)
    with pytest.raises(ValueError):
        EscalationPolicy(max_attempts=0)


def test_plan_orders_by_calibre_and_respects_limits_and_methods() -> None:
    http = HttpFetcher()
    browser = BrowserFetcher(executable_path="/nonexistent")
    assert plan_fetchers([browser, http], "get", EscalationPolicy()) == [http, browser]
    assert plan_fetchers([browser, http], "head", EscalationPolicy()) == [http]
    assert plan_fetchers([browser, http], "get", EscalationPolicy(max_calibre=Calibre.HTTP)) == [http]
    assert plan_fetchers([browser, http], "get", EscalationPolicy(min_calibre=Calibre.BROWSER)) == [browser]


@given(
    state=st.sampled_from(list(S)),
    retries=st.integers(0, 5),
    attempts=st.integers(1, 12),
    can_escalate=st.booleans(),
    retry_after=st.one_of(st.none(), st.floats(0, 10_000)),
    max_retries=st.integers(0, 4),
    max_attempts=st.integers(1, 10),
    seed=st.integers(0, 2**32),
)
def test_decisions_obey_the_table_and_the_limits(
    state: S,
    retries: int,
    attempts: int,
    can_escalate: bool,
    retry_after: float | None,
    max_retries: int,
    max_attempts: int,
    seed: int,
) -> None:
    policy = EscalationPolicy(max_retries=max_retries, max_attempts=max_attempts)
    d = policy.decide(
        state,
        retries_here=retries,
        attempts=attempts,
        can_escalate=can_escalate,
        retry_after=retry_after,
        rng=random.Random(seed),
    )
    assert d.delay >= 0
    if d.action is Action.RETRY:
        assert state.retryable and retries < max_retries and attempts < max_attempts
        assert d.delay <= max(policy.backoff_max * (1 + policy.jitter), retry_after or 0)
        if retry_after is not None:
            assert d.delay >= retry_after
    if d.action is Action.ESCALATE:
        assert state.retryable_with_escalation and can_escalate and attempts < max_attempts
    if state.is_success or not state.retryable_with_escalation:
        assert d.action is Action.STOP


@given(
    st.lists(st.sampled_from(list(S)), min_size=1, max_size=30),
    st.integers(1, 8),
    st.integers(0, 3),
)
def test_any_sequence_of_attempts_terminates(states: list[S], max_attempts: int, max_retries: int) -> None:
    """Simulate a URL through three calibres: attempts never exceed the limit."""
    policy = EscalationPolicy(max_attempts=max_attempts, max_retries=max_retries, jitter=0)
    level, retries, made = 0, 0, 0
    for state in states * 10:
        made += 1
        d = policy.decide(state, retries_here=retries, attempts=made, can_escalate=level < 2)
        if d.action is Action.STOP:
            break
        if d.action is Action.RETRY:
            retries += 1
        else:
            level, retries = level + 1, 0
    assert made <= max_attempts
    assert level <= 2
