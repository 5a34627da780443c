"""What a task attempt looks like as a Kubernetes pod: a pure builder over the task spec.

Kept apart from the executor so the whole pod (and its secrets) can be checked by table tests and
against the Kubernetes schemas without any cluster. Nothing here performs I/O: the kubernetes
package is used only for its models (V1Pod, V1Secret, ...).

The pod of one task attempt:

- an init container from the platform's runtime image copies that image's Python installation,
  with the runtime installed in it, into an emptyDir, and writes the task spec there; the main
  container runs the job's own image with that Python as its entrypoint
  (`/pai/python/bin/python3 -m runtime --spec /pai/spec/spec.json`), so a job image needs no
  platform code, only a glibc userland;
- `nodeName` is the node the scheduler chose: the kube-scheduler is not asked again;
- GPUs: an `nvidia.com/gpu` limit of the role's count, plus NVIDIA_VISIBLE_DEVICES and
  CUDA_VISIBLE_DEVICES naming exactly the indices of the placement; a task sharing its GPU
  (extras.gpuShare) asks HAMi's device plugin (`nvidia.com/gpu: 1`, `nvidia.com/gpucores` as a
  percentage, `nvidia.com/gpumem` in MiB), which enforces both inside the container;
- the ports reserved for the task are host ports (peers reach it at the node's address);
- /dev/shm is a memory-backed emptyDir of the role's shmMB;
- the job's secrets are a Secret mounted read-only; its registry credentials a second Secret used
  as an image pull secret; both are owned by the pod, so they go when it goes;
- labels (sanitised) and annotations (exact) name the job, user, role, index and attempts;
- security: Kubernetes' restricted Pod Security Standard, but for the host ports (and hostPath
  volumes where a job mounts storages or no shared claim is set). Every container runs as
  `task_uid`/`task_gid` (never the image's own user, often root), with no capability, no privilege
  escalation and the runtime's default seccomp profile; fsGroup makes the volumes writable to it
  (docs/security.md, "Kubernetes").
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import structlog
from kubernetes.client import (
    ApiClient,
    V1Capabilities,
    V1Container,
    V1ContainerPort,
    V1EmptyDirVolumeSource,
    V1EnvVar,
    V1HostPathVolumeSource,
    V1LocalObjectReference,
    V1ObjectMeta,
    V1OwnerReference,
    V1PersistentVolumeClaimVolumeSource,
    V1Pod,
    V1PodSecurityContext,
    V1PodSpec,
    V1ResourceRequirements,
    V1SeccompProfile,
    V1Secret,
    V1SecretVolumeSource,
    V1SecurityContext,
    V1Volume,
    V1VolumeMount,
)

from libs.protocol.jobs import DockerImagePrerequisite, JobConfig
from runtime.spec import Directories, TaskSpec, dump_spec
from services.orchestrator.core.frameworks import TaskKey

log = structlog.get_logger(__name__)

PREFIX = "pai.io"
MANAGED_BY = "pai-orchestrator"
SELECTOR = f"app.kubernetes.io/managed-by={MANAGED_BY}"
MAIN_CONTAINER = "main"
INIT_CONTAINER = "pai-init"
POD_ROOT = PurePosixPath("/pai")
SPEC_PATH = POD_ROOT / "spec" / "spec.json"
# The operator's failure rules in force when the pod was built, written beside the spec by the
# init container: the pod cannot read the orchestrator's data dir where they are kept.
RULES_ENV = "PAI_FAILURE_RULES"
RULES_PATH = POD_ROOT / "spec" / "failure-rules.yaml"
SECRETS_PATH = POD_ROOT / "secrets" / "secrets.json"
SPEC_ENV = "PAI_TASK_SPEC_ZLIB"
# The spec travels to the init container in one environment variable, and Linux refuses to start
# a process with a single variable over 128 KiB (E2BIG): a spec lists every task of the job, so
# as JSON a job of about 1,400 tasks would never start. Compressed (zlib, then base64) a job of
# 10,000 tasks takes about 105 kB. The init container's own Python writes it out.
_WRITE_SPEC = (
    "python3 -c 'import base64, os, sys, zlib; "
    f'sys.stdout.buffer.write(zlib.decompress(base64.b64decode(os.environ["{SPEC_ENV}"])))\' > {SPEC_PATH}'
)
# The init container runs as the task's uid, which does not own the emptyDir it copies into (the
# kubelet does): `cp -a /usr/local/. /pai/python/` would fail setting the times of that directory.
# Each entry is copied instead, with its times, so the image's compiled bytecode stays valid.
_COPY_PYTHON = f"find /usr/local -mindepth 1 -maxdepth 1 -exec cp -a -t {POD_ROOT / 'python'}/ {{}} +"
_SECRET_REF = re.compile(r"<%\s*\$secrets\.([A-Za-z0-9_.-]+)\s*%>")
_LABEL_BAD = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class PodSettings:
    """How this installation turns tasks into pods (from the orchestrator's settings)."""

    namespace: str = "pai-jobs"
    runtime_image: str = "pai/runtime:latest"
    image_pull_policy: str = "IfNotPresent"
    gpu_resource: str = "nvidia.com/gpu"
    # A shared GPU is asked of HAMi's device plugin: cores as a percentage, memory in MiB.
    gpu_cores_resource: str = "nvidia.com/gpucores"
    gpu_memory_resource: str = "nvidia.com/gpumem"
    shared_claim: str | None = None
    """A ReadWriteMany claim holding every job's barrier and ssh keys; None uses host_shared_dir."""
    host_shared_dir: str = "/var/lib/pai/shared"
    grace_seconds: int = 10
    service_account: str | None = None
    task_uid: int = 1000
    """The uid every container of a task pod runs as (runAsUser), never the image's own user."""
    task_gid: int = 1000
    """Its group (runAsGroup) and the pod's fsGroup, which makes the pod's volumes writable to it."""

    def __post_init__(self) -> None:
        if self.task_uid < 1 or self.task_gid < 1:
            raise ValueError(
                f"task_uid {self.task_uid} and task_gid {self.task_gid}: task pods run as a user other"
                " than root (runAsNonRoot); give both a number of 1 or more (PAI_POD_TASK_UID/GID)"
            )


@dataclass(frozen=True)
class TaskIdentity:
    """Who a pod belongs to, from the framework state."""

    job_id: str
    user: str
    job_name: str
    key: TaskKey

    @property
    def attempt(self) -> int:
        return self.key.job_attempt

    @property
    def role(self) -> str:
        return self.key.role

    @property
    def index(self) -> int:
        return self.key.task_index

    @property
    def task_attempt(self) -> int:
        return self.key.task_attempt


def _dns(text: str) -> str:
    return re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")


def pod_name(job_id: str, key: TaskKey) -> str:
    """A DNS-1123 name, unique per task attempt (a short digest keeps distinct ids apart)."""
    attempt, role, index, task_attempt = key
    digest = hashlib.sha256(f"{job_id}/{attempt}/{role}/{index}/{task_attempt}".encode()).hexdigest()[:8]
    readable = _dns(f"{job_id}-{role}")[:40].strip("-")
    return f"pai-{readable}-{attempt}-{index}-{task_attempt}-{digest}"


def label_value(text: str) -> str:
    """A valid label value (63 characters, alphanumeric at both ends); the annotation keeps the exact text."""
    return _LABEL_BAD.sub("_", text)[:63].strip("._-")


def labels_for(who: TaskIdentity) -> dict[str, str]:
    return {
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/component": "task",
        f"{PREFIX}/job-id": label_value(who.job_id),
        f"{PREFIX}/user": label_value(who.user),
        f"{PREFIX}/job-name": label_value(who.job_name),
        f"{PREFIX}/task-role": label_value(who.role),
        f"{PREFIX}/task-index": str(who.index),
        f"{PREFIX}/attempt": str(who.attempt),
        f"{PREFIX}/task-attempt": str(who.task_attempt),
    }


def annotations_for(who: TaskIdentity) -> dict[str, str]:
    return {
        f"{PREFIX}/job-id": who.job_id,
        f"{PREFIX}/user": who.user,
        f"{PREFIX}/job-name": who.job_name,
        f"{PREFIX}/framework-name": f"{who.user}~{who.job_name}",
        f"{PREFIX}/task-role": who.role,
        f"{PREFIX}/task-key": json.dumps(list(who.key)),
    }


def key_of(annotations: dict[str, str] | None) -> tuple[str, TaskKey] | None:
    """The (job id, task key) a pod was made for, from its annotations; None for a stranger."""
    if not annotations:
        return None
    try:
        raw = json.loads(annotations[f"{PREFIX}/task-key"])
        key = TaskKey(int(raw[0]), str(raw[1]), int(raw[2]), int(raw[3]))
        return annotations[f"{PREFIX}/job-id"], key
    except (KeyError, ValueError, TypeError, IndexError):
        return None


def image_of(config: JobConfig, role: str) -> tuple[str, dict[str, Any] | None]:
    """The image uri of the role's dockerimage prerequisite and its registry auth, if any."""
    name = config.task_roles[role].docker_image if role in config.task_roles else None
    item = config.prerequisite("dockerimage", name)
    if isinstance(item, DockerImagePrerequisite):
        auth = item.auth.model_dump(mode="json", exclude_none=True) if item.auth is not None else None
        return item.uri, auth or None
    raise ValueError(f"taskRoles.{role}.dockerImage: no dockerimage prerequisite is named {name!r}")


def registry_config(
    image: str, auth: dict[str, Any], secrets: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The .dockerconfigjson for the image's registry; None when no usable password is known.

    A password written as `<% $secrets.NAME %>` is looked up in the job's secrets; a literal
    password was masked before the config reached the orchestrator and cannot be used.
    """
    password = str(auth.get("password") or "")
    match = _SECRET_REF.fullmatch(password.strip())
    if match is not None:
        value = (secrets or {}).get(match.group(1))
        password = "" if value is None else str(value)
    elif password.strip("*") == "":
        password = ""
    username = str(auth.get("username") or "")
    if not password or not username:
        return None
    registry = str(auth.get("registryuri") or "") or (
        image.split("/", 1)[0]
        if "/" in image and "." in image.split("/", 1)[0]
        else "https://index.docker.io/v1/"
    )
    token = base64.b64encode(f"{username}:{password}".encode()).decode()
    return {"auths": {registry: {"username": username, "password": password, "auth": token}}}


def in_pod(spec: TaskSpec, has_secrets: bool, *, has_rules: bool = False) -> TaskSpec:
    """The spec with the pod's own paths: the directories the runtime sees inside the container."""
    attempt = spec.job.attempt_id
    return spec.replace(
        dirs=Directories(
            work_dir=Path(str(POD_ROOT / "work")),
            log_dir=Path(str(POD_ROOT / "logs")),
            barrier_dir=Path(str(POD_ROOT / "job" / f"attempt-{attempt}" / "barrier")),
            ssh_key_dir=Path(str(POD_ROOT / "job" / "ssh")),
        ),
        secrets_file=Path(str(SECRETS_PATH)) if has_secrets else None,
        failure_rules_file=Path(str(RULES_PATH)) if has_rules else None,
    )


def rules_text(spec: TaskSpec) -> str | None:
    """The operator's rules the spec names, to carry into the pod; None: the packaged defaults."""
    if spec.failure_rules_file is None:
        return None
    try:
        return spec.failure_rules_file.read_text(encoding="utf-8")
    except OSError as exc:  # pruned or unreadable: the runtime's packaged defaults still classify
        log.warning(
            "failure rules not carried into the pod", file=str(spec.failure_rules_file), error=str(exc)
        )
        return None


def owned_by(name: str, uid: str) -> list[V1OwnerReference]:
    """Makes a secret belong to its pod, so the cluster deletes it with the pod."""
    return [V1OwnerReference(api_version="v1", kind="Pod", name=name, uid=uid, block_owner_deletion=False)]


def task_secret(name: str, who: TaskIdentity, settings: PodSettings, secrets: dict[str, Any]) -> V1Secret:
    return V1Secret(
        api_version="v1",
        kind="Secret",
        metadata=V1ObjectMeta(name=name, namespace=settings.namespace, labels=labels_for(who)),
        type="Opaque",
        string_data={"secrets.json": json.dumps(secrets)},
    )


def pull_secret(
    name: str, who: TaskIdentity, settings: PodSettings, docker_config: dict[str, Any]
) -> V1Secret:
    return V1Secret(
        api_version="v1",
        kind="Secret",
        metadata=V1ObjectMeta(name=name, namespace=settings.namespace, labels=labels_for(who)),
        type="kubernetes.io/dockerconfigjson",
        string_data={".dockerconfigjson": json.dumps(docker_config)},
    )


def _volumes(spec: TaskSpec, settings: PodSettings, secret: str | None) -> list[V1Volume]:
    me = spec.role_info(spec.role)
    volumes = [
        V1Volume(name="pai-python", empty_dir=V1EmptyDirVolumeSource()),
        V1Volume(name="pai-spec", empty_dir=V1EmptyDirVolumeSource()),
        V1Volume(name="pai-work", empty_dir=V1EmptyDirVolumeSource()),
        V1Volume(name="pai-logs", empty_dir=V1EmptyDirVolumeSource()),
        V1Volume(
            name="dshm",
            empty_dir=V1EmptyDirVolumeSource(medium="Memory", size_limit=f"{me.resources.shm_mb}Mi"),
        ),
    ]
    if settings.shared_claim:
        volumes.append(
            V1Volume(
                name="pai-job",
                persistent_volume_claim=V1PersistentVolumeClaimVolumeSource(claim_name=settings.shared_claim),
            )
        )
    else:
        # The job's directory is the mount's subPath, as on the claim: the kubelet creates it with
        # the mode of host_shared_dir, so a directory the operator made writable to the task's uid
        # (mode 1777) gives a job directory it can write; DirectoryOrCreate's own job directory
        # would be root's, mode 0755, and the task could not write its barrier there.
        volumes.append(
            V1Volume(
                name="pai-job",
                host_path=V1HostPathVolumeSource(path=settings.host_shared_dir, type="DirectoryOrCreate"),
            )
        )
    if secret is not None:
        volumes.append(
            V1Volume(name="pai-secrets", secret=V1SecretVolumeSource(secret_name=secret, default_mode=0o400))
        )
    for i, storage in enumerate(spec.storages):
        volumes.append(
            V1Volume(
                name=f"storage-{i}", host_path=V1HostPathVolumeSource(path=storage.path, type="Directory")
            )
        )
    return volumes


def _mounts(
    spec: TaskSpec, who: TaskIdentity, settings: PodSettings, secret: str | None
) -> list[V1VolumeMount]:
    mounts = [
        V1VolumeMount(name="pai-python", mount_path=str(POD_ROOT / "python"), read_only=True),
        V1VolumeMount(name="pai-spec", mount_path=str(SPEC_PATH.parent), read_only=True),
        V1VolumeMount(name="pai-work", mount_path=str(POD_ROOT / "work")),
        V1VolumeMount(name="pai-logs", mount_path=str(POD_ROOT / "logs")),
        V1VolumeMount(name="dshm", mount_path="/dev/shm"),
        V1VolumeMount(
            name="pai-job",
            mount_path=str(POD_ROOT / "job"),
            sub_path=f"jobs/{who.job_id}",
        ),
    ]
    if secret is not None:
        mounts.append(V1VolumeMount(name="pai-secrets", mount_path=str(SECRETS_PATH.parent), read_only=True))
    for i, storage in enumerate(spec.storages):
        mounts.append(
            V1VolumeMount(name=f"storage-{i}", mount_path=storage.mount_path, read_only=storage.read_only)
        )
    return mounts


def build_pod(
    spec: TaskSpec,
    who: TaskIdentity,
    settings: PodSettings,
    *,
    node: str | None,
    image: str,
    secret: str | None = None,
    image_pull_secret: str | None = None,
) -> V1Pod:
    """The pod of one task attempt; `spec` is the orchestrator's spec (paths are rewritten here)."""
    me = spec.role_info(spec.role)
    res = me.resources
    rules = rules_text(spec)
    inside = in_pod(spec, secret is not None, has_rules=rules is not None)
    write_spec = _WRITE_SPEC
    packed = base64.b64encode(zlib.compress(dump_spec(inside).encode(), 9)).decode()
    init_env = [V1EnvVar(name=SPEC_ENV, value=packed)]
    if rules is not None:
        write_spec += f' && printf "%s" "${RULES_ENV}" > {RULES_PATH}'
        init_env.append(V1EnvVar(name=RULES_ENV, value=rules))
    gpus = ",".join(str(i) for i in spec.gpu_indices)
    limits: dict[str, str] = {"cpu": _cpu(res.cpu), "memory": f"{res.memory_mb}Mi"}
    if res.gpu and settings.gpu_resource:
        limits[settings.gpu_resource] = str(res.gpu)
    limits.update(share_limits(spec.gpu_milli, spec.gpu_memory_mib, settings))
    ports = [
        V1ContainerPort(container_port=port, host_port=port, protocol="TCP")
        for port in sorted({p for values in spec.me.ports.values() for p in values})
    ]
    init = V1Container(
        name=INIT_CONTAINER,
        image=settings.runtime_image,
        image_pull_policy=settings.image_pull_policy,
        command=["/bin/sh", "-c"],
        args=[f"{_COPY_PYTHON} && {write_spec}"],
        env=init_env,
        volume_mounts=[
            V1VolumeMount(name="pai-python", mount_path=str(POD_ROOT / "python")),
            V1VolumeMount(name="pai-spec", mount_path=str(SPEC_PATH.parent)),
        ],
        resources=V1ResourceRequirements(
            requests={"cpu": "100m", "memory": "64Mi"}, limits={"memory": "256Mi"}
        ),
        security_context=_unprivileged(),
    )
    main = V1Container(
        name=MAIN_CONTAINER,
        image=image,
        image_pull_policy=settings.image_pull_policy,
        command=[str(POD_ROOT / "python" / "bin" / "python3"), "-m", "runtime", "--spec", str(SPEC_PATH)],
        working_dir=str(POD_ROOT / "work"),
        env=[
            V1EnvVar(name="NVIDIA_VISIBLE_DEVICES", value=gpus or "void"),
            V1EnvVar(name="CUDA_VISIBLE_DEVICES", value=gpus),
            V1EnvVar(name="PAI_JOB_ID", value=who.job_id),
            # The image's passwd seldom names task_uid, and then the container's HOME is /, which
            # the task cannot write: the work dir is its home, as the runtime's own default.
            V1EnvVar(name="HOME", value=str(POD_ROOT / "work")),
        ],
        ports=ports or None,
        resources=V1ResourceRequirements(requests=dict(limits), limits=limits),
        volume_mounts=_mounts(spec, who, settings, secret),
        security_context=_unprivileged(),
    )
    return V1Pod(
        api_version="v1",
        kind="Pod",
        metadata=V1ObjectMeta(
            name=pod_name(who.job_id, who.key),
            namespace=settings.namespace,
            labels=labels_for(who),
            annotations=annotations_for(who),
        ),
        spec=V1PodSpec(
            restart_policy="Never",
            node_name=node,
            init_containers=[init],
            containers=[main],
            volumes=_volumes(spec, settings, secret),
            image_pull_secrets=[V1LocalObjectReference(name=image_pull_secret)]
            if image_pull_secret
            else None,
            termination_grace_period_seconds=settings.grace_seconds,
            automount_service_account_token=False,
            service_account_name=settings.service_account,
            enable_service_links=False,
            security_context=pod_security(settings),
        ),
    )


def pod_security(settings: PodSettings) -> V1PodSecurityContext:
    """Every container as the task's user, never root, under the runtime's default seccomp profile.

    fsGroup makes the emptyDirs, the shared claim and the secret's files (mode 0400, then 0440 to
    the group) the task's to use. OnRootMismatch: the shared claim holds every job's directory,
    which the kubelet would otherwise walk at every pod's start to change their group.
    """
    return V1PodSecurityContext(
        run_as_non_root=True,
        run_as_user=settings.task_uid,
        run_as_group=settings.task_gid,
        fs_group=settings.task_gid,
        fs_group_change_policy="OnRootMismatch",
        seccomp_profile=V1SeccompProfile(type="RuntimeDefault"),
    )


def _unprivileged() -> V1SecurityContext:
    """No capability and no way to gain one (no setuid binary of the image works as such)."""
    return V1SecurityContext(allow_privilege_escalation=False, capabilities=V1Capabilities(drop=["ALL"]))


def share_limits(gpu_milli: int | None, gpu_memory_mib: int | None, settings: PodSettings) -> dict[str, str]:
    """HAMi's resource limits for a task sharing its GPU (none for whole GPUs)."""
    if not gpu_milli:
        return {}
    limits = {settings.gpu_resource: "1", settings.gpu_cores_resource: str(max(1, round(gpu_milli / 10)))}
    if gpu_memory_mib:
        limits[settings.gpu_memory_resource] = str(gpu_memory_mib)
    return limits


def _cpu(cpu: float) -> str:
    return str(int(cpu)) if float(cpu).is_integer() else f"{int(cpu * 1000)}m"


def as_manifest(obj: object) -> dict[str, Any]:
    """A model (V1Pod, V1Secret, ...) as the JSON-ready dict the API server receives."""
    data: dict[str, Any] = ApiClient().sanitize_for_serialization(obj)  # type: ignore[no-untyped-call]
    return data
