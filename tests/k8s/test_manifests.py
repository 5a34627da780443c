"""Every manifest (base and overlays, plus a task pod) checked offline against the Kubernetes schemas."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pai.cli.deploying import render
from services.orchestrator.adapters.k8s_pods import PodSettings, TaskIdentity, as_manifest, build_pod
from services.orchestrator.adapters.specs import build_spec
from services.orchestrator.core.frameworks import TaskKey
from tests.k8s.frameworks import JOB_ID, framework
from tests.k8s.schemas import check, problems

K8S = Path(__file__).resolve().parents[2] / "k8s"
OVERLAYS = {"base": K8S / "base", "small": K8S / "overlays" / "small", "large": K8S / "overlays" / "large"}
RENDERED = {name: render(path) for name, path in OVERLAYS.items()}
ALL = [(name, obj) for name, objects in RENDERED.items() for obj in objects]
NO_VALIDATOR = (
    "kubernetes-validate is not installed: add it to the lock file to check the JSON schemas offline"
)
SERVICES = ("rest", "scheduler", "orchestrator", "monitor", "alerter", "events", "marketplace", "portal")


def ident(item: Any) -> str:
    if isinstance(item, tuple):
        return f"{item[0]}-{item[1]['kind']}-{item[1]['metadata']['name']}"
    return ""


def by(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)


def task_pod(tmp_path: Path) -> dict[str, Any]:
    key = TaskKey(0, "trainer", 0, 0)
    spec = build_spec(tmp_path, framework(), key, tmp_path / "t", True)
    pod = build_pod(
        spec,
        TaskIdentity(JOB_ID, "alice", "mnist_train", key),
        PodSettings(),
        node="n",
        image="x",
        secret="s",
    )
    return as_manifest(pod)


@pytest.mark.parametrize("item", ALL, ids=ident)
def test_every_manifest_matches_the_kubernetes_models(item: tuple[str, dict[str, Any]]) -> None:
    assert check(item[1]) == []


def test_the_task_pod_matches_the_kubernetes_models(tmp_path: Path) -> None:
    assert check(task_pod(tmp_path)) == []


def test_the_model_check_finds_misplaced_and_mistyped_fields() -> None:
    broken = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}, "spec": {"port": 80}}
    assert problems(broken, "V1Service") == [".spec.port: no such field in V1ServiceSpec"]
    mistyped = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "x"},
        "spec": {"replicas": "2"},
    }
    assert any("expected int" in p for p in check(mistyped))


@pytest.mark.parametrize("item", ALL, ids=ident)
def test_every_manifest_validates_against_the_kubernetes_json_schema(
    item: tuple[str, dict[str, Any]],
) -> None:
    kubernetes_validate = pytest.importorskip(
        "kubernetes_validate",
        reason=NO_VALIDATOR,
    )
    kubernetes_validate.validate(item[1], desired_version="1.30", strict=True)


def test_the_task_pod_validates_against_the_kubernetes_json_schema(tmp_path: Path) -> None:
    kubernetes_validate = pytest.importorskip(
        "kubernetes_validate",
        reason=NO_VALIDATOR,
    )
    kubernetes_validate.validate(task_pod(tmp_path), desired_version="1.30", strict=True)


@pytest.mark.parametrize("overlay", list(OVERLAYS))
def test_every_service_runs_from_its_module_with_the_shared_config(overlay: str) -> None:
    objects = RENDERED[overlay]
    for name in SERVICES:
        container = by(objects, "Deployment", f"pai-{name}")["spec"]["template"]["spec"]["containers"][0]
        assert container["command"] == ["python", "-m", f"services.{name}"]
        assert {"name": "PAI_SERVICE_NAME", "value": name} in container["env"]
        assert container["envFrom"] == [{"configMapRef": {"name": "pai-config"}}]
    config = by(objects, "ConfigMap", "pai-config")["data"]
    assert {"PAI_NATS_URL", "PAI_DATA_DIR", "PAI_LOG_FORMAT", "PAI_REST_HOST", "PAI_REST_PORT"} <= set(config)


def test_nats_is_a_three_server_jetstream_cluster() -> None:
    objects = RENDERED["base"]
    nats = by(objects, "StatefulSet", "nats")
    assert nats["spec"]["replicas"] == 3
    conf = by(objects, "ConfigMap", "nats-config")["data"]["nats.conf"]
    assert "jetstream" in conf
    assert all(f"nats-{i}.nats-headless.pai.svc:6222" in conf for i in range(3))


def test_the_scheduler_orchestrator_monitor_and_alerter_run_a_leader_and_a_standby() -> None:
    objects = RENDERED["base"]
    for name in ("scheduler", "orchestrator", "monitor", "alerter"):
        deployment = by(objects, "Deployment", f"pai-{name}")
        assert deployment["spec"]["replicas"] == 2
        assert by(objects, "PodDisruptionBudget", f"pai-{name}")["spec"]["maxUnavailable"] == 1
    orchestrator = by(objects, "Deployment", "pai-orchestrator")["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "PAI_LEADER_LEASE", "value": "true"} in orchestrator["env"]


def test_replicas_spread_over_nodes_and_streams_live_on_every_nats_server() -> None:
    objects = RENDERED["base"]
    for name in SERVICES:
        deployment = by(objects, "Deployment", f"pai-{name}")
        assert deployment["spec"]["replicas"] >= 2, name
        terms = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
        [term] = terms["preferredDuringSchedulingIgnoredDuringExecution"]
        assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
        assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == {
            "app.kubernetes.io/name": f"pai-{name}"
        }
    assert by(objects, "PodDisruptionBudget", "nats")["spec"]["maxUnavailable"] == 1
    assert by(objects, "ConfigMap", "pai-config")["data"]["PAI_STREAM_REPLICAS"] == "3"
    small = RENDERED["small"]
    assert {by(small, "Deployment", f"pai-{name}")["spec"]["replicas"] for name in SERVICES} == {1}


def test_the_orchestrator_has_least_privilege() -> None:
    objects = RENDERED["base"]
    rules = by(objects, "Role", "pai-task-manager")
    assert by(objects, "Role", "pai-task-manager")["metadata"]["namespace"] == "pai-jobs"
    granted = {(r, v) for rule in rules["rules"] for r in rule["resources"] for v in rule["verbs"]}
    assert granted == {("pods", v) for v in ("get", "list", "watch", "create", "delete")} | {
        ("pods/log", "get")
    } | {("secrets", v) for v in ("get", "create", "delete")}
    nodes = by(objects, "ClusterRole", "pai-node-reader")["rules"]
    assert nodes == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]
    for obj in objects:
        for rule in obj.get("rules") or []:
            assert "*" not in rule["verbs"], obj["metadata"]["name"]
            assert "*" not in rule["resources"], obj["metadata"]["name"]
    deployment = by(objects, "Deployment", "pai-orchestrator")
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "pai-orchestrator"
    for name in ("rest", "scheduler", "alerter"):
        spec = by(objects, "Deployment", f"pai-{name}")["spec"]["template"]["spec"]
        assert spec["serviceAccountName"] == "pai-service"


def test_overlays_size_the_platform_differently() -> None:
    small, large = RENDERED["small"], RENDERED["large"]
    assert by(small, "Deployment", "pai-rest")["spec"]["replicas"] == 1
    assert by(large, "Deployment", "pai-rest")["spec"]["replicas"] == 4

    def storage(objects: list[dict[str, Any]]) -> str:
        claim = by(objects, "StatefulSet", "nats")["spec"]["volumeClaimTemplates"][0]
        return str(claim["spec"]["resources"]["requests"]["storage"])

    assert (storage(small), storage(RENDERED["base"]), storage(large)) == ("5Gi", "10Gi", "200Gi")
    rest = by(large, "Deployment", "pai-rest")["spec"]["template"]["spec"]["containers"][0]
    assert rest["resources"]["requests"]["cpu"] == "1"
    assert any(e["name"] == "PAI_DATABASE_URL" for e in rest["env"])  # the patch merged, not replaced


def test_scrape_annotations_point_at_metrics_ports() -> None:
    objects = RENDERED["base"]
    monitor = by(objects, "Service", "pai-monitor")["metadata"]["annotations"]
    assert monitor["prometheus.io/scrape"] == "true"
    ports = {p["port"] for p in by(objects, "Service", "pai-monitor")["spec"]["ports"]}
    assert int(monitor["prometheus.io/port"]) in ports


def test_the_rules_config_map_carries_the_packaged_failure_rules() -> None:
    data = by(RENDERED["small"], "ConfigMap", "pai-rules")["data"]
    assert "controllerPodPatterns" in data["failure-rules.yaml"]
