"""The Kubernetes executor offers the local executor's interface, so the handlers can drive either."""

from __future__ import annotations

import inspect

import pytest

from services.orchestrator.adapters.kubernetes import KubernetesExecutor
from services.orchestrator.adapters.local import LocalExecutor

USED_BY_HANDLERS = ("start", "adopt", "probe", "stop", "report", "exit_of", "close", "task_dir")


@pytest.mark.parametrize("name", USED_BY_HANDLERS)
def test_each_method_has_the_local_executors_signature(name: str) -> None:
    local = inspect.signature(getattr(LocalExecutor, name))
    kube = inspect.signature(getattr(KubernetesExecutor, name))
    assert kube == local
    assert inspect.iscoroutinefunction(getattr(KubernetesExecutor, name)) == inspect.iscoroutinefunction(
        getattr(LocalExecutor, name)
    )
