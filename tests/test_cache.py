"""The read-through cache of an S3 store: hits, negative entries, eviction, invalidation."""

from __future__ import annotations

from datetime import timedelta

from tests.factories import T0, attempt
from tests.servers import SeaweedFS
from web_index import FlushPolicy, WebIndex
from web_index.models import PageKey, SimplePageQuery
from web_index.storage.backends import CacheConfig, CachingBackend


def backend(index: WebIndex) -> CachingBackend:
    b = index._store.backend
    assert isinstance(b, CachingBackend)
    return b


def fill(index: WebIndex, n: int) -> list[PageKey]:
    return [
        index.insert(*attempt(f"https://h{i % 4}.site{i % 3}.org/p{i}", T0 + timedelta(days=i % 45)))
        for i in range(n)
    ]


def test_warm_batch_costs_no_requests(seaweed: SeaweedFS) -> None:
    loc = seaweed.new_store()
    with WebIndex(loc, policy=FlushPolicy(max_rows=10, compact_parts=0)) as w:
        keys = fill(w, 40)
        w.flush()
        w.compact()
    with WebIndex(loc, read_only=True) as r:
        b = backend(r)
        assert [x is not None for x in r.query(keys)] == [True] * len(keys)
        cold = b.stats()
        assert cold.store_requests > 0 and cold.misses > 0
        assert [x is not None for x in r.query(keys)] == [True] * len(keys)
        warm = b.stats()
        assert warm.store_requests == cold.store_requests
        assert warm.hits > cold.hits
        st = r.stats()
        assert st.cache is not None and st.cache.hits >= warm.hits


def test_negative_entries_never_evict_hits(seaweed: SeaweedFS) -> None:
    loc = seaweed.new_store()
    with WebIndex(loc, policy=FlushPolicy(max_rows=10, compact_parts=0)) as w:
        keys = fill(w, 10)
        w.flush()
        w.compact()  # month indexes too: a store without them probes for them (negatives)
    with WebIndex(loc, read_only=True, cache=CacheConfig(negative_entries=3)) as r:
        b = backend(r)
        r.query(keys)
        misses = [
            SimplePageQuery(url=f"https://nowhere{i}.example.net/", type="get-metadata") for i in range(20)
        ]
        assert r.query(misses) == [None] * 20
        positive = b.stats().entries
        # Many months that do not exist.
        for i in range(1, 13):
            b.list_files(f"get/1999/{i:02d}")
        s = b.stats()
        assert s.negative_evictions > 0
        assert s.entries == positive  # the misses went to the negative LRU only
        before = s.store_requests
        r.query(keys)
        assert b.stats().store_requests == before


def test_byte_bound_evicts_and_stays_correct(seaweed: SeaweedFS) -> None:
    loc = seaweed.new_store()
    with WebIndex(loc, policy=FlushPolicy(max_rows=3, compact_parts=0)) as w:
        keys = fill(w, 60)
        w.flush()
    with WebIndex(loc, read_only=True, cache=CacheConfig(max_bytes=150_000)) as r:
        for _ in range(2):
            assert all(x is not None for x in r.query(keys))
        s = backend(r).stats()
        assert s.evictions > 0 and s.bytes <= 150_000


def test_writer_sees_its_own_flush_and_compaction_at_once(seaweed: SeaweedFS) -> None:
    loc = seaweed.new_store()
    with WebIndex(
        loc, policy=FlushPolicy(max_rows=10**6, compact_parts=0), cache=CacheConfig(ttl_s=3600)
    ) as w:
        keys = fill(w, 12)
        assert all(x is not None for x in w.query(keys))  # from the buffer; listings cached (empty)
        w.flush()  # rows leave the buffer: the cached listings must not hide the new parts
        assert all(x is not None for x in w.query(keys))
        w.compact()
        assert all(x is not None for x in w.query(keys))
        assert backend(w).stats().invalidations > 0


def test_other_process_flush_seen_at_once_despite_ttl(seaweed: SeaweedFS) -> None:
    loc = seaweed.new_store()
    with (
        WebIndex(loc, policy=FlushPolicy(max_rows=10**6, compact_parts=0)) as w,
        WebIndex(loc, read_only=True, cache=CacheConfig(ttl_s=3600)) as r,
    ):
        keys = fill(w, 12)
        assert all(x is not None for x in r.query(keys))  # listings of the reader now cached
        w.flush()  # another handle (another cache) moves the rows to parts
        assert all(x is not None for x in r.query(keys))  # the buffer generation changed
        w.compact()  # parts replaced: the reader's cached footers point at deleted objects
        more = fill(w, 4)
        w.flush()
        assert all(x is not None for x in r.query(keys + more))


def test_a_footer_kept_counts_the_memory_it_holds(seaweed: SeaweedFS) -> None:
    """A parsed footer holds ~16 times its bytes in the file: the cache's bound counts that,
    so that a bound of 256 MiB is not gigabytes of footers."""
    import pyarrow as pa

    from web_index.storage.backends import S3Backend
    from web_index.storage.backends.base import footer_memory, sealed_bytes

    cache = CachingBackend(S3Backend(seaweed.new_store()))
    # Many row groups make a footer of ~40 KB, more than the tail read with it.
    table = pa.table({"url_key": [f"k{i:05d}" for i in range(400)], "n": list(range(400))})
    cache.write_bytes("get/2024/01/a.example.parquet", bytes(sealed_bytes(table, row_group_size=2)))
    handle = cache.open_parquet("get/2024/01/a.example.parquet")
    assert handle.read().equals(table)
    meta = handle.metadata
    assert cache.stats().bytes >= footer_memory(meta)
