"""Pod phases, container states and reasons mapped to task observations and failure verdicts."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client import ApiClient, V1Pod

from libs.failures import default_rules
from services.orchestrator.adapters.k8s_status import Observation, deleted, observe, timed_out, verdict


def pod(
    phase: str,
    *,
    reason: str = "",
    message: str = "",
    main: dict[str, Any] | None = None,
    init: dict[str, Any] | None = None,
) -> V1Pod:
    status: dict[str, Any] = {"phase": phase, "reason": reason or None, "message": message or None}
    if main is not None:
        status["containerStatuses"] = [
            {"name": "main", "image": "i", "imageID": "", "ready": False, "restartCount": 0, "state": main}
        ]
    if init is not None:
        status["initContainerStatuses"] = [
            {
                "name": "pai-init",
                "image": "i",
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": init,
            }
        ]
    raw = {"metadata": {"name": "p"}, "status": status}
    result: V1Pod = ApiClient().deserialize(json.dumps(raw), "V1Pod", "application/json")
    return result


def terminated(code: int, reason: str = "Error", message: str = "") -> dict[str, Any]:
    return {"terminated": {"exitCode": code, "reason": reason, "message": message or None}}


def waiting(reason: str, message: str = "") -> dict[str, Any]:
    return {"waiting": {"reason": reason, "message": message or None}}


RULES = default_rules()


@pytest.mark.parametrize(
    ("the_pod", "kind", "exit_code", "reason"),
    [
        (pod("Pending"), "pending", None, ""),
        (pod("Pending", init={"running": {}}), "pending", None, ""),
        (pod("Pending", main=waiting("ContainerCreating")), "pending", None, ""),
        (pod("Running", main={"running": {}}), "running", None, ""),
        (pod("Succeeded", main=terminated(0, "Completed")), "ended", 0, ""),
        (pod("Succeeded"), "ended", 0, ""),
        (pod("Failed", main=terminated(3)), "ended", 3, "Error"),
        (pod("Failed", main=terminated(137, "OOMKilled")), "ended", 137, "OOMKilled"),
        (pod("Failed", reason="Evicted", message="low on memory"), "ended", None, "Evicted"),
        (pod("Failed", init=terminated(246)), "ended", 246, "Error"),
        (pod("Pending", main=waiting("ErrImagePull", "pull access denied")), "stuck", None, "ErrImagePull"),
        (pod("Pending", main=waiting("ImagePullBackOff")), "stuck", None, "ImagePullBackOff"),
        (pod("Pending", init=waiting("ErrImagePull")), "stuck", None, "ErrImagePull"),
        (
            pod("Pending", main=waiting("CreateContainerConfigError")),
            "stuck",
            None,
            "CreateContainerConfigError",
        ),
    ],
    ids=[
        "pending",
        "init running",
        "creating",
        "running",
        "succeeded",
        "succeeded without statuses",
        "failed with a code",
        "oom killed",
        "evicted",
        "init failed",
        "image pull error",
        "image pull back-off",
        "runtime image pull error",
        "config error",
    ],
)
def test_observe_maps_the_pod(the_pod: V1Pod, kind: str, exit_code: int | None, reason: str) -> None:
    seen = observe(the_pod)
    assert (seen.kind, seen.exit_code, seen.reason) == (kind, exit_code, reason)


@pytest.mark.parametrize(
    ("seen", "code", "phrase", "retry"),
    [
        (
            observe(pod("Failed", main=terminated(137, "OOMKilled"))),
            -1200,
            "UserContainerDockerOOMKilled",
            "permanent",
        ),
        (observe(pod("Failed", reason="Evicted")), -1000, "TaskEvicted", "transient"),
        (observe(pod("Failed", reason="NodeLost")), -1001, "NodeLost", "transient"),
        (observe(pod("Failed", main=terminated(143))), 143, "KilledBySigterm", "transient"),
        (observe(pod("Failed", main=terminated(7))), 7, "UndefinedPositiveExitCode", "unknown"),
        (
            timed_out(observe(pod("Pending", main=waiting("ImagePullBackOff"))), 300),
            254,
            "ContainerImageNotExists",
            "permanent",
        ),
        (
            timed_out(observe(pod("Pending", main=waiting("CreateContainerConfigError"))), 60),
            -1201,
            "ContainerCreationFailed",
            "unknown",
        ),
        (
            deleted(observe(pod("Running", main={"running": {}}))),
            -300,
            "TaskFailedWithoutExitCode",
            "unknown",
        ),
        (deleted(None), -300, "TaskFailedWithoutExitCode", "unknown"),
    ],
    ids=[
        "oom",
        "evicted",
        "node lost",
        "sigterm",
        "unknown code",
        "image pull timeout",
        "config timeout",
        "deleted while running",
        "deleted unseen",
    ],
)
def test_ended_pods_are_analysed_with_the_platform_rules(
    seen: Observation, code: int, phrase: str, retry: str
) -> None:
    result = verdict(RULES, seen)
    assert (result.code, result.phrase, result.type) == (code, phrase, retry)


def test_a_timed_out_pod_says_how_long_it_waited() -> None:
    seen = timed_out(observe(pod("Pending", main=waiting("ErrImagePull"))), 42)
    assert seen.kind == "ended"
    assert "ErrImagePull for 42s" in seen.status.message
