"""``web-index serve``: the HTTP server over a store (and a pipeline's searchers)."""

from __future__ import annotations

import asyncio
import errno
import functools
import ipaddress
import os
import socket
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from web_index.cli._app import (
    EXIT_OK,
    EXIT_USAGE,
    AllowLoopback,
    AllowPrivate,
    StoreOption,
    app,
    cli_errors,
    fail,
    open_index,
    open_input,
    os_problem,
    read_text_input,
    say,
    store_location,
)

if TYPE_CHECKING:
    from starlette.applications import Starlette

    from web_index.archive import Collection
    from web_index.index import WebIndex

__all__ = ["serve"]

# Never an option's value: a command line is visible to every user of the machine.
_ENV = "WEB_INDEX_WRITE_TOKEN"


def _write_token(path: Path | None) -> str | None:
    """The write token: the file's content, else the environment's, stripped; an
    empty or unreadable file is a usage error."""
    if path is None:
        value = os.environ.get(_ENV, "")
        if value and not value.strip():
            raise fail(EXIT_USAGE, f"{_ENV} is blank")
        return value.strip() or None  # empty: unset, as for the options' own variables
    token = read_text_input(path, "--write-token-file").strip()
    if not token:
        raise fail(EXIT_USAGE, f"--write-token-file {path}: empty")
    return token


def _collections(
    config: Path | None, allow_loopback: bool, allow_private: bool, remote_timeout: float
) -> dict[str, Collection]:
    """The collections of ``config``, open (a mistake in it is invalid input, exit 2)."""
    if config is None:
        return {}
    open_input(config, "--config").close()  # said as every unreadable input is; load_collections reads it
    from web_index.archive import load_collections, open_collections
    from web_index.fetch import AddressPolicy

    policy = AddressPolicy(allow_loopback=allow_loopback, allow_private=allow_private)
    specs = load_collections(config)
    return open_collections(specs, address_policy=policy, remote_timeout=remote_timeout)


@app.command("serve")
def serve(
    store: StoreOption = "",
    host: Annotated[
        str, typer.Option(help="Address to listen on; anything but loopback is reachable by others.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8080,
    queue: Annotated[
        str | None,
        typer.Option(
            help="Route searches through this broker's orchestrator to its searchers"
            " (default: answer from the store's published databases).",
            show_default=False,
        ),
    ] = None,
    search_timeout: Annotated[float, typer.Option(min=0.1, help="Seconds a routed search may take.")] = 10.0,
    max_batch: Annotated[
        int, typer.Option(min=1, help="Queries (or insertion requests) a request of the JSON API may hold.")
    ] = 100_000,
    max_body: Annotated[int, typer.Option(min=1, help="Bytes a request body of the JSON API may hold.")] = (
        64 * 1024 * 1024
    ),
    max_records: Annotated[
        int, typer.Option(min=1, help="Captures GET /{coll}/wacz packages at most (a larger selection: 413).")
    ] = 10_000,
    write_token_file: Annotated[
        Path | None,
        typer.Option(
            help="A file holding the token POST /api/insert requires (Authorization: Bearer); or put"
            f" the token itself in {_ENV} (default: no /api/insert, the store opened read-only).",
            show_default=False,
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            help="A collections.yaml: more collections (stores, CDXJ + WARC folders, cdx+ and memento+"
            " archives, $live) served beside the store's (default: the store alone, as 'store').",
            show_default=False,
        ),
    ] = None,
    allow_loopback: AllowLoopback = False,
    allow_private: AllowPrivate = False,
    remote_timeout: Annotated[
        float, typer.Option(min=0.1, help="Seconds any call to a remote archive or the live web may take.")
    ] = 10.0,
    workers: Annotated[
        int,
        typer.Option(
            min=1, help="Server processes sharing the port, each with the store open: one a core to use."
        ),
    ] = 1,
    ui: Annotated[
        bool, typer.Option(help="Serve the web pages at / (a URL's history, its captures, the store).")
    ] = True,
    max_saves: Annotated[
        int,
        typer.Option(min=1, help="Saves (POST /api/save and the pages' save form) running at once, at most."),
    ] = 4,
    save_timeout: Annotated[
        float, typer.Option(min=1, help="Seconds a save may take, its page and what the page needs.")
    ] = 90.0,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            help="A name clients reach the server by (the Host header; repeat for more); any other is"
            " refused (default: on loopback, 127.0.0.1, localhost and [::1]; elsewhere, any name).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Serve the store over HTTP until SIGINT or SIGTERM (see docs/server.md, docs/ui.md).

    The web pages at /: look up a URL, see every attempt at it, failures included, and its captures
    replayed from the archive (--no-ui: the APIs alone).

    GET /search?site=&q=; the store as a web archive: /store/cdx, mementos, TimeGate, TimeMaps and
    the Resource API, and so each collection of --config; the JSON query API: POST /api/query and
    /api/presence, and POST /api/insert with a write token. With it too, POST /api/save and the pages'
    "save a page now" record a page with what it needs to render. --allow-loopback and --allow-private
    let saves, remote archives, WARC loaders and $live reach those addresses (refused by default).
    """
    from web_index.server import serve as run

    try:
        ipaddress.ip_address(host)
    except ValueError:
        if host != "localhost":
            raise fail(EXIT_USAGE, f"--host {host!r}: give an IP address (127.0.0.1, ::1, 0.0.0.0)") from None
    token = _write_token(write_token_file)
    location = store_location(store)
    build = functools.partial(
        _app, location, token, config, allow_loopback, allow_private, remote_timeout,
        queue=queue, search_timeout=search_timeout, max_batch=max_batch, max_body=max_body,
        max_records=max_records, ui=ui, max_saves=max_saves, save_timeout=save_timeout,
        save_form=workers == 1, allowed_hosts=allowed_hosts(host, allowed_host or []),
    )  # fmt: skip
    with cli_errors(location):
        # Built here first with several workers too: a mistake is said once, as a usage error,
        # before any worker starts; each worker then opens the store and builds its own.
        application, index = build()
        with index:
            _check_port(host, port)
            names = ", ".join(f"/{name}/" for name in sorted({"store", *application.state.collections}))
            via = f" (searches via {queue})" if queue else ""
            writes = ", POST /api/insert and saves open to the write token" if token else ""
            each = f", {workers} workers" if workers > 1 else ""
            url = f"http://{_host_port(host, port)}"
            say("", f"serving {location} on {url}{via}{writes}{each}; collections {names}")
            if ui:
                say("", f"open {url}/ in a browser to look around")
            if ui and token and workers > 1:  # a session and a save's progress live in one process
                say("", "the pages' save form is off with --workers > 1 (POST /api/save is not)")
            if workers == 1:
                run(application, host=host, port=port)
            else:  # its collections and searches closed as its own stop would close them
                asyncio.run(_stopped(application))
        if workers > 1:
            run(functools.partial(_worker_app, build), host=host, port=port, workers=workers)
    raise typer.Exit(EXIT_OK)


_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def allowed_hosts(host: str, given: list[str]) -> list[str] | None:
    """The names a server bound to ``host`` answers to: ``given``; else on loopback the
    loopback names (a page elsewhere that its DNS rebinds to 127.0.0.1 is refused), else
    any (``None``: a server others reach is reached by names it cannot know)."""
    if given:
        return list(given)  # as the server compares them: lower-case, port aside
    if host == "localhost":
        return list(_LOOPBACK_NAMES)
    if ipaddress.ip_address(host).is_loopback:
        return list(dict.fromkeys([*_LOOPBACK_NAMES, f"[{host}]" if ":" in host else host]))
    return None


def _check_port(host: str, port: int) -> None:
    """Refuse a port another process listens on before saying "serving": bound as
    uvicorn binds it (SO_REUSEADDR, so a port left in TIME_WAIT is free), then let go."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        # In the try: a host without IPv6 refuses the socket itself, a --host problem too.
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            probe.bind((host, port))
    except OSError as exc:
        why = (
            "is in use (another server?); give --port N"
            if exc.errno == errno.EADDRINUSE
            else f"cannot be used: {os_problem(exc)}"
        )
        raise fail(EXIT_USAGE, f"{_host_port(host, port)} {why}") from None


def _host_port(host: str, port: int) -> str:
    """``host:port`` as a URL writes it: an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _app(
    location: str,
    token: str | None,
    config: Path | None,
    allow_loopback: bool,
    allow_private: bool,
    remote_timeout: float,
    *,
    ui: bool = True,
    save_form: bool = True,
    **options: Any,
) -> tuple[Starlette, WebIndex]:
    """The app over the store at ``location`` (with the web pages, ``ui``), and the
    store, open (closed by the caller)."""
    from web_index.cli._fetch import fetch_config
    from web_index.models import Calibre
    from web_index.server import create_app
    from web_index.ui import add_ui

    index = open_index(location, None, read_only=token is None)
    try:
        collections = _collections(config, allow_loopback, allow_private, remote_timeout)
        # A save may escalate to the browser; each attempt takes a third of its time at most.
        fetch = fetch_config(
            int(Calibre.HTTP), int(Calibre.BROWSER), max_retries=1, max_attempts=4,
            timeout=min(30.0, options.get("save_timeout", 90.0) / 3), allow_loopback=allow_loopback,
            allow_private=allow_private, concurrency=8, per_domain=4,
        )  # fmt: skip
        try:
            application = create_app(
                index, write_token=token, collections=collections, fetch=fetch, **options
            )
            return (add_ui(application, save_form=save_form) if ui else application), index
        except ValueError as exc:  # a queue URL of neither form
            raise fail(EXIT_USAGE, str(exc)) from None
    except BaseException:
        index.close()
        raise


async def _stopped(application: Starlette) -> None:
    async with application.router.lifespan_context(application):
        pass


def _worker_app(build: Callable[[], tuple[Starlette, WebIndex]]) -> Starlette:
    # A worker's store stays open for the process's life: its exit releases it.
    return build()[0]
