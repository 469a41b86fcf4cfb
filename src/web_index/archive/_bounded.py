"""Reading a remote archive's answer with a cap: a CDX server, a TimeMap, a
WARC range or index, a replayed memento. What a remote sends is never trusted
to be as small as asked (a server that ignores ``Range`` sends the whole WARC)."""

from __future__ import annotations

import httpx

__all__ = ["MAX_ANSWER_BYTES", "TooLargeError", "get_bounded"]

MAX_ANSWER_BYTES = 64 << 20


class TooLargeError(ValueError):
    """A remote answer past its cap."""


async def get_bounded(
    client: httpx.AsyncClient,
    url: str,
    *,
    cap: int = MAX_ANSWER_BYTES,
    headers: dict[str, str] | None = None,
    stop_at_cap: bool = False,
) -> tuple[httpx.Response, bytes]:
    """The answer to ``GET url`` and its body (decoded as its
    ``Content-Encoding`` says), at most ``cap`` bytes: past it, a
    :class:`TooLargeError`, or with ``stop_at_cap`` the first ``cap`` bytes."""
    body = bytearray()
    async with client.stream("GET", url, headers=headers) as answer:
        async for chunk in answer.aiter_bytes():
            body += chunk
            if len(body) > cap:
                if stop_at_cap:
                    del body[cap:]
                    break
                raise TooLargeError(f"{url}: more than {cap:,} bytes")
    return answer, bytes(body)
