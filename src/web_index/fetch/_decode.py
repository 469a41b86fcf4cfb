"""Content decoding (gzip, deflate) with bounded output.

httpx would decode for us, but without a bound: a few KiB of gzip can expand
to gigabytes. Here every call produces at most what the limits still allow,
and crossing a limit raises instead of allocating.
"""

from __future__ import annotations

import zlib

from web_index.fetch._errors import DecompressionBombError

__all__ = ["BoundedDecoder", "supported_encodings"]

_RATIO_FLOOR = 1024 * 1024  # below a MiB of output the ratio is not worth judging


def supported_encodings() -> str:
    """The ``Accept-Encoding`` this decoder can honour."""
    return "gzip, deflate"


class _ZlibStage:
    def __init__(self, encoding: str) -> None:
        self._encoding = encoding
        self._d: zlib._Decompress | None = None
        if encoding in ("gzip", "x-gzip"):
            self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)

    def _start(self, data: bytes) -> zlib._Decompress:
        # "deflate" is meant to be zlib-wrapped, but servers send raw deflate too.
        if len(data) >= 2 and data[0] & 0x0F == 8 and ((data[0] << 8) | data[1]) % 31 == 0:
            return zlib.decompressobj(zlib.MAX_WBITS)
        return zlib.decompressobj(-zlib.MAX_WBITS)

    def feed(self, data: bytes, budget: int) -> bytes:
        """Decode ``data``, producing at most ``budget + 1`` bytes before raising."""
        if self._d is None:
            if not data:
                return b""
            self._d = self._start(data)
        out = bytearray()
        buf = data
        while buf:
            try:
                piece = self._d.decompress(buf, budget + 1 - len(out))
            except zlib.error as exc:
                raise DecompressionBombError(f"corrupt {self._encoding} body: {exc}") from exc
            out += piece
            if len(out) > budget:
                return bytes(out)
            buf = self._d.unconsumed_tail
            if self._d.eof:
                rest = self._d.unused_data
                if self._encoding in ("gzip", "x-gzip") and rest.strip(b"\0"):
                    # Concatenated gzip members are one body (RFC 1952).
                    self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
                    buf = rest
                else:
                    break
        return bytes(out)


class BoundedDecoder:
    """Decode a body through its ``Content-Encoding`` stages within limits.

    Unknown encodings are left undecoded: the raw bytes are still the body,
    and ``undecoded`` names what was left on.
    """

    def __init__(self, content_encoding: str | None, max_bytes: int, max_ratio: float) -> None:
        codings = [c.strip().lower() for c in (content_encoding or "").split(",") if c.strip()]
        codings = [c for c in codings if c != "identity"]
        self.undecoded: str | None = None
        if any(c not in ("gzip", "x-gzip", "deflate") for c in codings):
            self.undecoded = ", ".join(codings)
            codings = []
        # Encodings apply in order, so they are undone in reverse.
        self._stages = [_ZlibStage(c) for c in reversed(codings)]
        self._max = max_bytes
        self._ratio = max_ratio
        self.consumed = 0
        self.produced = 0

    def feed(self, chunk: bytes) -> bytes:
        self.consumed += len(chunk)
        data = chunk
        # Each stage may produce no more than both limits still allow for the
        # bytes read so far: judging the ratio only after a chunk had been
        # inflated let one 64 KiB chunk of a bomb become the whole 32 MiB.
        allowed = self._max
        if self._stages:
            allowed = min(allowed, max(_RATIO_FLOOR, int(self._ratio * self.consumed)))
        for stage in self._stages:
            data = stage.feed(data, max(allowed - self.produced, 0))
        self.produced += len(data)
        if self.produced > self._max:
            raise DecompressionBombError(f"decoded body exceeds the limit of {self._max} bytes")
        if (
            self._stages
            and self.produced > _RATIO_FLOOR
            and self.produced > self._ratio * max(self.consumed, 1)
        ):
            raise DecompressionBombError(
                f"decoded body is over {self._ratio:g} times its compressed size "
                f"({self.produced} from {self.consumed} bytes)"
            )
        return data
