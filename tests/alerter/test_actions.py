"""The alerter's actions are events on the bus: a tag for the read model, a cordon for the scheduler."""

from __future__ import annotations

from libs.backbone.connecting import Bus
from libs.backbone.topology import ensure_topology
from libs.protocol.events import JobTagged, NodeCordoned, decode_event
from libs.protocol.subjects import JOBS_STREAM, NODES_STREAM
from services.alerter.adapters.actions import BusActions


async def test_tagging_and_cordoning_publish_events_once_per_alert(bus: Bus) -> None:
    await ensure_topology(bus.js)
    actions = BusActions(bus.js)
    for _ in range(2):  # an alert re-evaluated acts once
        await actions.tag_job("j1", "low-gpu-utilisation", alert_id="a1")
        await actions.cordon_node("10.0.0.7", alert_id="a2", reason="GPU double ECC")
    tagged = decode_event((await bus.js.get_last_msg(JOBS_STREAM, "pai.job.j1.job.tagged")).data or b"")
    assert isinstance(tagged, JobTagged)
    assert (tagged.tag, tagged.by) == ("low-gpu-utilisation", "alerter")
    assert (await bus.js.stream_info(JOBS_STREAM)).state.messages == 1
    nodes = await bus.js.stream_info(NODES_STREAM)
    assert nodes.state.messages == 1
    cordon = decode_event((await bus.js.get_msg(NODES_STREAM, nodes.state.last_seq)).data or b"")
    assert isinstance(cordon, NodeCordoned)
    assert (cordon.name, cordon.cordoned, cordon.reason) == ("10.0.0.7", True, "GPU double ECC")
