"""A watch of the alerter that raises ends the replica with its error, so the service stops and
its supervisor starts it again, instead of the watch vanishing while evaluations go on."""

from __future__ import annotations

import asyncio

import pytest

from libs.alerting.config import load_config
from libs.backbone.connecting import Bus
from libs.backbone.leasing import Lease
from libs.backbone.topology import ensure_topology
from services.alerter.adapters.rules_store import RulesWatch
from services.alerter.app import replica
from services.alerter.core.timing import FakeClock
from services.alerter.handlers import Alerter
from tests.support.waiting import eventually, polled

RULES = "settings: {evaluation_interval: 50ms}\nrules: []\n"


def leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]


async def test_a_rules_watch_that_raises_ends_the_replica_with_its_error(
    bus: Bus, monkeypatch: pytest.MonkeyPatch
) -> None:
    await ensure_topology(bus.js)
    broken = asyncio.Event()

    async def watch_with_a_bug(self: RulesWatch) -> None:
        await broken.wait()
        raise RuntimeError("a bug in the rules watch")

    monkeypatch.setattr(RulesWatch, "run", watch_with_a_bug)
    built: list[Alerter] = []

    def build(lease: Lease) -> Alerter:
        built.append(Alerter(bus, config=load_config(RULES), clock=FakeClock(), lease=lease))
        return built[0]

    stop = asyncio.Event()
    running = asyncio.create_task(replica(bus, "alerter-0", stop, build))
    try:
        await eventually(polled(lambda: built[0].counts["evaluations"] if built else 0), lambda n: n > 0)
        broken.set()
        with pytest.raises(BaseExceptionGroup) as caught:
            await asyncio.wait_for(running, 10)
        assert [str(e) for e in leaves(caught.value)] == ["a bug in the rules watch"]
    finally:
        stop.set()
        await asyncio.gather(running, return_exceptions=True)
