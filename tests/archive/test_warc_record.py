"""A WARC record written as its bytes (``_warc_write.warc_record``) reads back, with
fastwarc and warcio (digests checked), exactly as fastwarc's own record of the same
fields and block: any values, line breaks in them included, any block split anyhow."""

from __future__ import annotations

import io
import re
from datetime import UTC, datetime

from fastwarc.warc import ArchiveIterator as FastIterator
from fastwarc.warc import WarcRecord, WarcRecordType
from hypothesis import given, settings
from hypothesis import strategies as st
from warcio.archiveiterator import ArchiveIterator

from web_index.archive._warc_write import warc_date, warc_record

_KINDS = {
    "response": WarcRecordType.response,
    "request": WarcRecordType.request,
    "revisit": WarcRecordType.revisit,
    "warcinfo": WarcRecordType.warcinfo,
}
_NAMES = st.sampled_from(
    ["WARC-Target-URI", "Content-Type", "WARC-Filename", "WARC-Refers-To", "WARC-Concurrent-To"]
)
# Printable text with line breaks, tabs and non-ASCII: what a stored URL or a file name could carry.
_VALUES = st.text(
    st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]) | st.sampled_from("\r\n\t"), min_size=1
)


def _fastwarc_record(kind: str, rid: str, fields: list[tuple[str, str]], block: bytes) -> bytes:
    record = WarcRecord()
    record.init_headers(_KINDS[kind], record_urn=rid.removeprefix("<urn:").removesuffix(">").encode())
    for name, value in fields:
        record.headers[name] = value
    record.set_bytes_content(block)
    out = io.BytesIO()
    record.write(out)
    return out.getvalue()


def _read(raw: bytes) -> tuple[str, dict[str, str], bytes]:
    read = []
    for record in FastIterator(io.BytesIO(raw), parse_http=False):  # its reader is good until the next
        headers = {k: v for k, v in record.headers if k not in ("WARC-Block-Digest", "Content-Length")}
        read.append((record.headers["WARC-Type"], headers, record.reader.read()))
    (one,) = read
    return one


@settings(max_examples=300, deadline=None)
@given(
    kind=st.sampled_from(sorted(_KINDS)),
    when=st.datetimes(timezones=st.just(UTC)),
    fields=st.dictionaries(_NAMES, _VALUES, max_size=5),
    parts=st.lists(st.binary(max_size=300), max_size=4),
)
def test_a_record_reads_back_as_fastwarcs_own(
    kind: str, when: datetime, fields: dict[str, str], parts: list[bytes]
) -> None:
    rid = "<urn:uuid:5f1d7c1e-2b8a-4d0e-9a57-7d3f0c6b9e21>"
    # A value that is only line breaks and blanks is dropped by fastwarc's reader: not one a record has.
    fields = {"WARC-Date": warc_date(when)} | {n: v for n, v in fields.items() if v.strip(" \t\r\n")}
    raw = warc_record(kind, rid, list(fields.items()), *parts)
    block = b"".join(parts)
    kind_read, headers, content = _read(raw)
    assert (kind_read, content) == (kind, block)
    # fastwarc drops a lone CR where this makes it a space, as it does every other line break.
    unbroken = {n: re.sub(r"[\r\n]+", " ", v) for n, v in fields.items()}
    expected = _read(_fastwarc_record(kind, rid, list(unbroken.items()), block))[1]
    assert {k: v.strip() for k, v in headers.items()} == {k: v.strip() for k, v in expected.items()}
    # Every field on one line: a value's line break never made a field of its own.
    assert len(raw.split(b"\r\n\r\n", 1)[0].split(b"\r\n")) == len(fields) + 5
    checked = []
    for record in ArchiveIterator(io.BytesIO(raw), check_digests="raise", no_record_parse=True):
        checked.append((record.rec_type, record.raw_stream.read()))  # the block digest checked at its end
    assert checked == [(kind, block)]
