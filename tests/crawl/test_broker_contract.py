"""The broker contract, run against both brokers: SQLite and a real redis-server."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from web_index.crawl.queues import Broker, QueueCounts, SqliteBroker, open_broker

LEASE = 0.4


@pytest.fixture
def broker(broker_url: str) -> Iterator[Broker]:
    b = open_broker(broker_url, max_deliveries=3)
    yield b
    b.close()


def bodies(deliveries: list) -> list[bytes]:  # type: ignore[type-arg]
    return [d.body for d in deliveries]


def test_messages_come_out_in_order_once(broker: Broker) -> None:
    broker.send("q", [b"1", b"2"])
    broker.send("q", [b"3"])
    first = broker.receive("q", limit=2, lease=30)
    assert bodies(first) == [b"1", b"2"]
    assert [d.deliveries for d in first] == [1, 1]
    rest = broker.receive("q", limit=5, lease=30)
    assert bodies(rest) == [b"3"]
    assert broker.receive("q", lease=30) == []
    assert broker.counts("q").leased == 3
    for d in first + rest:
        broker.ack(d)
    counts = broker.counts("q")
    assert (counts.ready, counts.leased, counts.dead) == (0, 0, 0)


def test_queues_are_separate(broker: Broker) -> None:
    broker.send("a", [b"x"])
    assert broker.receive("b") == []
    assert bodies(broker.receive("a")) == [b"x"]


def test_unacked_message_is_delivered_again_after_its_lease(broker: Broker) -> None:
    broker.send("q", [b"m"])
    (d,) = broker.receive("q", lease=LEASE)
    assert broker.receive("q", lease=LEASE) == []
    time.sleep(LEASE + 0.2)
    (again,) = broker.receive("q", lease=LEASE)
    assert (again.body, again.deliveries) == (b"m", 2)
    broker.ack(d)  # the first holder lost its lease: its ack must not remove the new holder's message
    assert broker.counts("q").leased == 1
    broker.ack(again)
    assert broker.counts("q").pending == 0


def test_extend_keeps_a_lease(broker: Broker) -> None:
    broker.send("q", [b"m"])
    (d,) = broker.receive("q", lease=LEASE)
    for _ in range(3):
        time.sleep(LEASE * 0.6)
        broker.extend(d, LEASE)
        assert broker.receive("q", lease=LEASE) == []
    broker.ack(d)


def test_release_retries_after_the_delay_then_dead_letters(broker: Broker) -> None:
    broker.send("q", [b"m"])
    for n in (1, 2):
        (d,) = broker.receive("q", lease=30, wait=1.0)
        assert d.deliveries == n
        broker.release(d, f"failure {n}", delay=0.3)
        assert broker.receive("q", lease=30) == []
        time.sleep(0.35)
    (d,) = broker.receive("q", lease=30)
    assert d.deliveries == 3
    broker.release(d, "failure 3", delay=0)
    assert broker.receive("q", lease=30) == []
    (dead,) = broker.dead_letters("q")
    assert dead.body == b"m" and dead.deliveries == 3 and "failure 3" in dead.reason
    assert broker.counts("q").dead == 1 and broker.counts("q").pending == 0


def test_a_message_whose_consumers_keep_dying_is_dead_lettered(broker: Broker) -> None:
    broker.send("q", [b"poison"])
    for _ in range(3):
        assert len(broker.receive("q", lease=0.2, wait=1.0)) == 1
        time.sleep(0.3)
    assert broker.receive("q", lease=0.2) == []
    (dead,) = broker.dead_letters("q")
    assert dead.body == b"poison" and "without an ack" in dead.reason


def test_dead_letter_is_immediate_and_keeps_the_reason(broker: Broker) -> None:
    broker.send("q", [b"{bad"])
    (d,) = broker.receive("q")
    broker.dead_letter(d, "not a pipeline message: truncated")
    assert broker.receive("q", lease=0.1) == []
    (dead,) = broker.dead_letters("q")
    assert (dead.body, dead.reason, dead.deliveries) == (b"{bad", "not a pipeline message: truncated", 1)


def test_delayed_send(broker: Broker) -> None:
    broker.send("q", [b"later"], delay=0.4)
    assert broker.receive("q") == []
    assert broker.counts("q").ready == 1
    assert bodies(broker.receive("q", wait=2.0)) == [b"later"]


def test_receive_waits_for_a_message_sent_meanwhile(broker_url: str, broker: Broker) -> None:
    other = open_broker(broker_url)
    threading.Timer(0.3, lambda: other.send("q", [b"late"])).start()
    start = time.monotonic()
    assert bodies(broker.receive("q", wait=5.0)) == [b"late"]
    assert time.monotonic() - start < 4.0
    other.close()


def test_messages_survive_reopening(broker_url: str, broker: Broker) -> None:
    broker.send("q", [b"kept"])
    url = broker.url
    assert url.startswith(("sqlite:///", "redis://"))
    broker.close()
    again = open_broker(url)
    assert bodies(again.receive("q")) == [b"kept"]
    again.close()


def test_concurrent_consumers_never_share_a_message(broker_url: str) -> None:
    producer = open_broker(broker_url)
    producer.send("q", [str(i).encode() for i in range(200)])
    got: list[bytes] = []
    lock = threading.Lock()

    def consume() -> None:
        b = open_broker(broker_url)
        while True:
            batch = b.receive("q", limit=7, lease=30)
            if not batch:
                break
            for d in batch:
                b.ack(d)
            with lock:
                got.extend(bodies(batch))
        b.close()

    threads = [threading.Thread(target=consume) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got, key=int) == [str(i).encode() for i in range(200)]
    producer.close()


_HOLDER = """
import sys, time
from web_index.crawl.queues import open_broker
b = open_broker(sys.argv[1])
(d,) = b.receive("q", lease=float(sys.argv[2]), wait=10)
print(d.body.decode(), flush=True)
time.sleep(60)
"""


def test_consumer_sigkilled_while_holding_a_message(broker_url: str, broker: Broker) -> None:
    broker.send("q", [b"held"])
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, broker_url, "1.0"], stdout=subprocess.PIPE)
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == b"held"
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    assert broker.receive("q", lease=1.0) == []  # still leased to the dead consumer
    (d,) = broker.receive("q", lease=1.0, wait=5.0)
    assert (d.body, d.deliveries) == (b"held", 2)
    broker.ack(d)
    assert broker.counts("q").pending == 0


def test_seen_set_admits_each_url_once_up_to_the_cap(broker: Broker) -> None:
    assert broker.add_seen("c", ["a", "b", "a"], max_pages=3) == [True, True, False]
    assert broker.add_seen("c", ["c", "d", "b"], max_pages=3) == [True, False, False]
    assert broker.seen_count("c") == 3
    assert broker.add_seen("other", ["a"], max_pages=3) == [True]
    assert broker.add_seen("c", [], max_pages=3) == []


def test_admitted_urls_are_queued_in_the_same_step(broker: Broker) -> None:
    urls = ["a", "b", "a", "c", "d"]
    got = broker.add_seen("c", urls, max_pages=3, queue="index", bodies=[f"body-{u}".encode() for u in urls])
    assert got == [True, True, False, True, False]
    taken = broker.receive("index", limit=10, lease=5)
    assert [d.body for d in taken] == [b"body-a", b"body-b", b"body-c"]
    assert broker.add_seen("c", ["e"], max_pages=10, queue="index", bodies=[b"body-e"]) == [True]
    with pytest.raises(ValueError, match="1 bodies for 2 URLs"):
        broker.add_seen("c", ["f", "g"], max_pages=10, queue="index", bodies=[b"x"])
    assert broker.seen_count("c") == 4  # the refused call marked nothing


def test_seen_set_under_concurrent_writers(broker_url: str) -> None:
    admitted: list[str] = []
    failed: list[BaseException] = []
    lock = threading.Lock()

    def add(offset: int) -> None:
        try:
            adding(offset)
        except BaseException as exc:  # a thread's failure fails the test, not a warning
            failed.append(exc)

    def adding(offset: int) -> None:
        b = open_broker(broker_url)  # all three at once, on a file none has opened yet
        for i in range(0, 60, 3):
            urls = [f"u{(i + offset + k) % 60}" for k in range(3)]
            bodies = [u.encode() for u in urls]
            for url, ok in zip(
                urls, b.add_seen("c", urls, max_pages=50, queue="q", bodies=bodies), strict=True
            ):
                if ok:
                    with lock:
                        admitted.append(url)
        b.close()

    threads = [threading.Thread(target=add, args=(o,)) for o in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failed, failed
    assert len(admitted) == 50 and len(set(admitted)) == 50
    b = open_broker(broker_url)
    queued = [d.body.decode() for d in b.receive("q", limit=100, lease=5)]
    b.close()
    assert sorted(queued) == sorted(admitted)  # each admitted URL queued once, no other


def test_turns_are_spaced_for_every_consumer(broker_url: str) -> None:
    one, two = open_broker(broker_url), open_broker(broker_url)
    waits = [
        one.reserve_turn("a.test", 0.5),
        two.reserve_turn("a.test", 0.5),
        one.reserve_turn("a.test", 0.5),
    ]
    assert waits == [pytest.approx(0, abs=0.05), pytest.approx(0.5, abs=0.05), pytest.approx(1.0, abs=0.05)]
    assert two.reserve_turn("b.test", 0.5) == pytest.approx(0, abs=0.05)  # each key its own schedule
    time.sleep(1.1)
    assert one.reserve_turn("a.test", 0.0) == pytest.approx(0.4, abs=0.1)  # the turn taken 1.0 s on
    one.close()
    two.close()


def test_many_are_acknowledged_in_one_step(broker: Broker) -> None:
    broker.send("q", [b"1", b"2", b"3"])
    got = broker.receive("q", limit=3, lease=30)
    broker.ack_many(got[:2])
    assert broker.counts("q") == QueueCounts(0, 1, 0)
    broker.ack_many([])
    broker.ack_many(got[:2])  # again: nothing left to take
    broker.ack_many(got[2:])
    assert broker.counts("q") == QueueCounts(0, 0, 0)


def test_a_forgotten_queue_is_gone_and_the_others_stay(broker: Broker) -> None:
    broker.send("reply.a", [b"1", b"2"])
    broker.send("reply.b", [b"3"])
    (held,) = broker.receive("reply.a", lease=30)
    broker.dead_letter(held, "bad")
    broker.forget("reply.a")
    assert broker.counts("reply.a") == QueueCounts(0, 0, 0)
    assert broker.receive("reply.a") == []
    assert bodies(broker.receive("reply.b")) == [b"3"]
    broker.send("reply.a", [b"4"])  # usable again
    assert bodies(broker.receive("reply.a")) == [b"4"]


def test_crawl_specs_are_kept_once(broker: Broker) -> None:
    assert broker.get_crawl("c") is None
    assert broker.put_crawl("c", b"spec-1")
    assert not broker.put_crawl("c", b"spec-2")
    assert broker.get_crawl("c") == b"spec-1"


def test_timers_start_reset_and_fire_once(broker: Broker) -> None:
    broker.start_timer("a.test", 0.5, "pack", b"full")
    assert broker.reset_timer("a.test", 60, "pack", b"incremental")  # running: extended, callback kept
    assert not broker.reset_timer("b.test", 0.3, "pack", b"incremental-b")  # missing: started
    assert set(broker.timers()) == {"a.test", "b.test"}
    assert broker.fire_timers() == []
    time.sleep(0.35)
    assert broker.fire_timers() == ["b.test"]
    time.sleep(0.1)
    assert broker.reset_timer("a.test", 60, "pack", b"x")  # pushed back by its own 0.5 s
    time.sleep(0.3)
    assert broker.fire_timers() == []
    time.sleep(0.3)
    assert broker.fire_timers() == ["a.test"]
    assert broker.fire_timers() == []
    assert broker.timers() == {}
    assert bodies(broker.receive("pack", limit=5)) == [b"incremental-b", b"full"]


def test_start_replaces_a_running_timer(broker: Broker) -> None:
    assert not broker.reset_timer("a.test", 0.2, "pack", b"incremental")
    broker.start_timer("a.test", 0.2, "pack", b"full")
    time.sleep(0.3)
    assert broker.fire_timers() == ["a.test"]
    assert bodies(broker.receive("pack", limit=5)) == [b"full"]


def test_racing_timer_processes_post_a_callback_once(broker_url: str, broker: Broker) -> None:
    for i in range(20):
        broker.start_timer(f"s{i}.test", 0.2, "pack", f"cb{i}".encode())
    time.sleep(0.25)
    fired: list[str] = []
    lock = threading.Lock()

    def fire() -> None:
        b = open_broker(broker_url)
        for _ in range(5):
            got = b.fire_timers(limit=3)
            with lock:
                fired.extend(got)
        b.close()

    threads = [threading.Thread(target=fire) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(fired) == sorted(f"s{i}.test" for i in range(20))
    got = broker.receive("pack", limit=100)
    assert sorted(bodies(got)) == sorted(f"cb{i}".encode() for i in range(20))


def test_open_broker_refuses_unknown_urls(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="queue URL"):
        open_broker("amqp://somewhere/")
    assert isinstance(open_broker(tmp_path / "q.sqlite"), SqliteBroker)


def _open_at(url: str, moment: float) -> str | None:
    while time.time() < moment:  # spin: the processes start within microseconds of each other
        pass
    try:
        open_broker(url).close()
    except Exception as exc:
        return repr(exc)
    return None


def test_processes_starting_together_on_a_new_queue_file(tmp_path: Path) -> None:
    """Workers started at once: one creates the tables while another switches the new
    file to WAL, which SQLite refuses at once (no busy wait): each must still open it.
    (Without the retry, 11 of 360 opens failed "database is locked".)"""
    rng = random.Random(1)
    with multiprocessing.get_context("fork").Pool(6) as pool:
        for n in range(60):
            url = f"sqlite:///{tmp_path / f'fresh-{n}.sqlite'}"
            moment = time.time() + 0.05
            failed = pool.starmap(_open_at, [(url, moment + rng.uniform(0, 0.003)) for _ in range(6)])
            assert failed == [None] * 6, failed
