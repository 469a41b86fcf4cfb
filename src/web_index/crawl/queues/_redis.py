"""The broker for many machines: Redis Streams with one consumer group per queue.

A queue is a stream read by the group ``workers``; a delivery is an entry in
the group's pending list, and a lease is its idle time: a consumer that dies
or hangs past the receiver's ``lease`` has its entries taken over by the next
receiver (XAUTOCLAIM). Retry delays live in a sorted set beside the stream
and are moved into it when due. Anything that must not half happen (a timer
firing, a message buried, the seen-set's page cap) is one Lua script, so it
runs atomically on the server, on the server's clock.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qs, urlsplit

from web_index._extras import import_extra
from web_index.crawl.queues.base import DeadLetter, Delivery, QueueCounts, backoff, check_bodies

__all__ = ["RedisBroker"]

_GROUP = "workers"

# A delayed message is a member of a sorted set (score: when it is due) and
# three fields of a hash beside it: <id>:b body, <id>:n deliveries so far, <id>:e last error.

# KEYS: delayed zset, delayed hash, stream. Moves due delayed messages into the stream.
_PROMOTE = """
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ms, 'LIMIT', 0, 500)
for _, m in ipairs(due) do
  local f = redis.call('HMGET', KEYS[2], m .. ':b', m .. ':n', m .. ':e')
  redis.call('XADD', KEYS[3], '*', 'b', f[1], 'n', f[2], 'e', f[3])
  redis.call('HDEL', KEYS[2], m .. ':b', m .. ':n', m .. ':e')
  redis.call('ZREM', KEYS[1], m)
end
return #due
"""

# KEYS: delayed zset, delayed hash. ARGV: id, delay ms, body, deliveries, error.
_DELAY = """
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('HSET', KEYS[2], ARGV[1] .. ':b', ARGV[3], ARGV[1] .. ':n', ARGV[4], ARGV[1] .. ':e', ARGV[5])
redis.call('ZADD', KEYS[1], ms + tonumber(ARGV[2]), ARGV[1])
"""

# KEYS: stream, delayed zset, dead stream, delayed hash.
# ARGV: id, owner, action, reason, delay ms, deliveries, new delayed id, times delivered.
# action: ack | retry | bury | extend. Acts only while ``owner`` still holds the entry from the
# same delivery (a consumer may have been handed its own stalled entry again).
_SETTLE = """
local p = redis.call('XPENDING', KEYS[1], 'workers', ARGV[1], ARGV[1], 1)
if #p == 0 or p[1][2] ~= ARGV[2] or tonumber(p[1][4]) ~= tonumber(ARGV[8]) then return 0 end
local action = ARGV[3]
if action == 'extend' then
  redis.call('XCLAIM', KEYS[1], 'workers', ARGV[2], 0, ARGV[1], 'JUSTID')
  return 1
end
if action == 'retry' then
  local e = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
  local body = ''
  if #e > 0 then
    local f = e[1][2]
    for i = 1, #f, 2 do if f[i] == 'b' then body = f[i + 1] end end
  end
  local now = redis.call('TIME')
  local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
  local m = ARGV[7]
  redis.call('HSET', KEYS[4], m .. ':b', body, m .. ':n', ARGV[6], m .. ':e', ARGV[4])
  redis.call('ZADD', KEYS[2], ms + tonumber(ARGV[5]), m)
elseif action == 'bury' then
  local e = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
  if #e > 0 then
    local f = e[1][2]
    local body = ''
    for i = 1, #f, 2 do if f[i] == 'b' then body = f[i + 1] end end
    local now = redis.call('TIME')
    redis.call('XADD', KEYS[3], '*', 'id', ARGV[1], 'b', body, 'reason', ARGV[4],
               'deliveries', ARGV[6], 'died', now[1] .. '.' .. string.format('%06d', tonumber(now[2])))
  end
end
redis.call('XACK', KEYS[1], 'workers', ARGV[1])
redis.call('XDEL', KEYS[1], ARGV[1])
return 1
"""

# KEYS: seen set. ARGV: max pages, urls... Returns 1/0 per url.
_ADD_SEEN = """
local count = redis.call('SCARD', KEYS[1])
local n = tonumber(ARGV[2])
local out = {}
for i = 1, n do
  if count >= tonumber(ARGV[1]) then out[#out + 1] = 0
  else
    local new = redis.call('SADD', KEYS[1], ARGV[2 + i])
    count = count + new
    out[#out + 1] = new
    if new == 1 and #KEYS > 1 then
      redis.call('XADD', KEYS[2], '*', 'b', ARGV[2 + n + i], 'n', 0, 'e', '')
    end
  end
end
return out
"""

# KEYS: the key's next free start (ms). ARGV: interval ms. Returns ms to wait.
_RESERVE_TURN = """
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local start = math.max(ms, tonumber(redis.call('GET', KEYS[1]) or '0'))
redis.call('SET', KEYS[1], start + tonumber(ARGV[1]), 'PX', start - ms + tonumber(ARGV[1]) + 60000)
return start - ms
"""

# A timer: its deadline in a sorted set, and <site>:t timeout (ms), <site>:q queue,
# <site>:c callback in a hash.
# KEYS: deadlines zset, timer hash. ARGV: site, timeout ms, queue, callback, mode (start|reset).
_SET_TIMER = """
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local site = ARGV[1]
if ARGV[5] == 'reset' then
  local held = redis.call('HGET', KEYS[2], site .. ':t')
  if held then
    redis.call('ZADD', KEYS[1], ms + tonumber(held), site)
    return 1
  end
end
redis.call('HSET', KEYS[2], site .. ':t', ARGV[2], site .. ':q', ARGV[3], site .. ':c', ARGV[4])
redis.call('ZADD', KEYS[1], ms + tonumber(ARGV[2]), site)
return 0
"""

# KEYS: deadlines zset, timer hash. ARGV: stream key prefix, limit.
_FIRE = """
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ms, 'LIMIT', 0, tonumber(ARGV[2]))
for _, site in ipairs(due) do
  local t = redis.call('HMGET', KEYS[2], site .. ':q', site .. ':c')
  redis.call('XADD', ARGV[1] .. t[1], '*', 'b', t[2], 'n', 0, 'e', '')
  redis.call('ZREM', KEYS[1], site)
  redis.call('HDEL', KEYS[2], site .. ':t', site .. ':q', site .. ':c')
end
return due
"""


class RedisBroker:
    """Queues and crawl state in Redis at ``url`` (``redis://host:port/db``;
    ``?prefix=`` namespaces every key, default ``web-index``)."""

    def __init__(self, url: str, *, max_deliveries: int = 5, consumer: str | None = None) -> None:
        if max_deliveries < 1:
            raise ValueError("max_deliveries must be >= 1")
        redis = import_extra("redis", "redis")
        query = parse_qs(urlsplit(url).query)
        self._prefix = (query.get("prefix") or ["web-index"])[0]
        plain = url.split("?", 1)[0]
        self._url = url
        self._r: Any = redis.Redis.from_url(plain, socket_timeout=30, health_check_interval=15)
        self._max_deliveries = max_deliveries
        self._consumer = consumer or uuid.uuid4().hex
        self._groups: set[str] = set()
        self._promote = self._r.register_script(_PROMOTE)
        self._delay = self._r.register_script(_DELAY)
        self._settle = self._r.register_script(_SETTLE)
        self._add_seen = self._r.register_script(_ADD_SEEN)
        self._reserve_turn = self._r.register_script(_RESERVE_TURN)
        self._set_timer = self._r.register_script(_SET_TIMER)
        self._fire = self._r.register_script(_FIRE)
        self._r.ping()

    @property
    def url(self) -> str:
        return self._url

    @property
    def max_deliveries(self) -> int:
        return self._max_deliveries

    def _key(self, kind: str, name: str = "") -> str:
        return f"{self._prefix}:{kind}:{name}"

    def _stream(self, queue: str) -> str:
        key = self._key("q", queue)
        if queue not in self._groups:
            try:
                # id 0: messages sent before any consumer existed are delivered too
                self._r.xgroup_create(key, _GROUP, id="0", mkstream=True)
            except Exception as exc:
                if "BUSYGROUP" not in str(exc):
                    raise
            self._groups.add(queue)
        return key

    # --- queues -------------------------------------------------------------
    def send(self, queue: str, bodies: Sequence[bytes], *, delay: float = 0.0) -> None:
        stream = self._stream(queue)
        pipe = self._r.pipeline(transaction=True)
        for body in bodies:
            if delay > 0:
                keys = [self._key("d", queue), self._key("dh", queue)]
                self._delay(
                    keys=keys, args=[uuid.uuid4().hex, int(delay * 1000), bytes(body), 0, ""], client=pipe
                )
            else:
                pipe.xadd(stream, {"b": bytes(body), "n": 0, "e": ""})
        pipe.execute()

    def receive(
        self, queue: str, *, limit: int = 1, lease: float = 60.0, wait: float = 0.0
    ) -> list[Delivery]:
        if limit < 1 or lease <= 0:
            raise ValueError("limit must be >= 1 and lease > 0")
        stream = self._stream(queue)
        give_up = time.monotonic() + max(0.0, wait)
        while True:
            self._promote(keys=[self._key("d", queue), self._key("dh", queue), stream])
            entries = self._claim_stalled(stream, limit, lease)
            if len(entries) < limit:
                left = give_up - time.monotonic()
                block = int(min(left, 0.25) * 1000) if left > 0.001 and not entries else None
                got = self._r.xreadgroup(
                    _GROUP, self._consumer, {stream: ">"}, count=limit - len(entries), block=block
                )
                for _, items in got or []:
                    entries.extend(items)
            out = self._deliveries(queue, stream, entries)
            if out or time.monotonic() >= give_up:
                return out

    def _claim_stalled(self, stream: str, limit: int, lease: float) -> list[Any]:
        reply = self._r.xautoclaim(stream, _GROUP, self._consumer, int(lease * 1000), "0-0", count=limit)
        claimed, gone = reply[1], reply[2] if len(reply) > 2 else []
        if gone:  # pending entries whose message was deleted: nothing to deliver
            self._r.xack(stream, _GROUP, *gone)
        return [e for e in claimed if e[1]]

    def _deliveries(self, queue: str, stream: str, entries: list[Any]) -> list[Delivery]:
        out: list[Delivery] = []
        for entry_id, fields in entries:
            mid = _text(entry_id)
            pending = self._r.xpending_range(stream, _GROUP, mid, mid, 1)
            times = int(pending[0]["times_delivered"]) if pending else 1
            deliveries = int(fields.get(b"n", 0)) + times
            token = f"{self._consumer}/{times}"
            delivery = Delivery(queue, mid, bytes(fields.get(b"b", b"")), deliveries, token)
            if deliveries > self._max_deliveries:
                last = _text(fields.get(b"e", b""))
                self._bury(delivery, _exhausted(deliveries - 1, last))
                continue
            out.append(delivery)
        return out

    def _run_settle(
        self, d: Delivery, action: str, reason: str, delay_ms: int = 0, client: Any = None
    ) -> None:
        keys = [
            self._stream(d.queue),
            self._key("d", d.queue),
            self._key("dead", d.queue),
            self._key("dh", d.queue),
        ]
        owner, _, times = d.lease_token.rpartition("/")
        args = [d.id, owner, action, reason, delay_ms, d.deliveries, uuid.uuid4().hex, times]
        self._settle(keys=keys, args=args, client=client)

    def _bury(self, delivery: Delivery, reason: str) -> None:
        self._run_settle(delivery, "bury", reason)

    def ack(self, delivery: Delivery) -> None:
        self._run_settle(delivery, "ack", "")

    def ack_many(self, deliveries: Sequence[Delivery]) -> None:
        pipe = self._r.pipeline(transaction=False)  # one round trip; each settle is atomic itself
        for delivery in deliveries:
            self._run_settle(delivery, "ack", "", client=pipe)
        pipe.execute()

    def extend(self, delivery: Delivery, lease: float) -> None:
        # Resetting the idle time restarts the lease as receivers measure it
        # (JUSTID: without counting a delivery).
        self._run_settle(delivery, "extend", "")

    def release(self, delivery: Delivery, reason: str, *, delay: float | None = None) -> None:
        if delivery.deliveries >= self._max_deliveries:
            self._bury(delivery, _exhausted(delivery.deliveries, reason))
            return
        wait = backoff(delivery.deliveries) if delay is None else max(0.0, delay)
        self._run_settle(delivery, "retry", reason, int(wait * 1000))

    def dead_letter(self, delivery: Delivery, reason: str) -> None:
        self._bury(delivery, reason)

    def dead_letters(self, queue: str, limit: int = 100) -> list[DeadLetter]:
        rows = self._r.xrange(self._key("dead", queue), count=limit)
        return [
            DeadLetter(
                queue,
                _text(f[b"id"]),
                bytes(f[b"b"]),
                _text(f[b"reason"]),
                int(f[b"deliveries"]),
                float(f[b"died"]),
            )
            for _, f in rows
        ]

    def counts(self, queue: str) -> QueueCounts:
        stream = self._stream(queue)
        pipe = self._r.pipeline(transaction=True)
        pipe.xlen(stream)
        pipe.xpending(stream, _GROUP)
        pipe.zcard(self._key("d", queue))
        pipe.xlen(self._key("dead", queue))
        length, pending, delayed, dead = pipe.execute()
        leased = int(pending["pending"])
        return QueueCounts(int(length) - leased + int(delayed), leased, int(dead))

    def forget(self, queue: str) -> None:
        names = ("q", "d", "dh", "dead")
        self._r.delete(*(self._key(kind, queue) for kind in names))
        self._groups.discard(queue)

    # --- crawl state ----------------------------------------------------------
    def put_crawl(self, crawl: str, spec: bytes) -> bool:
        return bool(self._r.set(self._key("crawl", crawl), spec, nx=True))

    def get_crawl(self, crawl: str) -> bytes | None:
        value = self._r.get(self._key("crawl", crawl))
        return None if value is None else bytes(value)

    def add_seen(
        self,
        crawl: str,
        urls: Sequence[str],
        *,
        max_pages: int,
        queue: str | None = None,
        bodies: Sequence[bytes] = (),
    ) -> list[bool]:
        check_bodies(urls, queue, bodies)
        if not urls:
            return []
        keys = [self._key("seen", crawl)]
        if queue is not None:
            keys.append(self._stream(queue))
        got = self._add_seen(keys=keys, args=[max_pages, len(urls), *urls, *map(bytes, bodies)])
        return [bool(x) for x in got]

    def seen_count(self, crawl: str) -> int:
        return int(self._r.scard(self._key("seen", crawl)))

    def reserve_turn(self, key: str, interval: float) -> float:
        waited = self._reserve_turn(keys=[self._key("turn", key)], args=[max(0, int(interval * 1000))])
        return float(waited) / 1000

    # --- timers ---------------------------------------------------------------
    def _timer(self, site: str, timeout: float, queue: str, callback: bytes, mode: str) -> bool:
        self._stream(queue)
        keys = [self._key("timers"), self._key("timer")]
        return bool(
            self._set_timer(keys=keys, args=[site, int(timeout * 1000), queue, bytes(callback), mode])
        )

    def start_timer(self, site: str, timeout: float, callback_queue: str, callback: bytes) -> None:
        self._timer(site, timeout, callback_queue, callback, "start")

    def reset_timer(self, site: str, timeout: float, callback_queue: str, callback: bytes) -> bool:
        return self._timer(site, timeout, callback_queue, callback, "reset")

    def fire_timers(self, limit: int = 100) -> list[str]:
        keys = [self._key("timers"), self._key("timer")]
        return [_text(s) for s in self._fire(keys=keys, args=[self._key("q"), limit])]

    def timers(self) -> dict[str, float]:
        return {
            _text(s): float(ms) / 1000
            for s, ms in self._r.zrange(self._key("timers"), 0, -1, withscores=True)
        }

    def close(self) -> None:
        self._r.close()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _exhausted(deliveries: int, last_error: str) -> str:
    last = f"; last error: {last_error}" if last_error else " without an ack (its consumers died or hung)"
    return f"delivered {deliveries} times{last}"
