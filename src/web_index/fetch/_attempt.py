"""What every fetcher shares: the protocol, the attempt result, the limits."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal, Protocol, runtime_checkable

from web_index.models import AttemptMetadata, AttemptState, Response, last_reason

__all__ = [
    "Attempt",
    "FetchLimits",
    "Fetcher",
    "Method",
    "join_headers",
    "utc_now",
]

Method = Literal["get", "head"]


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class FetchLimits:
    """Bounds on one attempt, so that no server can hang or exhaust the fetcher.

    ``timeout`` bounds the whole attempt (every hop, every body byte);
    ``connect_timeout`` and ``read_timeout`` bound single operations within it.
    ``max_body_bytes`` applies to the bytes on the wire and
    ``max_decoded_bytes`` to the body after content decoding; a decoded body
    more than ``max_ratio`` times its compressed size (past the first MiB) is a
    decompression bomb.
    """

    timeout: float = 30.0
    connect_timeout: float = 10.0
    read_timeout: float = 20.0
    max_body_bytes: int = 16 * 1024 * 1024
    max_decoded_bytes: int = 32 * 1024 * 1024
    max_ratio: float = 200.0
    max_redirects: int = 10


@dataclass(slots=True)
class Attempt:
    """The outcome of one fetch attempt, ready to be recorded.

    ``responses`` holds the response chain (redirect hops first) and is empty
    unless ``state`` is success. ``retry_after`` carries a server's
    ``Retry-After`` (in seconds) for the escalation policy.
    """

    url: str
    method: Method
    state: AttemptState
    started: datetime
    fetcher_name: str
    fetcher_version: str
    fetcher_calibre: int
    responses: list[Response] = field(default_factory=list)
    run_time: float = 0.0
    retry_attempt: int = 0
    logs: list[str] = field(default_factory=list)
    traceback: str | None = None
    retry_after: float | None = None
    status_code: int | None = None

    @classmethod
    def begin(cls, fetcher: Fetcher, url: str, method: Method, retry_attempt: int) -> Attempt:
        """A new attempt by ``fetcher``, starting now, ``error`` until it says otherwise."""
        return cls(
            url=url,
            method=method,
            state=AttemptState.ERROR,
            started=utc_now(),
            fetcher_name=fetcher.name,
            fetcher_version=fetcher.version,
            fetcher_calibre=fetcher.calibre,
            retry_attempt=retry_attempt,
        )

    @property
    def final(self) -> Response | None:
        return self.responses[-1] if self.responses else None

    @property
    def why(self) -> str | None:
        """Why it ended as it did, in one line: :attr:`AttemptMetadata.why` of it stored."""
        return last_reason(self.logs)

    def log(self, message: str) -> None:
        self.logs.append(message)

    def metadata(self) -> AttemptMetadata:
        return AttemptMetadata(
            state=self.state,
            url=self.url,
            fetcher_name=self.fetcher_name,
            fetcher_version=self.fetcher_version,
            fetcher_calibre=self.fetcher_calibre,
            logs="\n".join(self.logs) if self.logs else None,
            traceback=self.traceback,
            run_time=max(self.run_time, 0.0),
        )


@runtime_checkable
class Fetcher(Protocol):
    """A way of fetching URLs, with a name, a version and a calibre.

    ``fetch`` never raises for anything the remote side does: every outcome is
    an :class:`Attempt` in one of the standard's states.
    """

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def calibre(self) -> int: ...

    def supports(self, method: Method) -> bool: ...

    async def fetch(self, url: str, method: Method = "get", retry_attempt: int = 0) -> Attempt: ...

    async def aclose(self) -> None: ...


def join_headers(items: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Header pairs as one mapping: lower-case names, repeats joined.

    Repeated fields are joined with ``", "`` as RFC 9110 allows, except
    ``Set-Cookie``, whose values may contain commas, joined with a newline.
    """
    out: dict[str, str] = {}
    for raw_name, value in items:
        name = raw_name.lower()
        if name in out:
            sep = "\n" if name == "set-cookie" else ", "
            out[name] = out[name] + sep + value
        else:
            out[name] = value
    return out


class Stopwatch:
    """Wall time of an attempt, from a monotonic clock."""

    __slots__ = ("_t0",)

    def __init__(self) -> None:
        self._t0 = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self._t0
