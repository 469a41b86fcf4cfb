"""When to retry, when to escalate, when to stop: the standard's table as a policy.

Retryable states are tried again with the same fetcher after a backoff that
honours ``Retry-After``; once the retries at a calibre are spent, and for the
states that are only escalatable, the next fetcher up is tried; everything
else stops. Pure: the runner sleeps, this only decides.
"""

from __future__ import annotations

import enum
import random
from collections.abc import Sequence
from dataclasses import dataclass

from web_index.fetch._attempt import Fetcher, Method
from web_index.models import AttemptState, Calibre

__all__ = ["Action", "Decision", "EscalationPolicy", "plan_fetchers"]


class Action(enum.StrEnum):
    STOP = "stop"
    RETRY = "retry"
    ESCALATE = "escalate"


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    delay: float
    reason: str


@dataclass(frozen=True, slots=True)
class EscalationPolicy:
    """Limits on one URL's sequence of attempts.

    ``max_retries`` retries follow the first attempt at each calibre;
    ``max_attempts`` bounds the whole sequence. Fetchers below
    ``min_calibre`` or above ``max_calibre`` are never used. Backoff is
    ``backoff_base * backoff_factor**retry`` capped at ``backoff_max``, with
    ±``jitter`` (a fraction) so that many URLs of one host do not retry in
    step. A ``Retry-After`` longer than ``max_retry_after`` is not waited
    for: the calibre is given up instead.
    """

    max_retries: int = 2
    max_attempts: int = 8
    min_calibre: int = int(Calibre.HTTP)
    max_calibre: int = int(Calibre.BROWSER)
    backoff_base: float = 1.0
    backoff_factor: float = 2.0
    backoff_max: float = 60.0
    jitter: float = 0.1
    max_retry_after: float = 120.0

    def __post_init__(self) -> None:
        if self.max_retries < 0 or self.max_attempts < 1:
            raise ValueError("max_retries must be >= 0 and max_attempts >= 1")
        Calibre.check(self.min_calibre, "min_calibre")
        Calibre.check(self.max_calibre, "max_calibre")
        if self.min_calibre > self.max_calibre:
            raise ValueError(f"min_calibre {self.min_calibre} is above max_calibre {self.max_calibre}")
        if min(self.backoff_base, self.backoff_max, self.jitter, self.max_retry_after) < 0:
            raise ValueError("backoff and Retry-After limits must be >= 0")

    def backoff(
        self, retry: int, retry_after: float | None = None, *, rng: random.Random | None = None
    ) -> float:
        """Seconds to wait before retry number ``retry`` (0 for the first retry)."""
        delay = min(self.backoff_max, self.backoff_base * self.backoff_factor ** max(retry, 0))
        if self.jitter:
            spread = (rng or random).uniform(-self.jitter, self.jitter)
            delay = max(0.0, delay * (1.0 + spread))
        if retry_after is not None:
            delay = max(delay, retry_after)
        return delay

    def decide(
        self,
        state: AttemptState,
        *,
        retries_here: int,
        attempts: int,
        can_escalate: bool,
        retry_after: float | None = None,
        rng: random.Random | None = None,
    ) -> Decision:
        """What to do after an attempt ended in ``state``.

        ``retries_here`` counts the retries already made at this calibre,
        ``attempts`` all attempts so far (including this one), and
        ``can_escalate`` says whether a fetcher of higher calibre is available.
        """
        if state.is_success:
            return Decision(Action.STOP, 0.0, "success")
        if attempts >= self.max_attempts:
            return Decision(Action.STOP, 0.0, f"attempt limit of {self.max_attempts} reached")
        too_long = retry_after is not None and retry_after > self.max_retry_after
        if state.retryable and retries_here < self.max_retries and not too_long:
            delay = self.backoff(retries_here, retry_after, rng=rng)
            return Decision(Action.RETRY, delay, f"{state} is retryable (retry {retries_here + 1})")
        if state.retryable_with_escalation:
            if can_escalate:
                # The next fetcher talks to the same server: a Retry-After still applies.
                wait = 0.0 if retry_after is None or too_long else retry_after
                return Decision(Action.ESCALATE, wait, f"{state}: escalating")
            return Decision(Action.STOP, 0.0, f"{state}: no fetcher of higher calibre allowed")
        return Decision(Action.STOP, 0.0, f"{state} is final")


def plan_fetchers(fetchers: Sequence[Fetcher], method: Method, policy: EscalationPolicy) -> list[Fetcher]:
    """The fetchers a URL may go through, lowest calibre first.

    Fetchers that cannot do ``method`` (a browser and HEAD) are skipped, and
    of several with one calibre only the first is kept.
    """
    chosen: dict[int, Fetcher] = {}
    for fetcher in fetchers:
        calibre = int(fetcher.calibre)
        if policy.min_calibre <= calibre <= policy.max_calibre and fetcher.supports(method):
            chosen.setdefault(calibre, fetcher)
    return [chosen[c] for c in sorted(chosen)]
