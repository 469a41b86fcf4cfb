"""A tiny SOCKS5 proxy that applies the address policy to the browser's traffic.

Chromium resolves names and follows redirects itself, beyond the reach of
request interception (redirect hops are never routed). So each browser
context talks through this proxy: it receives host names, resolves them,
checks every address, and connects to an address that passed. Every
connection the page opens, document, redirect or subresource, is checked
(and WebRTC, which would send UDP around any proxy, is held to what the proxy
carries: ``CHROMIUM_ARGS``).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

from web_index.fetch._address import AddressPolicy, AddressRefusedError
from web_index.fetch._classify import Verdict
from web_index.models import AttemptState

__all__ = ["SocksGuard"]

_NO_AUTH = b"\x05\x00"
# SOCKS5 reply codes (RFC 1928).
_OK, _FAILURE, _NOT_ALLOWED, _HOST_UNREACHABLE, _REFUSED, _TTL_EXPIRED, _BAD_COMMAND = (
    0,
    1,
    2,
    4,
    5,
    6,
    7,
)


class SocksGuard:
    """A SOCKS5 server on 127.0.0.1 for one browser context.

    ``failures`` lists, in order, why connections were not made, so that a
    navigation the browser reports only as a proxy failure can be classified.
    """

    def __init__(self, policy: AddressPolicy, connect_timeout: float = 10.0) -> None:
        self._policy = policy
        self._connect_timeout = connect_timeout
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.failures: list[tuple[str, Verdict]] = []
        self.port = 0

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        return self.port

    @property
    def url(self) -> str:
        return f"socks5://127.0.0.1:{self.port}"

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
            self._server = None

    def _fail(self, host: str, state: AttemptState, reason: str) -> None:
        self.failures.append((host, Verdict(state, reason)))

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            await self._serve(reader, writer)
        except (OSError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        version, count = await reader.readexactly(2)
        await reader.readexactly(count)
        if version != 5:
            return
        writer.write(_NO_AUTH)
        version, command, _reserved, kind = await reader.readexactly(4)
        if kind == 1:
            host = socket.inet_ntop(socket.AF_INET, await reader.readexactly(4))
        elif kind == 4:
            host = socket.inet_ntop(socket.AF_INET6, await reader.readexactly(16))
        elif kind == 3:
            length = (await reader.readexactly(1))[0]
            host = (await reader.readexactly(length)).decode("ascii")
        else:
            return await self._reply(writer, _BAD_COMMAND)
        port = int.from_bytes(await reader.readexactly(2), "big")
        if command != 1:  # only CONNECT
            return await self._reply(writer, _BAD_COMMAND)
        try:
            addresses = await asyncio.wait_for(self._policy.resolve(host, port), self._connect_timeout)
        except AddressRefusedError as exc:
            self._fail(host, AttemptState.ERROR, str(exc))
            return await self._reply(writer, _NOT_ALLOWED)
        except socket.gaierror as exc:
            self._fail(host, AttemptState.UNREACHABLE, f"DNS lookup failed for {host}: {exc}")
            return await self._reply(writer, _HOST_UNREACHABLE)
        except TimeoutError:
            self._fail(host, AttemptState.TIMEOUT, f"resolving {host} timed out")
            return await self._reply(writer, _TTL_EXPIRED)
        upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        problem: Verdict = Verdict(AttemptState.UNREACHABLE, f"could not connect to {host}")
        for address in addresses:
            try:
                upstream = await asyncio.wait_for(
                    asyncio.open_connection(address, port), self._connect_timeout
                )
                break
            except TimeoutError:
                problem = Verdict(AttemptState.TIMEOUT, f"connecting to {host}:{port} timed out")
            except OSError as exc:
                problem = Verdict(AttemptState.UNREACHABLE, f"could not connect to {host}:{port}: {exc}")
        if upstream is None:
            self.failures.append((host, problem))
            code = _TTL_EXPIRED if problem.state is AttemptState.TIMEOUT else _REFUSED
            return await self._reply(writer, code)
        up_reader, up_writer = upstream
        self._writers.add(up_writer)
        try:
            await self._reply(writer, _OK)
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        finally:
            self._writers.discard(up_writer)
            up_writer.close()

    @staticmethod
    async def _reply(writer: asyncio.StreamWriter, code: int) -> None:
        writer.write(bytes([5, code, 0, 1, 0, 0, 0, 0, 0, 0]))
        await writer.drain()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(OSError):
            if writer.can_write_eof():
                writer.write_eof()
