"""GPU discovery through NVML, with a stand-in for the driver at the pynvml boundary."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from libs.protocol import simulated_gpus
from services.monitor.adapters import gpus, inventory

MB = 2**20


class FakeNvml:
    """The slice of pynvml the monitor calls: two cards, the second without ECC support."""

    class NVMLError(Exception):
        pass

    NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0

    def __init__(self, *, init_fails: bool = False) -> None:
        self.init_fails = init_fails
        self.initialised = 0
        self.cards = [
            {
                "name": b"Tesla V100-SXM2-16GB",
                "uuid": "GPU-aaa",
                "used": 1024,
                "total": 16384,
                "util": (37, 12),
                "ecc": (3, 1),
                "procs": [(4242, 900)],
            },
            {
                "name": "NVIDIA GeForce RTX 3090",
                "uuid": "GPU-bbb",
                "used": 0,
                "total": 24576,
                "util": (0, 0),
                "ecc": None,
                "procs": [],
            },
        ]

    def nvmlInit(self) -> None:
        if self.init_fails:
            raise self.NVMLError("NVML Shared Library Not Found")
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self.initialised -= 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.cards)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> dict[str, Any]:
        return self.cards[index]

    def nvmlDeviceGetName(self, card: dict[str, Any]) -> Any:
        return card["name"]

    def nvmlDeviceGetUUID(self, card: dict[str, Any]) -> str:
        return str(card["uuid"])

    def nvmlDeviceGetMemoryInfo(self, card: dict[str, Any]) -> SimpleNamespace:
        return SimpleNamespace(used=card["used"] * MB, total=card["total"] * MB, free=0)

    def nvmlDeviceGetUtilizationRates(self, card: dict[str, Any]) -> SimpleNamespace:
        return SimpleNamespace(gpu=card["util"][0], memory=card["util"][1])

    def nvmlDeviceGetTotalEccErrors(self, card: dict[str, Any], kind: int, counter: int) -> int:
        if card["ecc"] is None:
            raise self.NVMLError("Not Supported")
        return int(card["ecc"][kind])

    def nvmlDeviceGetComputeRunningProcesses(self, card: dict[str, Any]) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=used * MB) for pid, used in card["procs"]]


def test_nvml_reports_model_memory_utilisation_ecc_and_processes() -> None:
    nvml = FakeNvml()
    found = gpus.nvml_query(nvml)  # type: ignore[arg-type]
    assert found is not None
    cards, processes = found
    assert [(c.index, c.uuid, c.model) for c in cards] == [
        (0, "GPU-aaa", "Tesla V100-SXM2-16GB"),
        (1, "GPU-bbb", "NVIDIA GeForce RTX 3090"),
    ]
    v100, rtx = cards
    assert (v100.memory_used_mb, v100.memory_total_mb) == (1024, 16384)
    assert (v100.utilization, v100.memory_utilization) == (37, 12)
    assert (v100.ecc_single, v100.ecc_double) == (3, 1)
    assert (rtx.ecc_single, rtx.ecc_double) == (0, 0), "no ECC on the card reads as 0, not a failure"
    assert [(p.pid, p.gpu_uuid, p.memory_used_mb) for p in processes] == [(4242, "GPU-aaa", 900)]
    assert nvml.initialised == 0, "every init is shut down again"


def test_the_node_offers_the_gpus_nvml_finds_and_real_ones_win_over_a_declaration() -> None:
    assert inventory.detect_gpus(FakeNvml()) == (2, "Tesla V100-SXM2-16GB")  # type: ignore[arg-type]


def test_without_nvml_the_monitor_falls_back_and_a_declaration_fills_an_empty_machine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broken = FakeNvml(init_fails=True)
    assert gpus.nvml_query(broken) is None  # type: ignore[arg-type]
    monkeypatch.setattr(gpus, "load_nvml", lambda: broken)
    monkeypatch.setattr("shutil.which", lambda name: None)  # and no nvidia-smi
    assert inventory.detect_gpus() == (0, None)
    declared = simulated_gpus.parse("8:V100")
    *_, count, model = inventory.detect_resources(simulated=declared)
    assert (count, model) == (8, "V100")
    monkeypatch.setattr(gpus, "load_nvml", FakeNvml)
    *_, count, model = inventory.detect_resources(simulated=declared)
    assert (count, model) == (2, "Tesla V100-SXM2-16GB"), "real GPUs are never hidden by a declaration"


@pytest.mark.parametrize(
    ("text", "count", "model"),
    [("2", 2, "simulated"), ("8:V100", 8, "V100"), (" 4 : A100-80GB ", 4, "A100-80GB")],
)
def test_a_declaration_reads_a_count_and_an_optional_model(text: str, count: int, model: str) -> None:
    assert simulated_gpus.parse(text) == simulated_gpus.SimulatedGpus(count, model)


@pytest.mark.parametrize("text", ["", "two", "0", "2:", "2:V 100", "-1", "99999"])
def test_a_bad_declaration_names_the_flag_and_the_form(text: str) -> None:
    with pytest.raises(simulated_gpus.SimulatedGpusError, match="--gpus"):
        simulated_gpus.parse(text)
