"""What the platform declares to every service: simulated GPUs and whether GPU shares are enforced."""

from __future__ import annotations

import pytest

from libs.protocol import gpu_enforcement, simulated_gpus
from libs.protocol.gpu_enforcement import GpuShareEnforcement
from libs.protocol.simulated_gpus import SimulatedGpus, SimulatedGpusError


@pytest.mark.parametrize(
    ("text", "count", "model"),
    [
        ("8", 8, "simulated"),
        ("1", 1, "simulated"),
        ("1024", 1024, "simulated"),
        ("8:V100", 8, "V100"),
        ("  2 :  A100-80G_x.1  ", 2, "A100-80G_x.1"),
        ("4:" + "m" * 64, 4, "m" * 64),
    ],
)
def test_a_declaration_of_simulated_gpus_is_read(text: str, count: int, model: str) -> None:
    assert simulated_gpus.parse(text) == SimulatedGpus(count, model)


def test_a_declaration_reads_back_as_it_is_written() -> None:
    assert str(SimulatedGpus(8, "V100")) == "8:V100"
    assert str(SimulatedGpus(2)) == "2:simulated"
    assert simulated_gpus.parse(str(SimulatedGpus(3, "T4"))) == SimulatedGpus(3, "T4")


@pytest.mark.parametrize(
    "text", ["", "x", "8:", "8:V100:2", "-1", "2.5", "8:-V100", "8:V 100", "4:" + "m" * 65]
)
def test_a_declaration_not_of_the_form_names_the_form(text: str) -> None:
    with pytest.raises(SimulatedGpusError) as caught:
        simulated_gpus.parse(text)
    assert str(caught.value) == (
        f"--gpus {text!r}: expected a count or COUNT:MODEL such as 2 or 8:V100 "
        "(the model: letters, digits, '.', '_' or '-')"
    )


@pytest.mark.parametrize("text", ["0", "1025", "0:V100", "99999"])
def test_a_count_out_of_range_names_the_range(text: str) -> None:
    with pytest.raises(SimulatedGpusError) as caught:
        simulated_gpus.parse(text)
    assert str(caught.value) == f"--gpus {text!r}: the count must be between 1 and 1024"


def test_the_declaration_is_read_from_the_environment_or_the_value_given() -> None:
    assert simulated_gpus.from_env({"PAI_SIMULATED_GPUS": "2:T4"}) == SimulatedGpus(2, "T4")
    assert simulated_gpus.from_env({"PAI_SIMULATED_GPUS": "2:T4"}, value="3") == SimulatedGpus(3)
    assert simulated_gpus.from_env({"PAI_SIMULATED_GPUS": "2:T4"}, value="") is None
    assert simulated_gpus.from_env({"PAI_SIMULATED_GPUS": "   "}) is None
    assert simulated_gpus.from_env({"OTHER": "2"}) is None
    assert simulated_gpus.from_env() is None
    assert simulated_gpus.from_env(None, value="5:V100") == SimulatedGpus(5, "V100")
    with pytest.raises(SimulatedGpusError):
        simulated_gpus.from_env({"PAI_SIMULATED_GPUS": "many"})


@pytest.mark.parametrize(
    ("text", "enforced", "reason"),
    [
        ("enforced: MPS control daemon running", True, "MPS control daemon running"),
        ("  Enforced :  by MPS  ", True, "by MPS"),
        ("ENFORCED:why: with a colon", True, "why: with a colon"),
        ("advisory: the GPUs are simulated", False, "the GPUs are simulated"),
        (" ADVISORY :off ", False, "off"),
    ],
)
def test_a_stated_enforcement_is_read(text: str, enforced: bool, reason: str) -> None:
    assert gpu_enforcement.parse(text) == GpuShareEnforcement(enforced, reason)


@pytest.mark.parametrize(
    "text", ["", "enforced", "enforced:", "enforced:   ", "advisory:", "advisory", "yes: MPS"]
)
def test_anything_else_reads_as_advisory_and_unstated(text: str) -> None:
    stated = gpu_enforcement.parse(text)
    assert stated == GpuShareEnforcement(False, gpu_enforcement.UNSTATED)
    assert str(stated) == (
        "advisory: this platform has not stated that GPU shares are enforced "
        "(PAI_GPU_SHARE_ENFORCEMENT is not set): a task is told its share and may use more"
    )


def test_an_enforcement_is_written_for_services_and_described_for_people() -> None:
    enforced = GpuShareEnforcement(True, "MPS")
    advisory = GpuShareEnforcement(False, "simulated GPUs")
    assert str(enforced) == "enforced: MPS"
    assert str(advisory) == "advisory: simulated GPUs"
    assert enforced.describe() == "enforced (MPS)"
    assert advisory.describe() == "advisory, not enforced (simulated GPUs)"
