"""Fencing the scheduler's decisions by lease epoch: which decision still counts.

The scheduler leader stamps every decision it publishes (job.scheduled, job.pending,
job.preempting, a refusal's job.completed) with its lease epoch (libs/backbone/leasing.py). A
leader that takes over first records a fence: its epoch and the job stream's last sequence at
that moment (the cut). It rebuilds through the cut before deciding anything, so every decision
stored up to the cut is part of what it knows. A decision of an older epoch stored after the
cut was made by a leader that had been deposed without knowing it (paused, cut off from the bus,
its publish in flight): the new leader never saw it when it placed, so everyone ignores it, the
new leader itself and the orchestrator alike. Both apply this one rule to the decision's epoch
and its position in the stream, so they agree whatever order they read things in.

A fence whose cut is not written yet (the new leader is between its two writes) leaves older
decisions undecided: the reader asks again shortly. A leader raising its fence finishes any
such fence left by a leader that died between the writes, with its own cut.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

# How many fences the record keeps: each is one takeover, so this is far more than ever matter
# (a decision older than the hundredth-last takeover cannot still be in flight).
KEEP = 100


@dataclass(frozen=True)
class Fence:
    epoch: int
    cut: int | None  # the job stream's last sequence when the epoch began; None while being raised


def deposed(epoch: int | None, sequence: int, fences: Iterable[Fence]) -> bool | None:
    """Whether a decision of `epoch` stored at stream `sequence` came from a deposed leader.

    True: ignore it. False: it counts. None: a newer leader's fence is still being raised, ask
    again. A decision without an epoch (a scheduler from before fencing) always counts.
    """
    if epoch is None:
        return False
    undecided = False
    for fence in fences:
        if fence.epoch <= epoch:
            continue
        if fence.cut is None:
            undecided = True
        elif sequence > fence.cut:
            return True
    return None if undecided else False


def encode(fences: Iterable[Fence]) -> bytes:
    kept = sorted(fences, key=lambda f: f.epoch)[-KEEP:]
    return json.dumps([[f.epoch, f.cut] for f in kept]).encode()


def decode(raw: bytes | None) -> tuple[Fence, ...]:
    if not raw:
        return ()
    return tuple(Fence(int(epoch), None if cut is None else int(cut)) for epoch, cut in json.loads(raw))


def with_pending(fences: Iterable[Fence], epoch: int) -> tuple[Fence, ...]:
    """The record with `epoch` added, its cut still unknown."""
    return (*(f for f in fences if f.epoch != epoch), Fence(epoch, None))


def with_cut(fences: Iterable[Fence], epoch: int, cut: int) -> tuple[Fence, ...]:
    """The record with `epoch`'s cut set, and every older fence left without one finished with it."""
    return tuple(
        Fence(f.epoch, cut) if f.epoch == epoch or (f.cut is None and f.epoch < epoch) else f for f in fences
    )
