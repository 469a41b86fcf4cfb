"""The app: its routes, the state they share, and running it."""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable, Mapping, Sequence

import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import Route
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors import Multiprocess
from uvicorn.supervisors.multiprocess import SIGNALS as SUPERVISOR_SIGNALS

from web_index.archive import Collection
from web_index.fetch import FetchConfig
from web_index.index import WebIndex
from web_index.server import _api
from web_index.server._cdx import DEFAULT_COLLECTION, cdx
from web_index.server._errors import HANDLERS
from web_index.server._hosts import KnownHosts
from web_index.server._lookups import Lookups
from web_index.server._mementos import memento, timegate
from web_index.server._resource import resource, resource_post
from web_index.server._save import save
from web_index.server._saving import DEFAULT_MAX_SAVES, DEFAULT_SAVE_TIMEOUT, Saves
from web_index.server._search import SearchBackend, search
from web_index.server._timemaps import timemap
from web_index.server._wacz import DEFAULT_MAX_RECORDS, wacz
from web_index.server._writes import OneWriteProtocol

__all__ = ["create_app", "serve"]

_LOG = logging.getLogger("uvicorn.error")  # where uvicorn says why it could not serve


def create_app(
    index: WebIndex,
    *,
    queue: str | None = None,
    search_timeout: float = 10.0,
    refresh: float = 5.0,
    collection: str = DEFAULT_COLLECTION,
    max_batch: int = _api.DEFAULT_MAX_BATCH,
    max_body: int = _api.DEFAULT_MAX_BODY,
    max_records: int = DEFAULT_MAX_RECORDS,
    write_token: str | None = None,
    collections: Mapping[str, Collection] | None = None,
    fetch: FetchConfig | None = None,
    max_saves: int = DEFAULT_MAX_SAVES,
    save_timeout: float = DEFAULT_SAVE_TIMEOUT,
    allowed_hosts: Sequence[str] | None = None,
) -> Starlette:
    """The server's app over ``index``.

    ``GET /{collection}/cdx`` (and ``/{collection}/index``) is the CDX
    server API over the store, served as the collection named
    ``collection``, and over each of ``collections`` (a name there replaces
    the store's; see :func:`web_index.archive.open_collections`, which the
    app closes when it stops); ``/{collection}/{timestamp}id_/{url}`` its mementos,
    ``/{collection}/timegate/{url}`` and ``/{collection}/timemap/link/{url}``
    their TimeGate and TimeMap; ``GET /{collection}/resource?url=`` and
    ``POST /{collection}/resource-post`` (the request to look up as the body)
    the Resource API, a capture as one WARC record. ``GET /{collection}/wacz?url=``
    streams the store's captures that CDX query selects as a WACZ package, at
    most ``max_records`` of them (else a 413).

    ``GET /search?site=&q=`` answers from the site's newest published
    database, copied here and re-checked every ``refresh`` seconds; with
    ``queue`` (a broker URL) searches are routed by that pipeline's
    orchestrator to its searchers instead, each waiting up to
    ``search_timeout`` seconds.

    ``POST /api/query`` and ``/api/presence`` answer a JSON array or NDJSON
    of query objects with one NDJSON line each, in input order: at most
    ``max_batch`` queries and ``max_body`` bytes a request (else a 413).
    ``POST /api/insert`` stores insertion requests, all or none, under the
    same caps; it exists only with a ``write_token`` (then ``index`` must be
    writable), which requests give as ``Authorization: Bearer <token>``.
    ``POST /api/save`` too: it records a page now, with what it needs to render,
    fetched as ``fetch`` says (its address policy above all; by default loopback
    and private addresses are refused), at most ``max_saves`` at once, each for
    at most ``save_timeout`` seconds; the web pages' "save a page now" shares
    these bounds (``app.state.saves``).

    ``allowed_hosts``: the only names (``Host`` header values, port aside) it answers
    to, a 400 for any other: on loopback, the loopback names, so that a page whose
    name its DNS rebinds to 127.0.0.1 cannot read the archive or save through it
    (``web-index serve`` gives them; default: any name).
    """
    if max_batch < 1 or max_body < 1 or max_records < 1:
        raise ValueError(
            "max_batch, max_body and max_records must be at least 1,"
            f" got {max_batch}, {max_body}, {max_records}"
        )
    routes = [
        Route("/api/query", _api.query, methods=["POST"]),
        Route("/api/presence", _api.presence, methods=["POST"]),
    ]
    if write_token is not None:
        if not write_token.strip():
            raise ValueError("write_token is empty")
        if index.read_only:
            raise ValueError("a write_token needs an index opened writable, not read_only")
        routes.append(Route("/api/insert", _api.insert, methods=["POST"]))
        routes.append(Route("/api/save", save, methods=["POST"]))
    saves = (
        Saves(index, fetch or FetchConfig(), max_in_flight=max_saves, timeout=save_timeout)
        if write_token is not None
        else None
    )
    searches = SearchBackend(index, queue=queue, timeout=search_timeout, refresh=refresh)
    served = {collection: Collection.of_store(collection, index), **(collections or {})}

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            searches.close()
            if saves is not None:
                await saves.aclose()
            for each in served.values():
                await each.aclose()

    # A page elsewhere whose name its DNS turns into 127.0.0.1 (DNS rebinding) is, to the
    # browser, of the same origin as this server: a Host it does not know is refused.
    hosts = [Middleware(KnownHosts, names=allowed_hosts)] if allowed_hosts else []
    app = Starlette(
        # Tried in order: the lookups first, as no other path has two segments ending so.
        routes=[
            Route("/{coll}/cdx", cdx, methods=["GET"]),
            Route("/{coll}/resource", resource, methods=["GET"]),
            Route("/{coll}/index", cdx, methods=["GET"]),
            Route("/{coll}/wacz", wacz, methods=["GET"]),
            *routes,
            Route("/search", search, methods=["GET"]),
            Route("/{coll}/resource-post", resource_post, methods=["POST"]),
            Route("/{coll}/timegate/{url:path}", timegate, methods=["GET", "HEAD"]),
            Route("/{coll}/timemap/{form}/{url:path}", timemap, methods=["GET"]),
            Route("/{coll}/{stamp}/{url:path}", memento, methods=["GET", "HEAD"]),
        ],
        lifespan=lifespan,
        exception_handlers=HANDLERS,
        middleware=[*hosts, Middleware(Lookups, handlers={"cdx": cdx, "index": cdx, "resource": resource})],
    )
    # No 307 to "path/" for a path that matches nothing: "/api/insert/" would be
    # a memento path, so an absent /api/insert (or a mistyped /api/querry) would
    # answer a redirect, then a 405, instead of a plain 404.
    app.router.redirect_slashes = False
    app.state.searches = searches
    app.state.index = index
    app.state.collections = served
    app.state.store_collection = collection
    app.state.max_batch = max_batch
    app.state.max_body = max_body
    app.state.max_records = max_records
    app.state.write_token = None if write_token is None else write_token.strip().encode()
    app.state.saves = saves
    return app


def serve(
    app: Starlette | Callable[[], Starlette], *, host: str = "127.0.0.1", port: int = 8080, workers: int = 1
) -> None:
    """Serve ``app`` until SIGINT or SIGTERM, then return (a graceful stop is a success).

    With ``workers`` > 1, that many processes share the port, each running an
    app of its own: ``app`` is then a function of no arguments that builds it,
    which pickle can send to a new process (a module's function, or a
    ``functools.partial`` of one). A worker that dies is started again.
    """
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    if workers > 1 and isinstance(app, Starlette):
        raise ValueError("several workers need a function that builds the app, not the app")
    _more_open_files()
    if isinstance(app, Starlette):
        _settle()
    config = uvicorn.Config(
        app if isinstance(app, Starlette) else functools.partial(_settled, app),
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="on",
        workers=workers,
        factory=not isinstance(app, Starlette),
        http=OneWriteProtocol,
    )
    # uvicorn stops gracefully on these signals and then raises them again for
    # the handlers it found: these, which only note them.
    noted: list[int] = []
    previous = {
        sig: signal.signal(sig, lambda s, _f: noted.append(s)) for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        if workers == 1:
            uvicorn.Server(config).run()
        else:  # the supervisor stops every worker on either signal, then returns
            # It takes more signals (HUP restarts the workers, TTIN/TTOU add or remove one).
            taken = {sig: signal.getsignal(sig) for sig in SUPERVISOR_SIGNALS}
            shared = None if sys.platform == "linux" else config.bind_socket()
            try:
                if shared is None:
                    _SocketEach(config).run()
                else:  # only Linux spreads connections over an SO_REUSEPORT group
                    Multiprocess(config, sockets=[shared]).run()
            finally:
                if shared is not None:
                    shared.close()
                for sig, handler in taken.items():
                    signal.signal(sig, handler)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


_OPEN_FILES = 65_536


def _more_open_files() -> None:
    """Raise this process's limit of open files (its workers inherit it) to the hard limit, at
    most :data:`_OPEN_FILES`: a store keeps files open for its lookups, a share of that limit
    (``storage/backends/local.py``, ``storage/indexes/_captures.py``), and a lookup of a file
    not kept open opens it again. Most systems' soft limit is 1,024, an eighth of it 128 files:
    on the server bench's store of 5,822 files, keeping 8,192 open made a Resource answer ~7%
    cheaper in process (186-188 against 192-218 us). Both shares follow the limit as it is when
    they let a file go, so a store opened before this still gains. The limit stays raised."""
    try:
        import resource
    except ImportError:  # not Unix
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = _OPEN_FILES if hard == resource.RLIM_INFINITY else min(hard, _OPEN_FILES)
    # macOS refuses more than its kern.maxfilesperproc (10,240 by default) under an unlimited hard limit.
    for limit in (want, min(want, 10_240)):
        if soft == resource.RLIM_INFINITY or soft >= limit:
            return
        with contextlib.suppress(ValueError, OSError):  # a limit this process may not raise
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
            return


def _settled(build: Callable[[], Starlette]) -> Starlette:
    """A worker's app, built by ``build``, then :func:`_settle`."""
    app = build()
    _settle()
    return app


def _settle() -> None:
    """Set the serving process's garbage collector for a server's life, once its app is built.

    What is alive then (modules, the app, the store's indexes) lives as long as the process:
    frozen, a collection no longer walks it. A request's objects die by reference count, so
    young collections find little: one per 10,000 allocations, not 700. Measured on CDX lookups
    in process, the collector's share went from ~12 to under 1 us a request."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)


class _SocketEach(Multiprocess):
    """uvicorn's supervisor, each worker listening on a socket of its own.

    uvicorn's workers share one listening socket, and a worker woken by new
    connections accepts every one waiting: keep-alive connections opened in a
    burst all went to one worker (8 opened at once: one worker did all the
    work, the other none). Here every worker gets a socket of its own in one
    ``SO_REUSEPORT`` group, and the kernel spreads new connections over the
    group by their addresses (on Linux; elsewhere the workers share one
    socket, as uvicorn has it). A socket joins the group when its worker starts
    listening and leaves it when its worker exits; the supervisor keeps no
    copy, so no socket is left without a worker to accept from it.
    """

    def __init__(self, config: uvicorn.Config) -> None:
        try:
            self._first: socket.socket | None = _reuse_port(config.host, config.port)
        except OSError as exc:  # before any worker: as uvicorn says it with one worker
            _LOG.error(exc)
            sys.exit(STARTUP_FAILURE)
        self._address = self._first.getsockname()[:2]  # the port, when 0 was asked for
        self._handed: list[socket.socket] = []
        super().__init__(config, sockets=[])

    # uvicorn 0.54 makes each new worker with ``Process(self.config, self.sockets)``
    # and starts it at once (pinned in pyproject.toml for these internals).
    @property
    def sockets(self) -> list[socket.socket]:
        self._let_go()  # every socket handed out before is its worker's by now
        try:
            sock, self._first = self._first or _reuse_port(*self._address), None
        except OSError as exc:  # the port taken meanwhile: stop every worker, not hang
            _LOG.error(exc)
            self.should_exit.set()
            return []
        self._handed.append(sock)
        return [sock]

    @sockets.setter
    def sockets(self, _sockets: list[socket.socket]) -> None:
        pass

    def init_processes(self) -> None:
        super().init_processes()
        self._let_go()

    def keep_subprocess_alive(self) -> None:
        super().keep_subprocess_alive()
        self._let_go()

    def handle_signals(self) -> None:  # HUP and TTIN start workers too
        super().handle_signals()
        self._let_go()

    def _let_go(self) -> None:
        # A started worker holds its own copy (spawn sends it a duplicate).
        for sock in self._handed:
            sock.close()
        self._handed.clear()


def _reuse_port(host: str, port: int) -> socket.socket:
    """A socket bound to ``(host, port)`` in its ``SO_REUSEPORT`` group, not listening yet."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock
