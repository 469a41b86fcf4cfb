"""Exceptions raised by web-index.

Every error names what was wrong and where, so that a caller can fix the input
without reading the source.
"""

from __future__ import annotations

__all__ = [
    "ClusterError",
    "ConflictError",
    "CorruptFileError",
    "InvalidRecordError",
    "InvalidURLError",
    "MissingExtraError",
    "SearchError",
    "SearchQueryError",
    "SearchUnavailableError",
    "SiteNotFoundError",
    "StoreError",
    "WaczError",
    "WarcError",
    "WebIndexError",
]


class WebIndexError(Exception):
    """Base class of every error web-index raises on purpose."""

    def __reduce__(self) -> tuple[object, ...]:
        # Pickled as it is, not by calling __init__ again with ``args`` (which most subclasses
        # do not take): a Dask worker's error reaches the client whole.
        return (_rebuilt, (type(self), self.args, dict(self.__dict__)))


def _rebuilt(cls: type[WebIndexError], args: tuple[object, ...], state: dict[str, object]) -> WebIndexError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


class InvalidRecordError(WebIndexError, ValueError):
    """A record, query or insertion request broke a rule of the standard.

    ``field`` names the offending field (dotted path, e.g. ``data[1].is_final``).
    """

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")


class InvalidURLError(InvalidRecordError):
    """A URL could not be parsed or is not an absolute http(s) URL."""

    def __init__(self, url: str, problem: str, field: str = "url") -> None:
        self.url = url
        super().__init__(field, f"{problem} (got {url!r})")


class StoreError(WebIndexError):
    """The store could not be read or written (I/O, permissions, missing store)."""


class CorruptFileError(StoreError):
    """A file in the store is unreadable or breaks the store's invariants."""

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}")


class ConflictError(StoreError):
    """A conditional write lost to another writer: the object exists already,
    or changed since it was read (S3's ``412 Precondition Failed``)."""


class MissingExtraError(WebIndexError, ImportError):
    """A part of web-index that needs an optional extra was used without it:
    ``s3`` (``s3://`` stores), ``postgres`` (a shared buffer) or ``browser``
    (the Chromium fetcher). The message gives the ``pip install`` line."""


class ClusterError(WebIndexError):
    """The Dask cluster a batch or a compaction was sent to (``scheduler=``) could
    not be reached, or a task of it killed its workers again and again."""


class WarcError(InvalidRecordError):
    """A WARC record or file that is not whole WARC, named by file and byte
    offset (``.path``, ``.offset``; ``.field`` is ``"<path>@<offset>"``)."""

    def __init__(self, path: str, offset: int, problem: str) -> None:
        self.path = path
        self.offset = offset
        super().__init__(f"{path}@{offset}", problem)


class WaczError(InvalidRecordError):
    """A WACZ package that cannot be imported as it is: not a ZIP file, no
    ``datapackage.json``, a member missing, unsafe or not matching its hash
    (``.path``; ``.member``, the member's name in the ZIP, when one is to blame)."""

    def __init__(self, path: str, problem: str, member: str | None = None) -> None:
        self.path = path
        self.member = member
        super().__init__(path if member is None else f"{path}!{member}", problem)


class SearchError(WebIndexError):
    """A search pack or query could not be used: not a pack, corrupt, or an empty query."""


class SearchQueryError(SearchError):
    """A search query that cannot be run: no word to search for, or over its limits."""


class SiteNotFoundError(SearchError):
    """No search database is published for the site (it was never crawled)."""


class SearchUnavailableError(SearchError):
    """A routed search had no answer in time: no searcher (or no orchestrator)
    is up to serve the site. Worth retrying, unlike its parent."""
