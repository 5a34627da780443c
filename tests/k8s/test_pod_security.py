"""Every pod of the platform meets Kubernetes' restricted Pod Security Standard; task pods but for
their host ports (docs/security.md, "Kubernetes")."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from pai.cli.deploying import render
from services.orchestrator.adapters.k8s_pods import PodSettings, TaskIdentity, as_manifest, build_pod
from services.orchestrator.adapters.specs import build_spec
from services.orchestrator.app import OrchestratorSettings
from services.orchestrator.core.frameworks import TaskKey
from tests.k8s.frameworks import JOB_ID, framework
from tests.k8s.restricted import HOST_PATH, HOST_PORTS, pod_specs, violations

K8S = Path(__file__).resolve().parents[2] / "k8s"
BASE = K8S / "base"
LABELS = ("enforce", "warn", "audit")


def base_objects() -> list[tuple[str, dict[str, Any]]]:
    """Every object of k8s/base as its file holds it, read without kustomize."""
    return [
        (path.name, obj)
        for path in sorted(BASE.glob("*.yaml"))
        if path.name != "kustomization.yaml"
        for obj in yaml.safe_load_all(path.read_text(encoding="utf-8"))
        if obj
    ]


def templates() -> list[tuple[str, str, dict[str, Any], dict[str, Any]]]:
    """(source, object, pod metadata, pod spec): the base's files, then each overlay as rendered."""
    found = [(source, *pod) for source, obj in base_objects() for pod in pod_specs(obj)]
    for overlay in ("small", "large"):
        found += [(overlay, *pod) for obj in render(K8S / "overlays" / overlay) for pod in pod_specs(obj)]
    return found


TEMPLATES = templates()


@pytest.mark.parametrize(
    ("source", "where", "metadata", "spec"), TEMPLATES, ids=[f"{t[0]}-{t[1]}" for t in TEMPLATES]
)
def test_every_pod_template_of_the_platform_meets_the_restricted_standard(
    source: str, where: str, metadata: dict[str, Any], spec: dict[str, Any]
) -> None:
    found = violations(f"{source} {where}", spec, metadata)
    assert not found, "\n".join(found)


def test_every_workload_of_the_base_is_checked_and_lives_in_the_restricted_namespace() -> None:
    workloads = {
        f"{obj['kind']}/{obj['metadata']['name']}": obj["metadata"]["namespace"]
        for _, obj in base_objects()
        if any(pod_specs(obj))
    }
    services = ("rest", "scheduler", "orchestrator", "monitor", "alerter", "events", "marketplace", "portal")
    assert set(workloads) == {"StatefulSet/nats", "StatefulSet/postgres"} | {
        f"Deployment/pai-{name}" for name in services
    }
    assert set(workloads.values()) == {"pai"}


def namespace_labels() -> dict[str, dict[str, str]]:
    return {
        obj["metadata"]["name"]: obj["metadata"].get("labels") or {}
        for _, obj in base_objects()
        if obj["kind"] == "Namespace"
    }


def test_the_platform_namespace_enforces_warns_and_audits_restricted() -> None:
    labels = namespace_labels()["pai"]
    for mode in LABELS:
        assert labels.get(f"pod-security.kubernetes.io/{mode}") == "restricted", mode


def test_the_jobs_namespace_admits_the_host_ports_of_task_pods(tmp_path: Path) -> None:
    """Baseline already refuses any hostPort, so only privileged admits a task pod."""
    assert namespace_labels()["pai-jobs"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert {v.split(": ")[1] for v in violations("task pod", task_pod(tmp_path)["spec"])} == {HOST_PORTS}


def task_pod(tmp_path: Path, settings: PodSettings | None = None) -> dict[str, Any]:
    key = TaskKey(0, "trainer", 1, 0)
    spec = build_spec(tmp_path, framework(), key, tmp_path / "task", True)
    pod = build_pod(
        spec,
        TaskIdentity(JOB_ID, "alice", "mnist_train", key),
        settings or PodSettings(shared_claim="pai-shared"),
        node="gpu-node-2",
        image="registry.example.com/team/pytorch:2.1",
        secret="s-secrets",
        image_pull_secret="s-registry",
    )
    return as_manifest(pod)


def test_a_task_pod_meets_the_restricted_standard_but_for_its_host_ports(tmp_path: Path) -> None:
    pod = task_pod(tmp_path)
    found = violations("task pod", pod["spec"], pod["metadata"], allow=frozenset({HOST_PORTS}))
    assert not found, "\n".join(found)
    assert any(p.get("hostPort") for p in pod["spec"]["containers"][0]["ports"])


def test_the_task_user_is_the_orchestrators_setting_and_never_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PAI_POD_TASK_UID", "2000")
    settings = OrchestratorSettings()
    assert (settings.pod_task_uid, settings.pod_task_gid) == (2000, 1000)
    config = next(obj for _, obj in base_objects() if obj["metadata"]["name"] == "pai-config")["data"]
    assert (config["PAI_POD_TASK_UID"], config["PAI_POD_TASK_GID"]) == ("1000", "1000")
    with pytest.raises(ValidationError, match="pod_task_uid"):
        OrchestratorSettings(pod_task_uid=0)


def test_a_task_pod_without_a_shared_claim_also_mounts_the_node(tmp_path: Path) -> None:
    pod = task_pod(tmp_path, PodSettings(shared_claim=None))
    broken = {v.split(": ")[1] for v in violations("task pod", pod["spec"], pod["metadata"])}
    assert broken == {HOST_PORTS, HOST_PATH, "volume types"}


def _container(spec: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = spec["containers"][0]
    return container


COMPLIANT: dict[str, Any] = {
    "securityContext": {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "seccompProfile": {"type": "RuntimeDefault"},
    },
    "containers": [
        {
            "name": "c",
            "image": "x",
            "ports": [{"containerPort": 80}],
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        }
    ],
    "volumes": [{"name": "v", "emptyDir": {}}],
}
Breaking = Callable[[dict[str, Any], dict[str, Any]], None]
BREAKINGS: list[tuple[str, str, Breaking]] = [
    ("host network", "host namespaces", lambda s, m: s.update(hostNetwork=True)),
    ("host PID", "host namespaces", lambda s, m: s.update(hostPID=True)),
    (
        "privileged",
        "privileged containers",
        lambda s, m: _container(s)["securityContext"].update(privileged=True),
    ),
    (
        "hostPath",
        f"{HOST_PATH},volume types",
        lambda s, m: s["volumes"].append({"name": "h", "hostPath": {"path": "/"}}),
    ),
    ("hostPort", HOST_PORTS, lambda s, m: _container(s)["ports"][0].update(hostPort=80)),
    ("nfs volume", "volume types", lambda s, m: s["volumes"].append({"name": "n", "nfs": {"server": "x"}})),
    (
        "no allowPrivilegeEscalation",
        "privilege escalation",
        lambda s, m: _container(s)["securityContext"].pop("allowPrivilegeEscalation"),
    ),
    ("no drop ALL", "capabilities", lambda s, m: _container(s)["securityContext"].pop("capabilities")),
    (
        "adds CHOWN",
        "capabilities",
        lambda s, m: _container(s)["securityContext"]["capabilities"].update(add=["CHOWN"]),
    ),
    (
        "adds SYS_ADMIN",
        "capabilities (baseline),capabilities",
        lambda s, m: _container(s)["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]),
    ),
    ("no runAsNonRoot", "running as non-root", lambda s, m: s["securityContext"].pop("runAsNonRoot")),
    ("runAsUser 0", "running as non-root user", lambda s, m: s["securityContext"].update(runAsUser=0)),
    ("no seccomp", "seccomp", lambda s, m: s["securityContext"].pop("seccompProfile")),
    (
        "unconfined container",
        "seccomp",
        lambda s, m: _container(s)["securityContext"].update(seccompProfile={"type": "Unconfined"}),
    ),
    (
        "proc unmasked",
        "/proc mount type",
        lambda s, m: _container(s)["securityContext"].update(procMount="Unmasked"),
    ),
    (
        "unsafe sysctl",
        "sysctls",
        lambda s, m: s["securityContext"].update(sysctls=[{"name": "kernel.msgmax"}]),
    ),
    ("SELinux user", "SELinux", lambda s, m: s["securityContext"].update(seLinuxOptions={"user": "root"})),
    (
        "AppArmor unconfined",
        "AppArmor",
        lambda s, m: m.update(annotations={"container.apparmor.security.beta.kubernetes.io/c": "unconfined"}),
    ),
]


def test_the_check_passes_a_compliant_pod() -> None:
    assert violations("Pod/ok", COMPLIANT) == []


@pytest.mark.parametrize(("case", "control", "breaking"), BREAKINGS, ids=[b[0] for b in BREAKINGS])
def test_the_check_names_the_object_and_the_control_each_breaking_breaks(
    case: str, control: str, breaking: Breaking
) -> None:
    """A control a breaking names more than once (hostPath is no restricted volume type either)
    is given comma-separated."""
    spec = copy.deepcopy(COMPLIANT)
    metadata: dict[str, Any] = {}
    breaking(spec, metadata)
    found = violations("Pod/broken", spec, metadata)
    assert found, case
    assert all(v.startswith("Pod/broken: ") for v in found), found
    controls = set(control.split(","))
    assert {v.split(": ")[1] for v in found} == controls, found
    assert violations("Pod/broken", spec, metadata, allow=frozenset(controls)) == []
