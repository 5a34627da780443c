"""Reading a pod's status: is its task pending, running, stuck or over, and with what exit.

Pure functions over V1Pod (no API calls), so every phase, container state and reason can be
table-tested. The executor feeds each watched pod through `observe` and turns `ended` and
`stuck` observations into the task's exit, analysed with the platform-stage failure rules
(libs.failures): a pod reason such as Evicted or NodeLost, a container reason such as OOMKilled
or ErrImagePull, and the main container's exit code are exactly what those rules look at.

A container that waits on an image pull never fails by itself (Kubernetes backs off forever), so
a waiting reason in STUCK_REASONS is `stuck`: the executor gives it a deadline and then fails the
task with that reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from kubernetes.client import V1ContainerStatus, V1Pod

from libs.failures import ContainerStatus, FailureVerdict, PodStatus, RuleSet, analyze
from services.orchestrator.adapters.k8s_pods import INIT_CONTAINER, MAIN_CONTAINER

Kind = Literal["pending", "running", "stuck", "ended"]

STUCK_REASONS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "CreateContainerConfigError",
        "CreateContainerError",
    }
)


@dataclass(frozen=True)
class Observation:
    kind: Kind
    exit_code: int | None = None
    """The main container's exit code when it terminated (None if it never ran)."""
    status: PodStatus = field(default_factory=PodStatus)
    """The evidence for failure analysis: pod reason and message, every container's state."""
    reason: str = ""
    """The reason that makes a pod stuck, or that ended it."""


def _container(status: V1ContainerStatus) -> tuple[ContainerStatus, bool]:
    """The container's state for the failure rules, and whether it is waiting on a stuck reason."""
    state = status.state
    if state is not None and state.terminated is not None:
        t = state.terminated
        return ContainerStatus(
            name=status.name, reason=t.reason or "", message=t.message or "", exit_code=t.exit_code
        ), False
    if state is not None and state.waiting is not None:
        w = state.waiting
        reason = w.reason or ""
        return ContainerStatus(
            name=status.name, reason=reason, message=w.message or ""
        ), reason in STUCK_REASONS
    return ContainerStatus(name=status.name), False


def pod_status(pod: V1Pod) -> tuple[PodStatus, str]:
    """The failure-rule view of the pod, and the first stuck reason among its containers ('' if none)."""
    st = pod.status
    containers: list[ContainerStatus] = []
    stuck = ""
    if st is not None:
        for status in [*(st.init_container_statuses or []), *(st.container_statuses or [])]:
            container, waiting = _container(status)
            containers.append(container)
            if waiting and not stuck:
                stuck = container.reason
    return (
        PodStatus(
            reason=(st.reason or "") if st is not None else "",
            message=(st.message or "") if st is not None else "",
            containers=tuple(containers),
        ),
        stuck,
    )


def _exit_code(status: PodStatus) -> int | None:
    main = next((c for c in status.containers if c.name == MAIN_CONTAINER), None)
    if main is not None and main.exit_code is not None:
        return main.exit_code
    init = next((c for c in status.containers if c.name == INIT_CONTAINER), None)
    if init is not None and init.exit_code not in (None, 0):
        return init.exit_code
    return None


def observe(pod: V1Pod) -> Observation:
    """What the pod says about its task right now."""
    status, stuck = pod_status(pod)
    phase = pod.status.phase if pod.status is not None else None
    if phase in ("Succeeded", "Failed"):
        code = _exit_code(status)
        if phase == "Succeeded" and code is None:
            code = 0
        reason = status.reason or next((c.reason for c in status.containers if c.reason and c.exit_code), "")
        return Observation("ended", code, status, reason)
    if stuck:
        return Observation("stuck", None, status, stuck)
    if phase == "Running":
        return Observation("running", None, status)
    return Observation("pending", None, status)


def deleted(observation: Observation | None) -> Observation:
    """The pod vanished before its task ended (deleted by someone, or its node was removed)."""
    base = observation.status if observation is not None else PodStatus()
    status = PodStatus(
        reason=base.reason or "PodDeleted",
        message=base.message or "the task's pod was deleted before the task ended",
        containers=base.containers,
    )
    return Observation("ended", None, status, status.reason)


def timed_out(observation: Observation, seconds: float) -> Observation:
    """A stuck pod after its deadline: ended, with the reason it was stuck on."""
    message = f"the task's container stayed in {observation.reason} for {seconds:g}s"
    status = PodStatus(
        reason=observation.status.reason, message=message, containers=observation.status.containers
    )
    return Observation("ended", None, status, observation.reason)


def verdict(rules: RuleSet, observation: Observation) -> FailureVerdict:
    """The platform-stage failure analysis of an ended pod."""
    return analyze(
        rules,
        exit_code=observation.exit_code,
        platform_log=observation.status.message,
        stage="platform",
        pod=observation.status,
    )
