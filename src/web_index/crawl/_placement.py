"""Which searcher holds which site's database: the orchestrator's state.

Pure bookkeeping with the clock passed in, so that a model test can drive
it through registrations, heartbeats, updates, silences and searches. Every
change returns the ``load``/``drop`` messages it calls for; the orchestrator
role sends them. Nothing here is persisted: a restarted orchestrator
rediscovers the published databases and relearns what each searcher holds
from its next heartbeat, as the seed asks.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from web_index.crawl._messages import Drop, Load

__all__ = ["Placement", "SearcherState", "SiteState"]

Command = Load | Drop


@dataclass
class SiteState:
    generation: int
    size_mb: float


@dataclass
class SearcherState:
    free_mb: int
    seen: float
    # site -> generation it was told to load (or reported holding)
    holds: dict[str, int] = field(default_factory=dict)
    # sites told to load but not yet reported: their room is spoken for
    pending_mb: dict[str, float] = field(default_factory=dict)

    def room(self) -> float:
        return self.free_mb - sum(self.pending_mb.values())


class Placement:
    """Sites, searchers, and the assignment between them.

    A site is placed on ``replicas`` live searchers, each time the one with
    the most room for it; a searcher silent for ``dead_after`` seconds is
    forgotten and its sites placed elsewhere.
    """

    def __init__(self, *, dead_after: float = 15.0, replicas: int = 1) -> None:
        if replicas < 1 or dead_after <= 0:
            raise ValueError("replicas must be >= 1 and dead_after > 0")
        self.dead_after = dead_after
        self.replicas = replicas
        self.sites: dict[str, SiteState] = {}
        self.searchers: dict[str, SearcherState] = {}
        self._turn = itertools.count()

    # --- what the orchestrator is told ----------------------------------------
    def site(self, site: str, generation: int, size_mb: float) -> list[Command]:
        """A published database (discovered, or announced by ``update``); holders
        of an older generation are told to load this one."""
        known = self.sites.get(site)
        if known is not None and known.generation >= generation:
            return self.place()
        self.sites[site] = SiteState(generation, size_mb)
        out: list[Command] = []
        for sid, searcher in self.searchers.items():
            if site in searcher.holds and searcher.holds[site] < generation:
                searcher.holds[site] = generation
                out.append(Load(searcher=sid, site=site, generation=generation))
        return out + self.place()

    def register(self, searcher: str, free_mb: int, now: float) -> list[Command]:
        """A searcher (re)started: it holds nothing yet."""
        self.searchers[searcher] = SearcherState(free_mb=free_mb, seen=now)
        return self.place()

    def heartbeat(self, searcher: str, free_mb: int, sites: dict[str, int], now: float) -> list[Command]:
        """A searcher is up and holds ``sites``; an unknown one (this
        orchestrator restarted) is taken as it is."""
        state = self.searchers.setdefault(searcher, SearcherState(free_mb=free_mb, seen=now))
        state.free_mb, state.seen = free_mb, now
        out: list[Command] = []
        for site, generation in sites.items():
            state.pending_mb.pop(site, None)
            if site not in state.holds and len(self.holders(site)) >= self.replicas:
                # Back after it was given up for dead: its sites live elsewhere now.
                out.append(Drop(searcher=searcher, site=site))
                continue
            told = max(state.holds.get(site, 0), generation)
            state.holds[site] = told
            known = self.sites.get(site)
            if known is not None and told < known.generation:
                state.holds[site] = known.generation
                out.append(Load(searcher=searcher, site=site, generation=known.generation))
        return out + self.place()

    def expire(self, now: float) -> list[Command]:
        """Forget searchers silent for ``dead_after``; place what they held."""
        for sid in [s for s, st in self.searchers.items() if now - st.seen > self.dead_after]:
            del self.searchers[sid]
        return self.place()

    # --- decisions ------------------------------------------------------------
    def holders(self, site: str) -> list[str]:
        return sorted(sid for sid, st in self.searchers.items() if site in st.holds)

    def route(self, site: str) -> str | None:
        """A searcher to send a search of ``site`` to (taking turns among
        holders), or ``None`` if none holds it."""
        holders = self.holders(site)
        return holders[next(self._turn) % len(holders)] if holders else None

    def place(self) -> list[Command]:
        """Load every under-replicated site on the searchers with most room."""
        out: list[Command] = []
        for site in sorted(self.sites, key=lambda s: -self.sites[s].size_mb):  # biggest first
            state = self.sites[site]
            missing = self.replicas - len(self.holders(site))
            candidates = sorted(
                (
                    (st.room(), sid)
                    for sid, st in self.searchers.items()
                    if site not in st.holds and st.room() >= state.size_mb
                ),
                reverse=True,
            )
            for _, sid in candidates[: max(0, missing)]:
                chosen = self.searchers[sid]
                chosen.holds[site] = state.generation
                chosen.pending_mb[site] = state.size_mb
                out.append(Load(searcher=sid, site=site, generation=state.generation))
        return out

    def unplaced(self) -> list[str]:
        """Sites no searcher holds (no searcher has room, or none is up)."""
        return sorted(s for s in self.sites if not self.holders(s))
