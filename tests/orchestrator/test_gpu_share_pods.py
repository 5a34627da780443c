"""A task sharing its GPU: HAMi's resource names on Kubernetes, the share in the task's environment."""

from __future__ import annotations

from runtime.environment import gpu_share_environment
from services.orchestrator.adapters.k8s_pods import PodSettings, share_limits


def test_a_half_gpu_with_memory_asks_hami_for_cores_and_memory() -> None:
    limits = share_limits(500, 8192, PodSettings())
    assert limits == {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "50", "nvidia.com/gpumem": "8192"}


def test_whole_gpus_ask_for_no_share() -> None:
    assert share_limits(None, None, PodSettings()) == {}


def test_the_task_sees_its_share_as_documented_variables() -> None:
    env = gpu_share_environment(250, 4096)
    assert env["PAI_GPU_SHARE_MILLI"] == "250"
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=4096M"
    assert env["CUDA_DEVICE_MEMORY_LIMIT"] == "4096m"
    assert env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.250"
    assert "PAI_GPU_MEMORY_MIB" not in gpu_share_environment(250, None)
