"""Retrying, written once (tenacity underneath).

Four loops of the store do it: reading a batch of queries again when a
compaction committed under it, listing a partition again when a file vanished
between listing and opening, waiting for a lease, and reading the PostgreSQL
buffer again on a fresh connection when one dropped. Each says *when* a step
must run again (an exception it may raise, or a result that is not done yet),
how many tries it gets, how long to pause, and what to tell the user when the
tries run out. The fetchers' retries are not among them: those follow the
standard's table of states (``fetch.RetryPolicy``) and may change fetcher.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import tenacity

from web_index.errors import StoreError

__all__ = ["Pause", "retrying"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Pause:
    """Jittered exponential pauses: ``first``, then ×``factor`` up to ``cap``,
    each plus up to ``first`` at random so that waiters do not wake in step."""

    first: float
    factor: float = 1.5
    cap: float = 1.0

    def _wait(self) -> tenacity.wait.wait_base:
        return tenacity.wait_exponential_jitter(
            multiplier=self.first, exp_base=self.factor, max=self.cap, jitter=self.first
        )


def _always(_: object) -> bool:
    return True


def retrying(
    step: Callable[[], T],
    *,
    tries: int | None,
    gave_up: str | None,
    on: tuple[type[BaseException], ...] = (),
    done: Callable[[T], bool] = _always,
    pause: Pause | None = None,
) -> T:
    """Run ``step`` until it returns a result ``done`` accepts, running it again
    when it raises one of ``on``; at most ``tries`` times (``None``: until done).

    Out of tries, a :class:`StoreError` saying ``gave_up`` (with ``None``,
    the last try's exception itself). Any other exception propagates at once.
    """
    asked = tries
    if pause is None:
        # The first try alone, without tenacity: building its retryer cost ~75 µs, a
        # twentieth of a single lookup, and nearly every step is done at the first try.
        last: BaseException | None = None
        try:
            result = step()
        except on as exc:
            last = exc
        else:
            if done(result):
                return result
        if tries == 1:
            raise _given_up(last, gave_up, asked) from None
        tries = None if tries is None else tries - 1
    retryer = tenacity.Retrying(
        stop=tenacity.stop_never if tries is None else tenacity.stop_after_attempt(tries),
        retry=tenacity.retry_if_exception_type(on) | tenacity.retry_if_not_result(done),
        wait=tenacity.wait_none() if pause is None else pause._wait(),
        reraise=False,
    )
    try:
        return retryer(step)
    except tenacity.RetryError as exc:
        raise _given_up(exc.last_attempt.exception(), gave_up, asked) from None


def _given_up(last: BaseException | None, gave_up: str | None, tries: int | None) -> BaseException:
    """What :func:`retrying` raises out of tries: the last try's exception itself
    (``gave_up`` ``None``), else a :class:`StoreError` saying ``gave_up``."""
    if gave_up is None and last is not None:
        return last
    return StoreError(gave_up or f"gave up after {tries} tries")
