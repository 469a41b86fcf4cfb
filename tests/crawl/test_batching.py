"""The batcher: items added together go in one call, each caller returns once its
call has, and a failure reaches every caller whose item it carried."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import pytest

from web_index.crawl._batching import Batcher


def test_concurrent_items_share_a_call_and_wait_for_it() -> None:
    calls: list[list[int]] = []

    def record(items: Sequence[int]) -> None:
        calls.append(list(items))

    async def main() -> None:
        batcher: Batcher[int] = Batcher(record, max_items=4, max_wait=0.01)
        await asyncio.gather(*(batcher.add(i) for i in range(10)))
        assert sorted(i for call in calls for i in call) == list(range(10))  # each once, all done
        assert [len(c) for c in calls] == [4, 4, 2]  # full batches at once, the rest after max_wait
        await batcher.add(10)
        assert calls[-1] == [10]

    asyncio.run(main())


def test_a_failed_call_fails_its_callers_only() -> None:
    def fail_on_odd(items: Sequence[int]) -> None:
        if any(i % 2 for i in items):
            raise OSError(f"disk full while writing {list(items)}")

    async def main() -> None:
        batcher: Batcher[int] = Batcher(fail_on_odd, max_wait=0.01)
        results = await asyncio.gather(batcher.add(1), batcher.add(3), return_exceptions=True)
        assert all(isinstance(r, OSError) for r in results)
        await batcher.add(2)  # a later batch is not affected
        with pytest.raises(OSError, match=r"disk full while writing \[5\]"):
            await batcher.add(5)

    asyncio.run(main())


def test_items_added_during_a_call_are_not_stranded() -> None:
    calls: list[list[int]] = []

    def slow(items: Sequence[int]) -> None:
        time.sleep(0.05)
        calls.append(list(items))

    async def main() -> None:
        batcher: Batcher[int] = Batcher(slow, max_wait=0.001)
        first = asyncio.create_task(batcher.add(1))
        await asyncio.sleep(0.02)  # the call carrying 1 is under way
        await asyncio.wait_for(asyncio.gather(batcher.add(2), batcher.add(3), first), timeout=5)
        assert calls == [[1], [2, 3]]

    asyncio.run(main())
