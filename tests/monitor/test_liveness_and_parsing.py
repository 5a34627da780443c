"""Pure parts of the monitor: who has gone quiet, and what nvidia-smi says."""

from __future__ import annotations

from services.monitor.adapters.gpus import parse_gpus, parse_processes
from services.monitor.core.liveness import Liveness


def test_a_silent_node_is_declared_lost_once_and_known_again_when_it_reports() -> None:
    live = Liveness(node_lost_after=60, service_down_after=30)
    live.node_seen("n1", "10.0.0.1", at=100)
    live.node_seen("n2", "10.0.0.2", at=130)
    assert live.newly_lost(160) == []
    assert [(node, name) for node, name, _ in live.newly_lost(161)] == [("n1", "10.0.0.1")]
    assert live.newly_lost(170) == []  # said once per silence
    assert live.nodes_ready() == {"10.0.0.1": False, "10.0.0.2": True}
    live.node_seen("n1", "10.0.0.1", at=175)
    assert live.nodes_ready()["10.0.0.1"] is True
    assert [node for node, _, _ in live.newly_lost(236)] == ["n1", "n2"]


def test_an_older_report_does_not_make_a_node_younger() -> None:
    live = Liveness(node_lost_after=60, service_down_after=30)
    live.node_seen("n1", "a", at=200)
    live.node_seen("n1", "a", at=100)
    assert live.newly_lost(250) == []


def test_services_are_down_after_their_silence_limit() -> None:
    live = Liveness(node_lost_after=60, service_down_after=30)
    live.service_seen("rest", 100)
    live.service_seen("scheduler", 120)
    assert live.services_up(130) == {"rest": True, "scheduler": True}
    assert live.services_up(131) == {"rest": False, "scheduler": True}


GPUS = """0, GPU-aaa, 87, 40, 10240, 16384, 0, 2
1, GPU-bbb, [N/A], 0, 0, 16384, [Not Supported], [Not Supported]
garbage line
"""


def test_nvidia_smi_rows_parse_and_unsupported_values_read_as_zero() -> None:
    gpus = parse_gpus(GPUS)
    assert [(g.index, g.uuid, g.utilization, g.ecc_double) for g in gpus] == [
        (0, "GPU-aaa", 87.0, 2.0),
        (1, "GPU-bbb", 0.0, 0.0),
    ]
    assert gpus[0].memory_total_mb == 16384.0


def test_compute_apps_map_pids_to_gpus() -> None:
    apps = parse_processes("4242, GPU-aaa, 1024\nno data\n")
    assert [(p.pid, p.gpu_uuid, p.memory_used_mb) for p in apps] == [(4242, "GPU-aaa", 1024.0)]
