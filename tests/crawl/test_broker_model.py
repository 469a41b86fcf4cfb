"""The SQLite broker against a tiny in-memory model, on a clock the test drives:
leases running out, retry delays, dead letters and timers firing."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, rule

from web_index.crawl.queues import Delivery, SqliteBroker

MAX = 3


@dataclass
class Msg:
    body: bytes
    visible: float
    deliveries: int = 0
    holder: int | None = None  # the delivery number holding it


class BrokerModel(RuleBasedStateMachine):
    held = Bundle("held")

    def __init__(self) -> None:
        super().__init__()
        import tempfile

        self.dir = tempfile.mkdtemp(prefix="wi-broker-model-")
        self.now = 1_000.0
        self.broker = SqliteBroker(Path(self.dir) / "q.sqlite", max_deliveries=MAX, clock=lambda: self.now)
        self.msgs: dict[bytes, Msg] = {}
        self.dead: list[bytes] = []
        self.timers: dict[str, tuple[float, float, bytes]] = {}  # site -> deadline, timeout, callback
        self.callbacks: list[bytes] = []
        self.sent = 0
        self.deliveries = 0

    def teardown(self) -> None:
        self.broker.close()
        import shutil

        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(n=st.integers(1, 3), delay=st.sampled_from([0.0, 0.0, 5.0]))
    def send(self, n: int, delay: float) -> None:
        new = [f"m{self.sent + i}".encode() for i in range(n)]
        self.sent += n
        self.broker.send("q", new, delay=delay)
        for body in new:
            self.msgs[body] = Msg(body, self.now + delay)

    @rule(target=held, limit=st.integers(1, 4), lease=st.sampled_from([1.0, 10.0]))
    def receive(self, limit: int, lease: float) -> object:
        got = self.broker.receive("q", limit=limit, lease=lease)
        expect: list[bytes] = []
        for m in sorted(self.msgs.values(), key=lambda m: (m.visible, int(m.body[1:]))):
            if len(expect) == limit or m.visible > self.now:
                continue
            if m.deliveries >= MAX:
                del self.msgs[m.body]
                self.dead.append(m.body)
                continue
            m.deliveries += 1
            m.visible = self.now + lease
            self.deliveries += 1
            m.holder = self.deliveries
            expect.append(m.body)
        assert [d.body for d in got] == expect
        for d in got:
            assert d.deliveries == self.msgs[d.body].deliveries
        return [(d, self.msgs[d.body].holder) for d in got]

    def _holding(self, item: object) -> tuple[Delivery, bool] | None:
        pairs = item  # type: ignore[assignment]
        if not pairs:
            return None
        d, holder = pairs[0]  # type: ignore[index]
        m = self.msgs.get(d.body)
        # A lease that ran out still holds until another delivery takes the message:
        # acking then is accepted (the work was done; nobody else is doing it).
        return d, m is not None and m.holder == holder

    @rule(item=consumes(held))
    def ack(self, item: object) -> None:
        got = self._holding(item)
        if got is None:
            return
        d, holds = got
        self.broker.ack(d)
        if holds:
            del self.msgs[d.body]

    @rule(item=consumes(held), delay=st.sampled_from([0.0, 3.0]))
    def release(self, item: object, delay: float) -> None:
        got = self._holding(item)
        if got is None:
            return
        d, holds = got
        self.broker.release(d, "failed", delay=delay)
        if holds:
            m = self.msgs[d.body]
            if d.deliveries >= MAX:
                del self.msgs[d.body]
                self.dead.append(d.body)
            else:
                m.visible, m.holder = self.now + delay, None

    @rule(item=consumes(held))
    def dead_letter(self, item: object) -> None:
        got = self._holding(item)
        if got is None:
            return
        d, holds = got
        self.broker.dead_letter(d, "malformed")
        if holds:
            del self.msgs[d.body]
            self.dead.append(d.body)

    @rule(dt=st.sampled_from([0.5, 2.0, 6.0, 11.0]))
    def advance(self, dt: float) -> None:
        self.now += dt

    @rule(site=st.sampled_from(["a", "b", "c"]), timeout=st.sampled_from([1.0, 4.0]))
    def start_timer(self, site: str, timeout: float) -> None:
        cb = f"full-{site}-{self.now}".encode()
        self.broker.start_timer(site, timeout, "pack", cb)
        self.timers[site] = (self.now + timeout, timeout, cb)

    @rule(site=st.sampled_from(["a", "b", "c"]), timeout=st.sampled_from([1.0, 4.0]))
    def reset_timer(self, site: str, timeout: float) -> None:
        cb = f"inc-{site}-{self.now}".encode()
        existed = self.broker.reset_timer(site, timeout, "pack", cb)
        assert existed == (site in self.timers)
        if existed:
            _, own, kept = self.timers[site]
            self.timers[site] = (self.now + own, own, kept)
        else:
            self.timers[site] = (self.now + timeout, timeout, cb)

    @rule()
    def fire(self) -> None:
        fired = self.broker.fire_timers()
        due = sorted((t[0], s) for s, t in self.timers.items() if t[0] <= self.now)
        assert sorted(fired) == sorted(s for _, s in due)
        for _, site in due:
            self.callbacks.append(self.timers.pop(site)[2])

    @invariant()
    def same_state(self) -> None:
        counts = self.broker.counts("q")
        leased = sum(1 for m in self.msgs.values() if m.holder is not None and m.visible > self.now)
        assert (counts.ready + counts.leased, counts.leased, counts.dead) == (
            len(self.msgs),
            leased,
            len(self.dead),
        )
        assert sorted(d.body for d in self.broker.dead_letters("q", limit=1000)) == sorted(self.dead)
        assert set(self.broker.timers()) == set(self.timers)

    @invariant()
    def callbacks_posted_once(self) -> None:
        posted = self.broker.counts("pack").ready
        assert posted == len(self.callbacks)


BrokerModel.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestBrokerModel = BrokerModel.TestCase
