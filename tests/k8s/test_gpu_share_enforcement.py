"""On Kubernetes, HAMi's device plugin holds GPU shares: the manifests say so to every service,
and REST reads it as enforced (docs/gpu-sharing.md says why MPS is not used there yet)."""

from __future__ import annotations

from pathlib import Path

import pytest

from libs.protocol import gpu_enforcement
from pai.cli.deploying import render
from services.rest.settings import RestSettings

K8S = Path(__file__).resolve().parents[2] / "k8s"


@pytest.mark.parametrize("overlay", ["base", "overlays/small", "overlays/large"])
def test_the_manifests_state_that_hami_enforces_gpu_shares(overlay: str) -> None:
    [config] = [
        o["data"]
        for o in render(K8S / overlay)
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "pai-config"
    ]
    settings = RestSettings.model_validate({"gpu_share_enforcement": config[gpu_enforcement.ENV]})
    stated = gpu_enforcement.parse(settings.gpu_share_enforcement)
    assert stated.enforced
    assert "HAMi" in stated.reason


@pytest.mark.parametrize(
    ("text", "enforced", "reason"),
    [
        ("enforced: NVIDIA MPS", True, "NVIDIA MPS"),
        ("advisory: the GPUs are simulated", False, "the GPUs are simulated"),
        ("", False, gpu_enforcement.UNSTATED),
        ("enforced:", False, gpu_enforcement.UNSTATED),
        ("maybe: who knows", False, gpu_enforcement.UNSTATED),
    ],
    ids=["enforced", "advisory", "unset", "enforced without a reason", "anything else"],
)
def test_the_statement_reads_as_enforced_only_when_it_says_so_and_why(
    text: str, enforced: bool, reason: str
) -> None:
    stated = gpu_enforcement.parse(text)
    assert (stated.enforced, stated.reason) == (enforced, reason)


@pytest.mark.parametrize("enforced", [True, False], ids=["enforced", "advisory"])
def test_a_statement_written_reads_back_the_same(enforced: bool) -> None:
    stated = gpu_enforcement.GpuShareEnforcement(enforced, "why: with a colon")
    assert gpu_enforcement.parse(str(stated)) == stated
