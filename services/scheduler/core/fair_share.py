"""Fair share inside a virtual cluster: who is tried next among jobs of equal priority.

HiveD shares the cluster between VCs; inside a VC it takes jobs in arrival order, so one user
who queues twenty jobs holds the VC until the last of them ran, and a colleague's job waits
behind them all. The rule here: among the waiting jobs of one priority, the next one tried is
that of the user who holds the least of their VC (GPUs, then CPU, held by their running jobs),
and among users holding as much, the one served longest ago (never, first); a user's own jobs
keep their arrival order. Priorities keep their meaning: a higher priority is always tried
first and may preempt, whoever holds what.

The order changes as it is walked: a job placed makes its user hold more, so their next job
may fall behind another user's. `FairQueue` hands out jobs one at a time (a heap whose stale
entries, those of a user whose holding or turn changed since, are put back with their new
key), so one pass over N waiting jobs costs O(N log N), as the sort it replaces did.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass

Key = tuple[str, str]  # (VC, user)


@dataclass(frozen=True)
class Candidate:
    """A waiting job as the queue orders it: its VC, user, priority, arrival and size."""

    job_id: str
    vc: str
    user: str
    priority: int
    seq: int
    gpus: int
    cpu: int


@dataclass
class Share:
    """What a user holds in a VC (GPUs and CPU of running jobs) and when they were last served."""

    gpus: int = 0
    cpu: int = 0
    served: int = -1  # the placement counter at their last placement; -1: never


class FairQueue:
    """Waiting jobs handed out in fair-share order; `placed` tells it who got what."""

    def __init__(self, candidates: Iterable[Candidate], shares: dict[Key, Share]) -> None:
        self._shares = shares
        self._heap: list[tuple[tuple[int, int, int, int, int], int, Candidate]] = []
        self._counter = 0
        for candidate in candidates:
            self._push(candidate)

    def _key(self, c: Candidate) -> tuple[int, int, int, int, int]:
        share = self._shares.get((c.vc, c.user)) or Share()
        return (-c.priority, share.gpus, share.cpu, share.served, c.seq)

    def _push(self, candidate: Candidate) -> None:
        self._counter += 1
        heapq.heappush(self._heap, (self._key(candidate), self._counter, candidate))

    def pop(self) -> Candidate | None:
        """The next job to try, or None when every job was handed out."""
        while self._heap:
            key, _, candidate = heapq.heappop(self._heap)
            if key == self._key(candidate):
                return candidate
            self._push(candidate)  # its user's holding or turn changed since it was queued
        return None

    def __iter__(self) -> FairQueue:
        return self

    def __next__(self) -> Candidate:
        candidate = self.pop()
        if candidate is None:
            raise StopIteration
        return candidate


def hold(
    shares: dict[Key, Share], vc: str, user: str, gpus: int, cpu: int, served: int | None = None
) -> None:
    """Add (or with negative amounts take back) what a user holds in a VC; `served` marks a placement."""
    share = shares.setdefault((vc, user), Share())
    share.gpus += gpus
    share.cpu += cpu
    if served is not None:
        share.served = served
    if not share.gpus and not share.cpu and share.served < 0:
        del shares[(vc, user)]


def fair_order(candidates: Iterable[Candidate], shares: dict[Key, Share]) -> list[Candidate]:
    """The order the queue would place every waiting job in, were each placed in its turn."""
    mine = {key: Share(s.gpus, s.cpu, s.served) for key, s in shares.items()}
    served = max((s.served for s in mine.values()), default=-1)
    queue = FairQueue(candidates, mine)
    out: list[Candidate] = []
    for candidate in queue:
        served += 1
        hold(mine, candidate.vc, candidate.user, candidate.gpus, candidate.cpu, served)
        out.append(candidate)
    return out
