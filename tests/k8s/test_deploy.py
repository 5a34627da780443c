"""`pai deploy`: rendering like kustomize, and apply/status/upgrade against a stateful API server."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from pai.cli.deploying import load_kustomization, merge
from pai.cli.main import app
from tests.support.k8s_api import FakeKubernetes, serving

K8S = Path(__file__).resolve().parents[2] / "k8s"
runner = CliRunner()


def key(obj: dict[str, Any]) -> tuple[str, str, str]:
    return obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


@pytest.mark.parametrize("overlay", ["base", "overlays/small", "overlays/large"])
def test_rendering_matches_kubectl_kustomize(overlay: str) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: the reference kustomize rendering is not available")
    out = subprocess.run(
        [kubectl, "kustomize", str(K8S / overlay)], capture_output=True, text=True, check=True
    )
    theirs = {key(d): d for d in yaml.safe_load_all(out.stdout) if d}
    ours = {key(d): d for d in load_kustomization(K8S / overlay)}
    assert ours == theirs


@pytest.mark.parametrize(
    ("base", "patch", "expected"),
    [
        ({"a": 1, "b": {"c": 2}}, {"b": {"d": 3}}, {"a": 1, "b": {"c": 2, "d": 3}}),
        (
            {"l": [{"name": "x", "v": 1}, {"name": "y"}]},
            {"l": [{"name": "x", "v": 2}]},
            {"l": [{"name": "x", "v": 2}, {"name": "y"}]},
        ),
        ({"l": [{"name": "x"}]}, {"l": [{"name": "z"}]}, {"l": [{"name": "x"}, {"name": "z"}]}),
        ({"args": ["a", "b"]}, {"args": ["c"]}, {"args": ["c"]}),
    ],
    ids=["maps merge", "named items merge", "new named items append", "plain lists are replaced"],
)
def test_patches_merge_like_strategic_merge(base: Any, patch: Any, expected: Any) -> None:
    assert merge(base, patch) == expected


def test_render_prints_every_object_and_the_packaged_rules() -> None:
    result = runner.invoke(app, ["deploy", "render", "--overlay", "large"])
    assert result.exit_code == 0, result.output
    docs = [d for d in yaml.safe_load_all(result.output) if d]
    assert docs[0]["kind"] == "Namespace"
    rules = next(d for d in docs if d["metadata"]["name"] == "pai-rules")
    assert "controllerPodPatterns" in rules["data"]["failure-rules.yaml"]


def test_an_unsupported_kustomization_key_is_named(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text("resources: []\nconfigMapGenerator: []\n")
    result = runner.invoke(app, ["deploy", "render", "--overlay", str(tmp_path)])
    assert result.exit_code == 2
    assert "configMapGenerator" in result.output
    assert "Traceback" not in result.output


def test_an_unknown_overlay_is_a_usage_error() -> None:
    result = runner.invoke(app, ["deploy", "render", "--overlay", "medium"])
    assert result.exit_code == 2
    assert "--overlay" in result.output


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[FakeKubernetes, Path]]:
    fake = FakeKubernetes()
    async with serving(fake) as url:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": url}}],
            "users": [{"name": "admin", "user": {"token": "t"}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "admin"}}],
            "current-context": "fake",
        }
        path = tmp_path / "kubeconfig"
        path.write_text(yaml.safe_dump(config))
        yield fake, path


async def pai(*args: str) -> Any:
    return await asyncio.to_thread(runner.invoke, app, list(args))


async def test_apply_creates_everything_then_configures_it_and_keeps_the_credentials(
    cluster: tuple[FakeKubernetes, Path],
) -> None:
    fake, kubeconfig = cluster
    first = await pai("deploy", "apply", "--overlay", "small", "--kubeconfig", str(kubeconfig))
    assert first.exit_code == 0, first.output
    assert "created Deployment pai/pai-orchestrator" in first.output
    assert "created StatefulSet pai/nats" in first.output
    assert fake.get(("apis/apps/v1", "statefulsets", "pai"), "nats")["spec"]["replicas"] == 3  # type: ignore[index]
    assert (
        fake.get(("apis/rbac.authorization.k8s.io/v1", "clusterroles", None), "pai-node-reader") is not None
    )
    credentials = fake.get(("api/v1", "secrets", "pai"), "pai-credentials")
    assert credentials is not None
    second = await pai("deploy", "apply", "--overlay", "small", "--kubeconfig", str(kubeconfig))
    assert second.exit_code == 0, second.output
    assert "configured Deployment pai/pai-rest" in second.output
    assert "kept Secret pai/pai-credentials" in second.output
    assert fake.get(("api/v1", "secrets", "pai"), "pai-credentials") == credentials


async def test_status_reports_progress_until_every_workload_is_ready(
    cluster: tuple[FakeKubernetes, Path],
) -> None:
    fake, kubeconfig = cluster
    assert (await pai("deploy", "apply", "--kubeconfig", str(kubeconfig))).exit_code == 0
    waiting = await pai("deploy", "status", "--kubeconfig", str(kubeconfig))
    assert waiting.exit_code == 3
    assert "StatefulSet/nats" in waiting.output
    assert "0/3 progressing" in waiting.output
    await mark_ready(fake)
    ready = await pai("deploy", "status", "--kubeconfig", str(kubeconfig))
    assert ready.exit_code == 0, ready.output
    assert "3/3 ready" in ready.output


async def test_upgrade_moves_the_images_to_the_new_tag(cluster: tuple[FakeKubernetes, Path]) -> None:
    fake, kubeconfig = cluster
    assert (await pai("deploy", "apply", "--kubeconfig", str(kubeconfig))).exit_code == 0
    result = await pai("deploy", "upgrade", "--tag", "0.2.0", "--wait", "0", "--kubeconfig", str(kubeconfig))
    assert result.exit_code == 0, result.output
    rest = fake.get(("apis/apps/v1", "deployments", "pai"), "pai-rest")
    assert rest is not None
    assert rest["spec"]["template"]["spec"]["containers"][0]["image"] == "ghcr.io/pai-platform/services:0.2.0"
    config = fake.get(("api/v1", "configmaps", "pai"), "pai-config")
    assert config is not None
    assert config["data"]["PAI_RUNTIME_IMAGE"] == "ghcr.io/pai-platform/runtime:0.2.0"


async def mark_ready(fake: FakeKubernetes) -> None:
    """Play the controllers: every Deployment and StatefulSet reports all replicas ready."""
    for collection in [c for c in fake.objects if c[1] in ("deployments", "statefulsets")]:
        for obj in list(fake.objects[collection].values()):
            replicas = obj["spec"].get("replicas", 1)
            obj["metadata"]["generation"] = 1
            obj["status"] = {
                "observedGeneration": 1,
                "readyReplicas": replicas,
                "updatedReplicas": replicas,
                "replicas": replicas,
            }
            await fake.put(collection, obj)


def test_a_missing_kubeconfig_is_a_usage_error_naming_the_option(tmp_path: Path) -> None:
    result = runner.invoke(app, ["deploy", "status", "--kubeconfig", str(tmp_path / "none")])
    assert result.exit_code == 2
    assert "--kubeconfig" in result.output
    assert "Traceback" not in result.output


async def test_an_unreachable_cluster_is_reported_without_a_traceback(
    cluster: tuple[FakeKubernetes, Path],
) -> None:
    _, kubeconfig = cluster
    config = yaml.safe_load(kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = "http://127.0.0.1:9"  # discard port: nothing listens
    kubeconfig.write_text(yaml.safe_dump(config))
    result = await pai("deploy", "status", "--kubeconfig", str(kubeconfig))
    assert result.exit_code == 1
    assert "cannot reach the cluster at http://127.0.0.1:9" in result.output
