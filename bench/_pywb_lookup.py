"""pywb 2.10's own CDXJ lookup, for ``lookup_bench.py``: run by pywb's interpreter
(``.pywb-venv/bin/python bench/_pywb_lookup.py < job.json > result.json``).

A lookup is what pywb's CDX server does for ``?url=U&closest=TS&limit=1`` (or, for the job's
``kind`` ``latest``, ``?url=U&sort=reverse&limit=1``) once the request is parsed: ``CDXQuery``
(the URL's SURT key range), ``FileIndexSource.load_index`` (a binary search of the sorted CDXJ
file) and ``process_cdx`` (the closest-first or reverse sort, cut at the limit).

With ``"body": true`` a lookup also loads the capture's WARC record from ``"warcs"`` (its
folder) and answers the SHA-1 of its payload.

A job is JSON: ``{"cdxj": path, "kind", "warmup": [{"url", "closest"}, ...], "queries": [...]}``; the
answer ``{"seconds": [...], "answers": [[timestamp, url] or null, ...], "peak_rss_mib": n}``.
"""

import hashlib
import io
import json
import os
import sys

from pywb.warcserver.index.cdxops import process_cdx
from pywb.warcserver.index.indexsource import FileIndexSource
from pywb.warcserver.index.query import CDXQuery
from warcio.bufferedreaders import DecompressingBufferedReader
from warcio.recordloader import ArcWarcRecordLoader

from _timed_lookups import cdx_params, timed_lookups


def main():
    job = json.load(sys.stdin)
    source = FileIndexSource(job["cdxj"])
    loader = ArcWarcRecordLoader()

    def lookup(q):
        query = CDXQuery(cdx_params(q, job["kind"]))
        for cdx in process_cdx(source.load_index(query.params), query):
            if job.get("body"):
                return [cdx["timestamp"], cdx["url"], payload_sha1(cdx)]
            return [cdx["timestamp"], cdx["url"]]
        return None

    def payload_sha1(cdx):
        """The capture's WARC record, as pywb's warcserver loads it: the file opened, its
        bytes at the offset read and inflated, the record and its HTTP head parsed."""
        with open(os.path.join(job["warcs"], cdx["filename"]), "rb") as fh:
            fh.seek(int(cdx["offset"]))
            raw = fh.read(int(cdx["length"]))
        record = loader.parse_record_stream(DecompressingBufferedReader(io.BytesIO(raw)))
        return hashlib.sha1(record.raw_stream.read()).hexdigest()

    json.dump(timed_lookups(lookup, job), sys.stdout)


if __name__ == "__main__":
    main()
