"""Brokers: where the pipeline's queues and shared crawl state live.

``open_broker(url)`` picks the implementation from the URL: a SQLite file
(``sqlite:///path``, or a plain path) on one machine, Redis Streams
(``redis://host:port/db``) across many.
"""

from __future__ import annotations

from pathlib import Path

from web_index._extras import lazy_names
from web_index.crawl.queues._sqlite import SqliteBroker
from web_index.crawl.queues.base import Broker, DeadLetter, Delivery, QueueCounts, backoff

__all__ = [
    "Broker",
    "DeadLetter",
    "Delivery",
    "QueueCounts",
    "RedisBroker",
    "SqliteBroker",
    "backoff",
    "open_broker",
]

__getattr__ = lazy_names(__name__, {"RedisBroker": ("web_index.crawl.queues._redis", "redis")})


def open_broker(url: str | Path, *, max_deliveries: int = 5) -> Broker:
    """The broker ``url`` names; ``ValueError`` naming the URL if it is neither form."""
    text = str(url)
    if text.startswith(("redis://", "rediss://", "unix://")):
        from web_index.crawl.queues._redis import RedisBroker

        return RedisBroker(text, max_deliveries=max_deliveries)
    if text.startswith("sqlite:"):
        text = text.removeprefix("sqlite:")
        if text.startswith("//"):
            text = text[2:]
    elif "://" in text:
        raise ValueError(f"queue URL {text!r}: use sqlite:///PATH, a file path, or redis://HOST:PORT/DB")
    if not text:
        raise ValueError("queue URL names no file: use sqlite:///PATH")
    return SqliteBroker(Path(text), max_deliveries=max_deliveries)
