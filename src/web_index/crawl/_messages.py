"""The pipeline's messages: the seed's vocabulary, one typed struct per ``type``.

Every message is a JSON object whose ``type`` names it; msgspec decodes the
tagged union straight into the struct, so a worker never handles a dict whose
shape it has to guess. Anything that does not decode into one of these is a
:class:`MessageError` and goes to the dead-letter queue with its reason.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from web_index.errors import WebIndexError
from web_index.search import MAX_LIMIT, MAX_OFFSET, SearchPage

__all__ = [
    "CALLBACKS",
    "MESSAGES",
    "CrawlSpec",
    "Drop",
    "FullEnd",
    "Heartbeat",
    "IncrementalEnd",
    "Index",
    "IndexCrawl",
    "Load",
    "Message",
    "MessageError",
    "PackFull",
    "PackIncremental",
    "Register",
    "ResetTimer",
    "Results",
    "Scope",
    "Search",
    "StartTimer",
    "Update",
    "decode",
    "encode",
]

Scope = Literal["host", "domain", "prefix", "allow"]
_Count = Annotated[int, msgspec.Meta(ge=1)]
_Depth = Annotated[int, msgspec.Meta(ge=0)]
_Seconds = Annotated[float, msgspec.Meta(gt=0)]
_NonEmpty = Annotated[str, msgspec.Meta(min_length=1, max_length=2048)]
_ReplyQueue = Annotated[str, msgspec.Meta(pattern=r"^reply\.[A-Za-z0-9_-]{1,64}$")]


class MessageError(WebIndexError, ValueError):
    """A message that is not one of the pipeline's: malformed JSON, an unknown
    ``type``, a missing or ill-typed field. The text says which."""


class CrawlSpec(msgspec.Struct, frozen=True, kw_only=True):
    """What a crawl may follow, kept by the broker under ``id`` for every
    worker that handles one of its ``crawl`` messages."""

    id: _NonEmpty
    seed: _NonEmpty
    scope: Scope = "host"
    allow: tuple[str, ...] = ()
    max_pages: _Count = 1000
    max_depth: _Depth = 5
    settle: _Seconds = 300.0
    requisites: bool = False  # also what each page needs to render (wget's --page-requisites)
    max_requisites: _Count = 10_000


class IndexCrawl(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="index+crawl"):
    """A client asks for a whole site: index the seed and crawl from it."""

    site: _NonEmpty
    spec: CrawlSpec


class Index(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="index"):
    """Fetch one page, keep its text, tell the timer the site is busy. A
    ``requisite`` (a stylesheet, image, script... a page needs) is recorded
    only: no text, no links followed (a stylesheet's own requisites are)."""

    site: _NonEmpty
    url: _NonEmpty
    crawl: str | None = None
    depth: _Depth = 0
    requisite: bool = False


class Crawl(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="crawl"):
    """Find a page's links and post ``index`` and ``crawl`` for the new in-scope ones."""

    site: _NonEmpty
    url: _NonEmpty
    crawl: _NonEmpty
    depth: _Depth = 0


class IncrementalEnd(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="incremental_end"):
    """A site's incremental timer ran out: a packer runs ``pack_incremental``."""

    site: _NonEmpty


class FullEnd(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="full_end"):
    """A site's crawl settled: a packer runs ``pack_full``."""

    site: _NonEmpty
    crawl: str | None = None


class PackIncremental(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="pack_incremental"):
    site: _NonEmpty


class PackFull(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="pack_full"):
    site: _NonEmpty


Callback = IncrementalEnd | FullEnd | PackIncremental | PackFull


class StartTimer(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="start_timer"):
    """Start (or restart, replacing its callback) the site's timer."""

    site: _NonEmpty
    timeout: _Seconds
    callback_msg: Callback
    callback_queue: _NonEmpty = "pack"


class ResetTimer(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="reset_timer"):
    """Put the site's timer back to its full timeout; with none running, start
    one that ends in ``incremental_end`` after ``timeout``."""

    site: _NonEmpty
    timeout: _Seconds = 300.0
    callback_queue: _NonEmpty = "pack"


class Update(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="update"):
    """A packer published generation ``generation`` of a site's database;
    ``size_mb`` is its size decompressed, the room a searcher needs for it."""

    site: _NonEmpty
    generation: _Depth
    size_mb: Annotated[float, msgspec.Meta(ge=0)] = 0.0
    pages: _Depth = 0


class Register(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="register"):
    """A searcher is up, with ``free_mb`` MB (rounded down) for databases."""

    searcher: _NonEmpty
    free_mb: _Depth


class Heartbeat(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="heartbeat"):
    """A searcher is still up; what it holds, so a restarted orchestrator relearns it."""

    searcher: _NonEmpty
    free_mb: _Depth
    sites: dict[str, int] = {}


class Load(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="load"):
    """Orchestrator to one searcher: fetch (or reload) a site's database."""

    searcher: _NonEmpty
    site: _NonEmpty
    generation: _Depth


class Drop(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="drop"):
    """Orchestrator to one searcher: stop serving a site and delete its copy."""

    searcher: _NonEmpty
    site: _NonEmpty


class Search(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="search"):
    """A client's search, sent to the orchestrator, which routes it to a searcher
    holding the site. The answer is a ``results`` message on ``reply_to``;
    past ``deadline`` (epoch seconds) nobody waits for it, and it is dropped."""

    id: _NonEmpty
    site: _NonEmpty
    query: Annotated[str, msgspec.Meta(max_length=2048)]
    limit: Annotated[int, msgspec.Meta(ge=1, le=MAX_LIMIT)] = 10
    offset: Annotated[int, msgspec.Meta(ge=0, le=MAX_OFFSET)] = 0
    reply_to: _ReplyQueue
    deadline: float


ErrorKind = Literal["not_found", "query", "unavailable", "failed"]


class Results(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", tag="results"):
    """The answer to search ``id``: a page of hits, or why there is none
    (``error``) and what kind of why: ``not_found`` (no database is published
    for the site), ``query`` (the query cannot be run), ``unavailable`` (no
    searcher can serve it now) or ``failed``."""

    id: _NonEmpty
    site: _NonEmpty
    searcher: str | None = None
    page: SearchPage | None = None
    error: str | None = None
    kind: ErrorKind | None = None


Message = (
    IndexCrawl
    | Index
    | Crawl
    | StartTimer
    | ResetTimer
    | IncrementalEnd
    | FullEnd
    | PackIncremental
    | PackFull
    | Update
    | Register
    | Heartbeat
    | Load
    | Drop
    | Search
    | Results
)

MESSAGES: tuple[type[msgspec.Struct], ...] = (
    IndexCrawl,
    Index,
    Crawl,
    StartTimer,
    ResetTimer,
    IncrementalEnd,
    FullEnd,
    PackIncremental,
    PackFull,
    Update,
    Register,
    Heartbeat,
    Load,
    Drop,
    Search,
    Results,
)
CALLBACKS: tuple[type[msgspec.Struct], ...] = (IncrementalEnd, FullEnd, PackIncremental, PackFull)

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Message)


def encode(message: Message) -> bytes:
    """The message as its JSON wire form."""
    return _encoder.encode(message)


def decode(data: bytes | str) -> Message:
    """The message ``data`` holds, or :class:`MessageError` saying what is wrong."""
    try:
        message: Message = _decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise MessageError(f"not a pipeline message: {exc}") from None
    return message
