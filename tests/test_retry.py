"""The one retry helper: how many tries, on what, what it says when they run out."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from web_index._retry import Pause, retrying
from web_index.errors import StoreError


@given(fails=st.integers(0, 6), tries=st.integers(1, 6))
def test_runs_again_on_the_named_exception_up_to_tries(fails: int, tries: int) -> None:
    calls = []

    def step() -> int:
        calls.append(1)
        if len(calls) <= fails:
            raise FileNotFoundError("gone")
        return len(calls)

    if fails < tries:
        assert retrying(step, tries=tries, on=(FileNotFoundError,), gave_up="x") == fails + 1
    else:
        with pytest.raises(StoreError, match=r"^kept changing$"):
            retrying(step, tries=tries, on=(FileNotFoundError,), gave_up="kept changing")
        assert len(calls) == tries


@given(needed=st.integers(1, 8))
def test_runs_again_until_done(needed: int) -> None:
    calls = []

    def step() -> int:
        calls.append(1)
        return len(calls)

    assert retrying(step, tries=None, done=lambda n: n >= needed, gave_up="") == needed


def test_other_exceptions_pass_through_at_once() -> None:
    calls = []

    def step() -> None:
        calls.append(1)
        raise ValueError("a bug, not a race")

    with pytest.raises(ValueError, match="a bug"):
        retrying(step, tries=5, on=(FileNotFoundError,), gave_up="")
    assert len(calls) == 1


def test_pauses_grow_jittered_up_to_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    retrying(lambda: len(slept), tries=None, done=lambda n: n >= 12, pause=Pause(0.1, 2.0, 1.0), gave_up="")
    assert len(slept) == 12
    assert all(0.1 <= s <= 1.0 for s in slept)
    assert slept[-1] == 1.0  # 0.1 * 2**11 is far past the cap
    assert slept[0] <= 0.2


def test_without_a_message_the_last_error_is_raised_as_it_was() -> None:
    def step() -> None:
        raise FileNotFoundError("still gone")

    with pytest.raises(FileNotFoundError, match="still gone"):
        retrying(step, tries=2, on=(FileNotFoundError,), gave_up=None)
