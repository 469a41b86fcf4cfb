"""The orchestrator's placement, driven by hypothesis through registrations,
heartbeats, updates, silences, searches and its own restarts, against obedient
searchers that do what the ``load``/``drop`` messages say and report it."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from web_index.crawl import Drop, Load, Placement

SEARCHERS = ("s0", "s1", "s2", "s3")
SITES = ("a.test", "b.test", "c.test", "d.test")
DEAD_AFTER = 10.0


class PlacementMachine(RuleBasedStateMachine):
    @initialize(replicas=st.integers(1, 2))
    def start(self, replicas: int) -> None:
        self.replicas = replicas
        self.placement = Placement(dead_after=DEAD_AFTER, replicas=replicas)
        self.now = 0.0
        self.published: dict[str, tuple[int, float]] = {}  # site -> (generation, size)
        self.told: dict[str, dict[str, int]] = {}  # what each running searcher was told to hold
        self.alive: set[str] = set()  # searchers that heart-beat when asked to

    def obey(self, commands: list[Load | Drop]) -> None:
        for command in commands:
            held = self.told.setdefault(command.searcher, {})
            if isinstance(command, Load):
                assert command.generation == self.published[command.site][0], "a load of an old generation"
                held[command.site] = command.generation
            else:
                held.pop(command.site, None)
                assert command.searcher not in self.placement.holders(command.site)

    @rule(sid=st.sampled_from(SEARCHERS), free=st.integers(0, 100))
    def register(self, sid: str, free: int) -> None:
        self.told[sid] = {}
        self.alive.add(sid)
        self.obey(self.placement.register(sid, free, self.now))

    @rule(sid=st.sampled_from(SEARCHERS), free=st.integers(0, 100))
    def heartbeat(self, sid: str, free: int) -> None:
        if sid in self.alive:
            self.obey(self.placement.heartbeat(sid, free, dict(self.told.get(sid, {})), self.now))

    @rule(sid=st.sampled_from(SEARCHERS))
    def falls_silent(self, sid: str) -> None:
        self.alive.discard(sid)

    @rule(site=st.sampled_from(SITES), size=st.floats(0, 60))
    def update(self, site: str, size: float) -> None:
        generation = self.published.get(site, (0, 0.0))[0] + 1
        self.published[site] = (generation, size)
        self.obey(self.placement.site(site, generation, size))

    @rule(seconds=st.floats(0, 2 * DEAD_AFTER))
    def time_passes(self, seconds: float) -> None:
        self.now += seconds
        self.obey(self.placement.expire(self.now))

    @rule()
    def orchestrator_restarts(self) -> None:
        # Its state is gone; it finds the published databases, then hears heartbeats.
        self.placement = Placement(dead_after=DEAD_AFTER, replicas=self.replicas)
        for site, (generation, size) in self.published.items():
            self.obey(self.placement.site(site, generation, size))
        for sid in sorted(self.alive):
            self.obey(self.placement.heartbeat(sid, 50, dict(self.told.get(sid, {})), self.now))

    @rule(site=st.sampled_from(SITES))
    def search(self, site: str) -> None:
        target = self.placement.route(site)
        assert (target is None) == (not self.placement.holders(site))
        if target is not None:
            assert site in self.told.get(target, {}), "routed to a searcher never told to load it"

    @invariant()
    def placed_within_replicas_at_the_newest_generation(self) -> None:
        for site in self.placement.sites:
            holders = self.placement.holders(site)
            assert len(holders) <= self.replicas
            for sid in holders:
                assert self.told.get(sid, {}).get(site) == self.published[site][0]

    @invariant()
    def under_replicated_only_when_no_searcher_has_room(self) -> None:
        for site, state in self.placement.sites.items():
            if len(self.placement.holders(site)) < self.replicas:
                for sid, searcher in self.placement.searchers.items():
                    if site not in searcher.holds:
                        assert searcher.room() < state.size_mb, (site, sid, searcher)

    @invariant()
    def silent_searchers_are_given_up(self) -> None:
        for searcher in self.placement.searchers.values():
            assert self.now - searcher.seen <= DEAD_AFTER


PlacementMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)
TestPlacement = PlacementMachine.TestCase
