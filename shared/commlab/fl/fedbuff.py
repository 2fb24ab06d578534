"""FedBuff's bookkeeping on the controller (no transport): who is training from which server
model version, who may be given work next, and whether a returning update is one that was asked for.

A client trains at most once from each server version: an idle client that already trained from
the current version waits for the next one. With buffer_size <= clients training at once this
never stalls (every returning update fills the buffer or frees a client for the next version), and
no two commands to one client share a round number (the client's seed and codec memory key on it).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from commlab.fl.sampling import Availability, sample_clients
from commlab.runs.seeds import SeedTree


@dataclass
class Dispatch:
    clients: list[str]
    concurrency: int                       # clients training at the same time (clients_per_round)
    seeds: SeedTree
    availability: Availability | None = None
    busy: dict[str, int] = field(default_factory=dict)       # client -> version it was told to train from
    last_base: dict[str, int] = field(default_factory=dict)  # client -> version it last trained from

    def candidates(self, version: int) -> list[str]:
        """Idle clients that may train from `version`: available in round version + 1 and not
        trained from it yet."""
        pool = self.clients if self.availability is None else self.availability.available(version + 1, self.clients)
        return [c for c in pool if c not in self.busy and self.last_base.get(c, -1) < version]

    def assign(self, version: int, alive: set[str]) -> list[str]:
        """Candidates (alive ones) to start on `version` now: a seeded sample up to the free places
        (sorted; [] when none)."""
        free = self.concurrency - len(self.busy)
        if free <= 0:
            return []
        alive_candidates = [c for c in self.candidates(version) if c in alive]
        chosen = sample_clients(alive_candidates, free, self.seeds.sampling(version + 1))
        self.busy.update({c: version for c in chosen})
        return chosen

    def returned(self, client: str, rnd: int, version: int) -> str | None:
        """An update of `client` labelled round `rnd` (trained from version rnd - 1) arrived while
        the server is at `version`: None if it was asked for (the client is idle again), else why not."""
        if client not in self.busy:
            return "no work was given to this client"
        assigned, base = self.busy[client], rnd - 1
        if not assigned <= base <= version:
            return f"trained from version {base}, was told {assigned} (server at {version})"
        del self.busy[client]
        self.last_base[client] = base
        return None

    def lost(self, alive: set[str]) -> list[str]:
        """Busy clients no longer alive: their places are freed (they may come back later)."""
        gone = sorted(set(self.busy) - alive)
        for c in gone:
            del self.busy[c]
        return gone
