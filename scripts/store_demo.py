"""Store-only demo: insert a small synthetic crawl, flush, compact, query, verify."""

from __future__ import annotations

import os
import random
from datetime import UTC, datetime, timedelta

from web_index import WebIndex
from web_index.models import AttemptMetadata, Response, SimplePageQuery, TimeAwarePageQuery

store = os.environ["WEB_INDEX_STORE"]
rng = random.Random(1)
start = datetime(2024, 8, 1, tzinfo=UTC)
urls = [f"https://site{d}.example.com/page/{p}" for d in range(20) for p in range(50)]
with WebIndex(store) as index:
    items = []
    for n in range(5000):
        url = rng.choice(urls)
        ts = start + timedelta(minutes=rng.randrange(60 * 24 * 90))
        meta = AttemptMetadata(state="success", url=url, fetcher_name="demo", fetcher_version="1", fetcher_calibre=10)
        body = f"<html><body>{url} fetched {ts.isoformat()}</body></html>".encode()
        data = [Response(url=url, request_url=url, status_code=200, headers={"content-type": "text/html"},
                         timestamp=ts, data=body, is_final=True, fetcher_name="demo", fetcher_version="1",
                         fetcher_calibre=10)]
        items.append(("get", url, ts, meta, data))
    index.insert_many(items)
    print(f"inserted {len(items)} attempts; flushed {index.flush()}; compacted {index.compact()} partitions")
    results = index.query([SimplePageQuery(url=urls[0]), TimeAwarePageQuery(url=urls[1], timestamp=start + timedelta(days=30))])
    for r in results:
        print(None if r is None else (r.url, r.timestamp.isoformat(), r.status_code, len(r.data or b"")))
    report = index.verify()
    print(f"verify: {'clean' if report.ok else report.problems}; {report.records} records in {report.files} files")
