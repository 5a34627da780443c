"""A task's kernel limits from its resourcePerInstance, decided without touching the machine:
memory, CPU quota and weight, processes, and the device rules that leave it only its GPUs."""

from __future__ import annotations

import pytest

from services.orchestrator.core.limits import (
    CPU_PERIOD_US,
    LimitDefaults,
    TaskLimits,
    character_majors,
    device_rules,
    task_limits,
)

PROC_DEVICES = """Character devices:
  1 mem
  4 /dev/vc/0
  4 tty
136 pts
195 nvidia-frontend
235 nvidia-uvm
236 nvidia-caps
237 nvidia-nvlink
238 nvidia-nvswitch
239 nvidia-fs
x12 bogus
240

Block devices:
  8 sd
259 blkext
"""


def test_memory_cpu_and_processes_are_what_the_task_asked_for() -> None:
    limits = task_limits(2.5, 1536, [], "", LimitDefaults(pids=100))
    assert limits == TaskLimits(
        memory_bytes=1536 * 1024 * 1024,
        cpu_quota_us=250_000,
        cpu_period_us=CPU_PERIOD_US,
        cpu_shares=2560,
        pids=100,
        device_rules=("a", "b *:* rwm", "c *:* m", "c 195:254 rwm", "c 195:255 rwm"),
    )
    assert (limits.memory_mb, limits.cpus) == (1536, 2.5)
    assert task_limits(1, 64, [], "", LimitDefaults()).pids == 4096


@pytest.mark.parametrize(
    ("cpu", "defaults", "quota", "shares"),
    [
        pytest.param(0, LimitDefaults(), 100_000, 2, id="no-reservation-held-to-one-core"),
        pytest.param(0, LimitDefaults(zero_cpu_cores=0.5), 50_000, 2, id="the-operator-s-default"),
        pytest.param(0.001, LimitDefaults(), 1000, 2, id="a-sliver-keeps-a-millisecond-and-the-least-weight"),
        pytest.param(0.01, LimitDefaults(), 1000, 10, id="a-hundredth"),
        pytest.param(0.002, LimitDefaults(), 1000, 2, id="two-thousandths"),
        pytest.param(1, LimitDefaults(zero_cpu_cores=4), 100_000, 1024, id="one-core"),
    ],
)
def test_a_small_or_absent_cpu_reservation_is_still_held(
    cpu: float, defaults: LimitDefaults, quota: int, shares: int
) -> None:
    limits = task_limits(cpu, 64, [], "", defaults)
    assert (limits.cpu_quota_us, limits.cpu_shares) == (quota, shares)


def test_the_character_devices_are_read_from_their_section_only() -> None:
    assert character_majors(PROC_DEVICES) == {
        1: "mem",
        4: "tty",
        136: "pts",
        195: "nvidia-frontend",
        235: "nvidia-uvm",
        236: "nvidia-caps",
        237: "nvidia-nvlink",
        238: "nvidia-nvswitch",
        239: "nvidia-fs",
    }
    assert character_majors("Block devices:\n  8 sd\n") == {}
    assert character_majors("  1 mem\n") == {}


def test_a_task_opens_its_gpus_the_control_nodes_and_every_device_but_other_gpus() -> None:
    assert device_rules([3, 1, 3], PROC_DEVICES) == (
        "a",
        "b *:* rwm",
        "c *:* m",
        "c 1:* rwm",
        "c 4:* rwm",
        "c 136:* rwm",
        "c 235:* rwm",
        "c 236:* rwm",
        "c 237:* rwm",
        "c 238:* rwm",
        "c 195:1 rwm",
        "c 195:3 rwm",
        "c 195:254 rwm",
        "c 195:255 rwm",
    )
