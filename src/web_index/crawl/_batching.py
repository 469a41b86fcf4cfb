"""Coalescing many small broker calls into one.

A page costs a worker a few broker steps (acknowledge it, post what follows
it); made one at a time by a hundred concurrent handlers, each is a
transaction and a thread hop of its own, and they queue behind each other.
A :class:`Batcher` gathers the items that arrive within ``max_wait`` seconds
(or ``max_items`` of them) into one call, and each caller returns once the
call that carried its item has returned (or raises what it raised), so
nothing is taken as done before it is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

__all__ = ["Batcher"]

T = TypeVar("T")


class Batcher(Generic[T]):
    """Calls ``fn(items)`` in a thread for the items added together."""

    def __init__(self, fn: Callable[[Sequence[T]], object], *, max_items: int = 256, max_wait: float = 0.002):
        self.fn = fn
        self.max_items = max_items
        self.max_wait = max_wait
        self._items: list[tuple[T, asyncio.Future[None]]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def add(self, item: T) -> None:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._items.append((item, done))
        if len(self._items) >= self.max_items:
            await self._flush()
        elif self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_soon())
        await done

    async def _flush_soon(self) -> None:
        # Until none is left: items added while a call is under way have no
        # flusher of their own (this one was still running when they came).
        while self._items:
            await asyncio.sleep(self.max_wait)
            await self._flush()

    async def _flush(self) -> None:
        batch, self._items = self._items, []
        if not batch:
            return
        try:
            await asyncio.to_thread(self.fn, [item for item, _ in batch])
        except Exception as exc:
            for _, done in batch:
                if not done.done():
                    done.set_exception(exc)
        else:
            for _, done in batch:
                if not done.done():
                    done.set_result(None)
