"""The worker loop: every message ends acknowledged, retried or dead-lettered with its reason."""

from __future__ import annotations

import asyncio
from pathlib import Path

from web_index.crawl import (
    FullEnd,
    Index,
    Packer,
    PackFull,
    SiteFiles,
    StartTimer,
    Timer,
    Worker,
    encode,
)
from web_index.crawl.queues import SqliteBroker
from web_index.storage import LocalBackend


async def run_for(worker: Worker, seconds: float) -> None:
    task = asyncio.create_task(worker.run())
    await asyncio.sleep(seconds)
    worker.stop()
    await task


def test_bad_messages_go_to_the_dead_letters_with_a_reason(tmp_path: Path) -> None:
    broker = SqliteBroker(tmp_path / "q.sqlite")
    good = StartTimer(site="a.test", timeout=60, callback_msg=FullEnd(site="a.test"))
    broker.send(
        "timer",
        [
            b"{not json",
            b'{"type": "no_such_type", "site": "a.test"}',
            b'{"type": "start_timer", "site": "a.test"}',
            encode(Index(site="a.test", url="http://a.test/")),
            encode(StartTimer(site="../../etc", timeout=1, callback_msg=FullEnd(site="x"))),
            encode(good),
        ],
    )
    asyncio.run(run_for(Worker(broker, [Timer(broker)], poll=0.05), 1.0))
    reasons = [d.reason for d in broker.dead_letters("timer")]
    assert len(reasons) == 5
    assert "not a pipeline message" in reasons[0]
    assert "no_such_type" in reasons[1]
    assert "callback_msg" in reasons[2] or "timeout" in reasons[2]
    assert "the timer does not take Index messages" in reasons[3]
    assert "'../../etc' is not a lower-case host name" in reasons[4]
    assert list(broker.timers()) == ["a.test"]
    counts = broker.counts("timer")
    assert (counts.pending, counts.dead) == (0, 5)
    broker.close()


def test_a_failing_handler_is_retried_then_dead_lettered(tmp_path: Path) -> None:
    broker = SqliteBroker(tmp_path / "q.sqlite", max_deliveries=2)
    store = tmp_path / "store"
    store.mkdir()
    (store / "search").write_text("a file where the packs folder should be")  # every pack fails
    packer = Packer(broker, SiteFiles(LocalBackend(store)), workdir=tmp_path / "work")
    broker.send("pack", [encode(PackFull(site="a.test"))])
    asyncio.run(run_for(Worker(broker, [packer], poll=0.05), 2.5))
    (dead,) = broker.dead_letters("pack")
    assert dead.deliveries == 2 and "delivered 2 times; last error:" in dead.reason
    assert broker.counts("pack").pending == 0
    assert broker.counts("orch").pending == 0  # no update for a pack that failed
    broker.close()
