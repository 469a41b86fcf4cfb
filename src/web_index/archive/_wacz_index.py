"""A WACZ package's index: plain CDXJ while small, compressed ZipNum past that.

ReplayWeb.page (wabac.js) picks the form by the member's name. An
``indexes/*.cdx`` file is parsed whole into the browser's database when the
package is first looked into: about a millisecond a line, measured at 140 s
for 100,000 lines, where ZipNum took 2.3 s. ZipNum (``indexes/index.cdx.gz``
in blocks of ``ZIPNUM_BLOCK_LINES`` sorted lines, each block its own gzip
member, and ``indexes/index.idx`` giving each block's first key, offset and
length) is read a few blocks at a time. While the whole index fits in one
block, the plain form costs no more to read than that one block would, so a
package keeps it up to ``PLAIN_INDEX_MAX_LINES`` lines. An ``index.cdx.gz``
without its ``.idx`` is not read at all: the two go together.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import zlib
from collections.abc import Iterator
from itertools import islice

from web_index.archive._sorted_lines import SortedLines
from web_index.archive._wacz_zip import ZipOut

__all__ = ["PLAIN_INDEX_MAX_LINES", "ZIPNUM_BLOCK_LINES", "write_index"]

PLAIN_INDEX_MAX_LINES = 1024  # a package up to this many captures has a plain indexes/index.cdx
ZIPNUM_BLOCK_LINES = 1024  # lines a ZipNum block holds: py-wacz's and Browsertrix's choice

_COPY = 1 << 20


def write_index(out: ZipOut, lines: SortedLines) -> list[str]:
    """Write ``lines`` (CDXJ) into ``out`` as the package's index; returns the members written."""
    if lines.count <= PLAIN_INDEX_MAX_LINES:
        out.add("indexes/index.cdx", (line + b"\n" for line in lines.sorted()))
        return ["indexes/index.cdx"]
    with tempfile.TemporaryFile() as idx:
        idx.write(b'!meta 0 {"format": "cdxj-gzip-1.0", "filename": "index.cdx.gz"}\n')
        out.open("indexes/index.cdx.gz", stored=True)
        offset = 0
        for block in _blocks(lines.sorted(), ZIPNUM_BLOCK_LINES):
            packer = zlib.compressobj(6, zlib.DEFLATED, 31)  # a gzip member: read on its own
            packed = packer.compress(b"".join(line + b"\n" for line in block)) + packer.flush()
            # The idx key is exactly the block's first "urlkey timestamp": a reader
            # picks the block to read by it.
            key = b" ".join(block[0].split(b" ", 2)[:2])
            where = {
                "offset": offset,
                "length": len(packed),
                "digest": f"sha256:{hashlib.sha256(packed).hexdigest()}",
            }
            idx.write(key + b" " + json.dumps(where).encode() + b"\n")
            out.write(packed)
            offset += len(packed)
        out.end()
        idx.seek(0)
        out.add("indexes/index.idx", iter(lambda: idx.read(_COPY), b""))
    return ["indexes/index.cdx.gz", "indexes/index.idx"]


def _blocks(lines: Iterator[bytes], size: int) -> Iterator[list[bytes]]:
    while block := list(islice(lines, size)):
        yield block
