"""The pod of a task attempt, built from the task spec: every field the issue asks for, by table."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from libs.failures import default_rules_text
from libs.protocol.jobs import stored_job
from runtime.spec import TaskSpec, load_spec
from services.orchestrator.adapters.k8s_pods import (
    PodSettings,
    TaskIdentity,
    as_manifest,
    build_pod,
    image_of,
    key_of,
    label_value,
    pod_name,
    registry_config,
)
from services.orchestrator.adapters.specs import build_spec
from services.orchestrator.core.frameworks import TaskKey
from tests.k8s.frameworks import JOB_ID, framework, job_config

KEY = TaskKey(0, "trainer", 1, 2)
SETTINGS = PodSettings(namespace="pai-jobs", runtime_image="pai/runtime:1.0", shared_claim="pai-shared")


def pod_dict(tmp_path: Path, settings: PodSettings = SETTINGS, *, secrets: bool = True) -> dict[str, Any]:
    fw = framework()
    spec = build_spec(tmp_path, fw, KEY, tmp_path / "task", secrets)
    who = TaskIdentity(JOB_ID, "alice", "mnist_train", KEY)
    pod = build_pod(
        spec,
        who,
        settings,
        node="gpu-node-2",
        image="registry.example.com/team/pytorch:2.1",
        secret="s-secrets" if secrets else None,
        image_pull_secret="s-registry",
    )
    data = as_manifest(pod)
    return data


def main(pod: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = pod["spec"]["containers"][0]
    return container


def env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container["env"]}


def volume(pod: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(v for v in pod["spec"]["volumes"] if v["name"] == name)
    return found


def mount(pod: dict[str, Any], path: str) -> dict[str, Any]:
    found: dict[str, Any] = next(m for m in main(pod)["volumeMounts"] if m["mountPath"] == path)
    return found


@pytest.mark.parametrize(
    ("what", "read", "expected"),
    [
        ("node is the scheduler's choice", lambda p: p["spec"]["nodeName"], "gpu-node-2"),
        ("never restarted by the kubelet", lambda p: p["spec"]["restartPolicy"], "Never"),
        ("image is the job's", lambda p: main(p)["image"], "registry.example.com/team/pytorch:2.1"),
        ("pull secret is used", lambda p: p["spec"]["imagePullSecrets"], [{"name": "s-registry"}]),
        ("gpu limit", lambda p: main(p)["resources"]["limits"]["nvidia.com/gpu"], "2"),
        ("cpu limit", lambda p: main(p)["resources"]["limits"]["cpu"], "4"),
        ("memory limit", lambda p: main(p)["resources"]["limits"]["memory"], "8192Mi"),
        ("device isolation", lambda p: env(main(p))["NVIDIA_VISIBLE_DEVICES"], "2,3"),
        ("cuda devices", lambda p: env(main(p))["CUDA_VISIBLE_DEVICES"], "2,3"),
        (
            "shm is memory",
            lambda p: volume(p, "dshm")["emptyDir"],
            {"medium": "Memory", "sizeLimit": "2048Mi"},
        ),
        ("shm mounted", lambda p: mount(p, "/dev/shm")["name"], "dshm"),
        (
            "secret volume",
            lambda p: volume(p, "pai-secrets")["secret"],
            {"secretName": "s-secrets", "defaultMode": 256},
        ),
        ("secret read-only", lambda p: mount(p, "/pai/secrets")["readOnly"], True),
        (
            "shared claim",
            lambda p: volume(p, "pai-job")["persistentVolumeClaim"],
            {"claimName": "pai-shared"},
        ),
        ("job dir of the claim", lambda p: mount(p, "/pai/job")["subPath"], f"jobs/{JOB_ID}"),
        (
            "runtime entrypoint",
            lambda p: main(p)["command"][1:],
            ["-m", "runtime", "--spec", "/pai/spec/spec.json"],
        ),
        ("init from runtime image", lambda p: p["spec"]["initContainers"][0]["image"], "pai/runtime:1.0"),
        ("label job id", lambda p: p["metadata"]["labels"]["pai.io/job-id"], JOB_ID),
        ("label user", lambda p: p["metadata"]["labels"]["pai.io/user"], "alice"),
        ("label job name", lambda p: p["metadata"]["labels"]["pai.io/job-name"], "mnist_train"),
        ("label role", lambda p: p["metadata"]["labels"]["pai.io/task-role"], "trainer"),
        ("label index", lambda p: p["metadata"]["labels"]["pai.io/task-index"], "1"),
        ("label attempt", lambda p: p["metadata"]["labels"]["pai.io/attempt"], "0"),
        ("label task attempt", lambda p: p["metadata"]["labels"]["pai.io/task-attempt"], "2"),
        (
            "annotation framework",
            lambda p: p["metadata"]["annotations"]["pai.io/framework-name"],
            "alice~mnist_train",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_the_pod_carries(tmp_path: Path, what: str, read: Any, expected: Any) -> None:
    assert read(pod_dict(tmp_path)) == expected


def test_reserved_ports_are_host_ports_of_the_task(tmp_path: Path) -> None:
    pod = pod_dict(tmp_path)
    ports = main(pod)["ports"]
    assert all(p["containerPort"] == p["hostPort"] for p in ports)
    spec = spec_in_pod(pod, tmp_path / "pod")
    reserved = sorted(p for values in spec.me.ports.values() for p in values)
    assert [p["hostPort"] for p in ports] == reserved
    assert len(reserved) == 4  # nccl: 2, plus the default ssh and http ports


def test_the_spec_inside_the_pod_uses_the_pod_paths(tmp_path: Path) -> None:
    pod = pod_dict(tmp_path)
    spec = spec_in_pod(pod, tmp_path / "pod")
    raw = (tmp_path / "pod" / "spec" / "spec.json").read_text(encoding="utf-8")
    assert (spec.role, spec.index, spec.job.task_attempt_id) == ("trainer", 1, 2)
    assert str(spec.dirs.log_dir) == "/pai/logs"
    assert str(spec.dirs.barrier_dir) == "/pai/job/attempt-0/barrier"
    assert str(spec.secrets_file) == "/pai/secrets/secrets.json"
    assert spec.gpu_indices == [2, 3]
    assert "s3cret" not in raw
    assert "s3cret" not in json.dumps(pod)


def test_the_spec_of_a_task_of_a_large_job_reaches_its_pod(tmp_path: Path) -> None:
    """A spec lists every task of the job, and it travels in one environment variable of the init
    container: Linux refuses to start a process with a variable over 128 KiB, which as plain JSON
    a job of 3,000 tasks exceeds (276 kB)."""
    cfg = job_config()
    cfg["taskRoles"]["trainer"]["instances"] = 3000
    fw = framework(cfg)
    spec = build_spec(tmp_path, fw, KEY, tmp_path / "task", False)
    assert len(spec.tasks) == 3000
    pod = as_manifest(
        build_pod(
            spec, TaskIdentity(JOB_ID, "alice", "mnist_train", KEY), SETTINGS, node="n", image="busybox"
        )
    )
    assert all(len(value) < 128 * 1024 for value in env(pod["spec"]["initContainers"][0]).values())
    inside = spec_in_pod(pod, tmp_path / "pod")
    assert [(t.role, t.index, t.ports) for t in inside.tasks] == [
        (t.role, t.index, t.ports) for t in spec.tasks
    ]


def test_without_gpus_no_device_is_visible_and_no_gpu_is_requested(tmp_path: Path) -> None:
    cfg = job_config()
    cfg["taskRoles"]["trainer"]["resourcePerInstance"]["gpu"] = 0
    fw = framework(cfg, gpus=())
    spec = build_spec(tmp_path, fw, KEY, tmp_path / "task", False)
    pod = as_manifest(
        build_pod(
            spec, TaskIdentity(JOB_ID, "alice", "mnist_train", KEY), SETTINGS, node="n", image="busybox"
        )
    )
    assert "nvidia.com/gpu" not in main(pod)["resources"]["limits"]
    assert env(main(pod))["NVIDIA_VISIBLE_DEVICES"] == "void"
    assert "imagePullSecrets" not in pod["spec"]
    assert not any(v["name"] == "pai-secrets" for v in pod["spec"]["volumes"])


def test_without_a_shared_claim_the_job_dir_is_on_the_node(tmp_path: Path) -> None:
    pod = pod_dict(tmp_path, PodSettings(shared_claim=None, host_shared_dir="/data/pai"))
    assert volume(pod, "pai-job")["hostPath"]["path"] == "/data/pai"
    assert mount(pod, "/pai/job")["subPath"] == f"jobs/{JOB_ID}"  # made with the mode of /data/pai


def test_the_task_user_is_a_setting_and_never_root(tmp_path: Path) -> None:
    pod = pod_dict(tmp_path, PodSettings(shared_claim="pai-shared", task_uid=2000, task_gid=3000))
    context = pod["spec"]["securityContext"]
    assert (context["runAsUser"], context["runAsGroup"], context["fsGroup"]) == (2000, 3000, 3000)
    assert env(main(pod))["HOME"] == "/pai/work"
    with pytest.raises(ValueError, match="task_uid 0"):
        PodSettings(task_uid=0)


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A directory another uid can walk (pytest's own are the caller's only)."""
    path = Path(tempfile.mkdtemp(prefix="pai-init-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path)


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="giving a directory to one uid and copying as another needs root and setpriv",
)
def test_the_init_container_copies_python_as_the_task_user(tmp_path: Path, shared_tmp: Path) -> None:
    """The emptyDir is the kubelet's (root's, mode 2777 with fsGroup), the copy the task uid's: times,
    links and hidden entries come over, and nothing is left to change on the directory itself."""
    pod = pod_dict(tmp_path)
    uid = pod["spec"]["securityContext"]["runAsUser"]
    gid = pod["spec"]["securityContext"]["runAsGroup"]
    copy = pod["spec"]["initContainers"][0]["args"][0].partition(" && ")[0]
    source = shared_tmp / "usr-local"
    (source / "bin").mkdir(parents=True)
    (source / ".hidden").mkdir()
    python = source / "bin" / "python3.11"
    python.write_text("#!/bin/sh\n", encoding="utf-8")
    python.chmod(0o755)
    os.utime(python, (1_000_000_000, 1_000_000_000))
    (source / "bin" / "python3").symlink_to("python3.11")
    target = shared_tmp / "pai" / "python"
    target.mkdir(parents=True)
    target.chmod(0o2777)
    command = copy.replace("/usr/local", str(source)).replace("/pai/python", str(target))
    done = subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "/bin/sh", "-c", command],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    copied = target / "bin" / "python3.11"
    assert (copied.stat().st_uid, copied.stat().st_mtime) == (uid, 1_000_000_000)
    assert os.access(copied, os.X_OK)
    assert os.readlink(target / "bin" / "python3") == "python3.11"
    assert (target / ".hidden").is_dir()


def test_pod_names_are_dns_labels_unique_per_task_attempt() -> None:
    names = {
        pod_name("Job_X." * 20, TaskKey(a, r, i, t))
        for a in (0, 1)
        for r in ("A", "a")
        for i in (0, 1)
        for t in (0, 1)
    }
    assert len(names) == 16
    assert all(len(n) <= 63 and n == n.lower() and n[0].isalnum() and n[-1].isalnum() for n in names)


def test_the_task_key_round_trips_through_the_annotations(tmp_path: Path) -> None:
    annotations = pod_dict(tmp_path)["metadata"]["annotations"]
    assert key_of(annotations) == (JOB_ID, KEY)
    assert key_of({}) is None
    assert key_of({"pai.io/job-id": "x", "pai.io/task-key": "not json"}) is None


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("alice", "alice"), ("a~b c", "a_b_c"), ("-x-", "x"), ("x" * 80, "x" * 63)],
)
def test_label_values_are_valid(raw: str, expected: str) -> None:
    assert label_value(raw) == expected


def test_registry_auth_resolves_a_secret_reference() -> None:
    image, auth = image_of(stored_job(job_config()), "trainer")
    assert auth is not None
    config = registry_config(image, auth, {"registry_password": "s3cret"})
    assert config is not None
    entry = config["auths"]["registry.example.com"]
    assert base64.b64decode(entry["auth"]).decode() == "robot:s3cret"
    assert json.dumps(config)


@pytest.mark.parametrize(
    ("password", "secrets"),
    [("<% $secrets.missing %>", {}), ("******", None), ("", None)],
    ids=["unknown reference", "masked literal", "empty"],
)
def test_no_usable_password_gives_no_pull_secret(password: str, secrets: dict[str, str] | None) -> None:
    assert registry_config("r.io/x", {"username": "u", "password": password}, secrets) is None


def test_an_unknown_image_prerequisite_names_the_field() -> None:
    cfg = job_config()
    cfg["taskRoles"]["trainer"]["dockerImage"] = "nope"
    with pytest.raises(ValueError, match=r"taskRoles\.trainer\.dockerImage"):
        image_of(stored_job(cfg), "trainer")


def spec_in_pod(pod: dict[str, Any], root: Path) -> TaskSpec:
    """The spec the pod's init container writes for the runtime, read back."""
    _run_init(pod, root)
    return load_spec(root / "spec" / "spec.json")


def _run_init(pod: dict[str, Any], root: Path) -> None:
    """What the init container does after copying Python, with the pod's /pai under `root`."""
    init = pod["spec"]["initContainers"][0]
    copy, _, write = init["args"][0].partition(" && ")
    assert copy.startswith("find /usr/local ")
    assert copy.endswith(" -exec cp -a -t /pai/python/ {} +")
    (root / "spec").mkdir(parents=True)
    subprocess.run(["/bin/sh", "-c", write.replace("/pai/", f"{root}/")], env=env(init), check=True)


def test_the_operators_failure_rules_travel_into_the_pod(tmp_path: Path) -> None:
    rules = tmp_path / "rules-7.yaml"
    # A rule file with characters a shell or printf could mangle, kept byte for byte.
    rules.write_text(default_rules_text() + "# 100% kept: $HOME `x` \\n 'q' \"d\"\n", encoding="utf-8")
    spec = build_spec(tmp_path, framework(), KEY, tmp_path / "task", False)
    pod = as_manifest(
        build_pod(
            spec.replace(failure_rules_file=rules),
            TaskIdentity(JOB_ID, "alice", "mnist_train", KEY),
            SETTINGS,
            node="gpu-node-2",
            image="pytorch:2.1",
        )
    )
    root = tmp_path / "pod"
    _run_init(pod, root)
    inside = load_spec(root / "spec" / "spec.json")
    assert inside.failure_rules_file == Path("/pai/spec/failure-rules.yaml")
    assert (root / "spec" / "failure-rules.yaml").read_text(encoding="utf-8") == rules.read_text(
        encoding="utf-8"
    )


def test_without_operator_rules_the_pod_uses_the_packaged_ones(tmp_path: Path) -> None:
    for missing in (None, tmp_path / "pruned.yaml"):  # none set, or a file gone since
        spec = build_spec(tmp_path, framework(), KEY, tmp_path / "task", False)
        pod = as_manifest(
            build_pod(
                spec.replace(failure_rules_file=missing),
                TaskIdentity(JOB_ID, "alice", "mnist_train", KEY),
                SETTINGS,
                node="gpu-node-2",
                image="pytorch:2.1",
            )
        )
        root = tmp_path / f"pod-{missing is None}"
        _run_init(pod, root)
        inside = load_spec(root / "spec" / "spec.json")
        assert inside.failure_rules_file is None
        assert not (root / "spec" / "failure-rules.yaml").exists()
