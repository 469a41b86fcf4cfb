"""pywb 2.10's own CDXJ lookup, for ``lookup_bench.py``: run by pywb's interpreter
(``.pywb-venv/bin/python bench/_pywb_lookup.py < job.json > result.json``).

A lookup is what pywb's CDX server does for ``?url=U&closest=TS&limit=1`` (or, for the job's
``kind`` ``latest``, ``?url=U&sort=reverse&limit=1``) once the request is parsed: ``CDXQuery``
(the URL's SURT key range), ``FileIndexSource.load_index`` (a binary search of the sorted CDXJ
file) and ``process_cdx`` (the closest-first or reverse sort, cut at the limit).

A job is JSON: ``{"cdxj": path, "kind", "warmup": [{"url", "closest"}, ...], "queries": [...]}``; the
answer ``{"seconds": [...], "answers": [[timestamp, url] or null, ...], "peak_rss_mib": n}``.
"""

import json
import sys

from pywb.warcserver.index.cdxops import process_cdx
from pywb.warcserver.index.indexsource import FileIndexSource
from pywb.warcserver.index.query import CDXQuery

from _timed_lookups import cdx_params, timed_lookups


def main():
    job = json.load(sys.stdin)
    source = FileIndexSource(job["cdxj"])

    def lookup(q):
        query = CDXQuery(cdx_params(q, job["kind"]))
        for cdx in process_cdx(source.load_index(query.params), query):
            return [cdx["timestamp"], cdx["url"]]
        return None

    json.dump(timed_lookups(lookup, job), sys.stdout)


if __name__ == "__main__":
    main()
