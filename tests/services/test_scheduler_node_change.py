"""A declared node change keeps the VCs an admin set: on a real nats-server, VCs set while the node
had no GPU are still there when it comes back with two, which go to the default VC, saying so.

Before, the config applied on the start without GPUs froze its cells (none) in KV and stayed in
force at the next start, and every VC showed 0 guaranteed GPUs.
"""

from __future__ import annotations

from typing import Any

from libs.backbone.connecting import Bus
from libs.backbone.topology import ensure_topology, publish_event
from libs.protocol.events import NodeReported
from services.scheduler.adapters.control import CONFIG_SUBJECT, RECONFIGURE_SUBJECT, VC_STATUS_SUBJECT
from tests.services.vc_support import ask, scheduler


def node(gpus: int) -> NodeReported:
    return NodeReported(
        node_id="n0",
        name="n0",
        address="10.0.0.1",
        cpu=8,
        memory_mb=16384,
        gpus=gpus,
        gpu_model="simulated" if gpus else None,
    )


async def test_vcs_set_without_gpus_stay_and_the_gpus_of_the_next_start_go_to_the_default_vc(
    bus: Bus, nats_server: Any
) -> None:
    await ensure_topology(bus.js)
    await publish_event(bus.js, node(0))
    async with scheduler(nats_server.url, None):
        set_ = {"set": {"name": "team", "cpu": 2, "memoryMB": 4096}}
        applied = await ask(bus, RECONFIGURE_SUBJECT, set_)
        assert applied.get("applied"), applied
        assert (
            applied["message"]
            == "VC team was created with a quota of 2 CPUs and 4096 MB memory for tasks without GPUs"
        )
        status = await ask(bus, VC_STATUS_SUBJECT)
        assert {v["name"]: v["guaranteedGpus"] for v in status["virtualClusters"]} == {
            "default": 0,
            "team": 0,
        }

    await publish_event(bus.js, node(2))  # the next `pai up --gpus 2`
    async with scheduler(nats_server.url, None):
        status = await ask(bus, VC_STATUS_SUBJECT)
        assert status["source"] == "kv"
        vcs = {v["name"]: v for v in status["virtualClusters"]}
        assert {name: vc["guaranteedGpus"] for name, vc in vcs.items()} == {"default": 2, "team": 0}
        assert vcs["team"]["quota"] == {"cpu": 2, "memoryMb": 4096, "shared": False}
        said = "the nodes have 2 simulated GPUs more than when the VCs were set (0): they went to VC default"
        assert status["notes"] == [said]
        in_force = await ask(bus, CONFIG_SUBJECT)
        assert in_force["cells"] == "nodes"
        assert in_force["notes"] == [said]
        assert in_force["config"]["virtualClusters"]["default"]["virtualCells"] == [
            {"cellType": "simulated-NODE2", "cellNumber": 1}
        ]
