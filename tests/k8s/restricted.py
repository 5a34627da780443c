"""Kubernetes' restricted Pod Security Standard (with the baseline it includes) over a pod spec.

https://kubernetes.io/docs/concepts/security/pod-security-standards/ as of v1.30: every control
of the two levels, read from a pod spec as the API server receives it (camelCase dicts), each
violation a line naming where it is and which control it breaks. The admission controller itself
is not available offline; this is its table, so tests can hold every manifest and every task pod
to it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

# Baseline: capabilities a container may add; restricted narrows them to NET_BIND_SERVICE.
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
}
RESTRICTED_CAPABILITIES = {"NET_BIND_SERVICE"}
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
SECCOMP_ALLOWED = {"RuntimeDefault", "Localhost"}
HOST_PORTS = "hostPorts"
HOST_PATH = "hostPath volumes"
"""The names of two baseline controls, for a caller that documents an exception to them."""

POD_TEMPLATE_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob", "Pod"}


def pod_specs(obj: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(where, pod metadata, pod spec) of an object's pod template, if it has one."""
    kind = obj.get("kind")
    if kind not in POD_TEMPLATE_KINDS:
        return
    where = f"{kind}/{obj['metadata']['name']}"
    if kind == "Pod":
        yield where, obj.get("metadata") or {}, obj["spec"]
        return
    spec = obj["spec"]
    if kind == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    template = spec["template"]
    yield where, template.get("metadata") or {}, template["spec"]


def _containers(spec: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(field) or []:
            yield f"{field[:-1]} {container['name']}", container


def violations(
    where: str,
    spec: dict[str, Any],
    metadata: dict[str, Any] | None = None,
    *,
    allow: frozenset[str] = frozenset(),
) -> list[str]:
    """Every restricted (and baseline) control the pod spec breaks, but those named in `allow`."""
    found: list[str] = []

    def fail(control: str, text: str) -> None:
        if control not in allow:
            found.append(f"{where}: {control}: {text}")

    pod = spec.get("securityContext") or {}
    containers = list(_containers(spec))

    # -- baseline ------------------------------------------------------------------------------
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            fail("host namespaces", f"{field} must be false or unset")
    if (pod.get("windowsOptions") or {}).get("hostProcess"):
        fail("HostProcess", "pod securityContext.windowsOptions.hostProcess must be false")
    for volume in spec.get("volumes") or []:
        if "hostPath" in volume:
            fail(HOST_PATH, f"volume {volume['name']} is a hostPath")
    for sysctl in pod.get("sysctls") or []:
        if sysctl["name"] not in SAFE_SYSCTLS:
            fail("sysctls", f"{sysctl['name']} is not a safe sysctl")
    annotations = (metadata or {}).get("annotations") or {}
    for key, value in annotations.items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
            value == "runtime/default" or value.startswith("localhost/")
        ):
            fail("AppArmor", f"annotation {key} is {value}")
    contexts = [("pod", pod), *((name, c.get("securityContext") or {}) for name, c in containers)]
    for name, context in contexts:
        if (context.get("appArmorProfile") or {}).get("type") == "Unconfined":
            fail("AppArmor", f"{name} appArmorProfile is Unconfined")
        selinux = context.get("seLinuxOptions") or {}
        if selinux.get("type", "") not in SELINUX_TYPES or selinux.get("user") or selinux.get("role"):
            fail("SELinux", f"{name} seLinuxOptions {selinux} are not allowed")
        if (context.get("seccompProfile") or {}).get("type") == "Unconfined":
            fail("seccomp", f"{name} seccompProfile is Unconfined")
    for name, container in containers:
        context = container.get("securityContext") or {}
        if context.get("privileged"):
            fail("privileged containers", f"{name} is privileged")
        if (context.get("windowsOptions") or {}).get("hostProcess"):
            fail("HostProcess", f"{name} windowsOptions.hostProcess must be false")
        if context.get("procMount", "Default") != "Default":
            fail("/proc mount type", f"{name} procMount must be Default")
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                fail(HOST_PORTS, f"{name} port {port.get('containerPort')} has hostPort {port['hostPort']}")
        added = set((context.get("capabilities") or {}).get("add") or [])
        if added - BASELINE_CAPABILITIES:
            fail("capabilities (baseline)", f"{name} adds {sorted(added - BASELINE_CAPABILITIES)}")

    # -- restricted ----------------------------------------------------------------------------
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            fail("volume types", f"volume {volume['name']} is {sorted(kinds - RESTRICTED_VOLUMES)}")
    if pod.get("runAsUser") == 0:
        fail("running as non-root user", "pod securityContext.runAsUser is 0")
    pod_non_root = pod.get("runAsNonRoot") is True
    pod_seccomp = (pod.get("seccompProfile") or {}).get("type") in SECCOMP_ALLOWED
    for name, container in containers:
        context = container.get("securityContext") or {}
        if context.get("allowPrivilegeEscalation") is not False:
            fail("privilege escalation", f"{name} securityContext.allowPrivilegeEscalation must be false")
        if context.get("runAsNonRoot") is False or not (pod_non_root or context.get("runAsNonRoot") is True):
            fail("running as non-root", f"{name} runs without runAsNonRoot: true (pod or container)")
        if context.get("runAsUser") == 0:
            fail("running as non-root user", f"{name} securityContext.runAsUser is 0")
        seccomp = (context.get("seccompProfile") or {}).get("type")
        if not (seccomp in SECCOMP_ALLOWED or (seccomp is None and pod_seccomp)):
            fail("seccomp", f"{name} has no seccompProfile RuntimeDefault or Localhost (pod or container)")
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            fail("capabilities", f"{name} securityContext.capabilities.drop must include ALL")
        added = set(capabilities.get("add") or [])
        if added - RESTRICTED_CAPABILITIES:
            fail("capabilities", f"{name} may add only NET_BIND_SERVICE, not {sorted(added)}")
    return found
