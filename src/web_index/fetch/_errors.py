"""Failures the fetchers detect themselves, each mapped to a state by the classifier."""

from __future__ import annotations

__all__ = [
    "BadRedirectError",
    "BodyTooLargeError",
    "DecompressionBombError",
    "FetchProblemError",
    "TooManyRedirectsError",
]


class FetchProblemError(Exception):
    """Base of the failures a fetcher raises on purpose while fetching."""


class BodyTooLargeError(FetchProblemError):
    def __init__(self, limit: int, what: str = "body") -> None:
        self.limit = limit
        super().__init__(f"{what} exceeds the limit of {limit} bytes")


class DecompressionBombError(FetchProblemError):
    """The decoded body grew past the decoded-size limit or the ratio limit."""


class TooManyRedirectsError(FetchProblemError):
    def __init__(self, limit: int) -> None:
        super().__init__(f"more than {limit} redirects")


class BadRedirectError(FetchProblemError):
    """A redirect to something that is not an http(s) URL."""
