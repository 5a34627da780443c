"""A task's OCI configuration made from the engine's for its image, without an engine: only what
differs from task to task changes, and everything the engine decided for security stays."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from services.orchestrator.core.bundles import (
    TEMPLATE_COMMAND,
    TemplateError,
    bundle_config,
    engine_files,
    native_abi_only,
    native_profile,
    no_user_namespaces,
    template_arguments,
)
from services.orchestrator.core.containers import ContainerPlan, container_name, run_arguments

CONTAINER_ID = "865aeb9523b21edac9b44a5b9695145a3039134d785ea307d8a54fb31ca7286c"
USERDATA = f"/run/containers/storage/overlay-containers/{CONTAINER_ID}/userdata"
TEMPLATE_WORK = "/data/runc-templates/fc2a03d5-1/work"
SECCOMP = {
    "defaultAction": "SCMP_ACT_ERRNO",
    "defaultErrnoRet": 38,
    "syscalls": [{"names": ["read", "write"], "action": "SCMP_ACT_ALLOW"}],
}


def _template() -> dict[str, Any]:
    """The shape of what Podman 4.3 writes for ``create --init --cap-drop all ... IMAGE /bin/sh``."""
    return {
        "ociVersion": "1.0.2-dev",
        "process": {
            "user": {"uid": 65534, "gid": 65534, "umask": 18, "additionalGids": [65534]},
            "args": ["/run/podman-init", "--", "/entry", *TEMPLATE_COMMAND],
            "env": ["PATH=/usr/local/bin:/usr/bin:/bin", "TERM=xterm", "container=podman"],
            "cwd": TEMPLATE_WORK,
            "capabilities": {},
            "noNewPrivileges": True,
        },
        "root": {"path": "/var/lib/containers/storage/overlay/36a4/merged"},
        "hostname": "vm",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec"]},
            {
                "destination": "/run/podman-init",
                "type": "bind",
                "source": "/usr/libexec/podman/catatonit",
                "options": ["bind", "ro", "rprivate"],
            },
            {
                "destination": "/etc/hosts",
                "type": "bind",
                "source": f"{USERDATA}/hosts",
                "options": ["bind", "rprivate"],
            },
            {
                "destination": "/dev/shm",
                "type": "bind",
                "source": f"/var/lib/containers/storage/overlay-containers/{CONTAINER_ID}/userdata/shm",
                "options": ["bind", "rprivate", "nosuid", "noexec", "nodev"],
            },
            {
                "destination": TEMPLATE_WORK,
                "type": "bind",
                "source": TEMPLATE_WORK,
                "options": ["rw", "rprivate", "rbind"],
            },
        ],
        "annotations": {
            "io.container.manager": "libpod",
            "io.kubernetes.cri-o.Created": "2026-11-28T16:09:43Z",
            "io.podman.annotations.init": "TRUE",
        },
        "linux": {
            "resources": {
                "devices": [{"allow": False, "access": "rwm"}],
                "cpu": {"quota": 100000, "period": 100000},
                "pids": {"limit": 100},
                "memory": {"limit": 268435456, "swap": 268435456},
            },
            "cgroupsPath": f"/libpod_parent/libpod-{CONTAINER_ID}",
            "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}],
            "seccomp": SECCOMP,
            "maskedPaths": ["/proc/kcore"],
            "readonlyPaths": ["/proc/sys"],
        },
    }


WORK = "/data/jobs/job-1/attempt-0/worker-2/try-1/work"
ROOTFS = "/data/jobs/job-1/attempt-0/worker-2/try-1/rootfs"
FILES = {"/etc/hosts": "/data/runc-templates/fc2a03d5-1/files/0-hosts"}


def _plan(**changes: object) -> ContainerPlan:
    values: dict[str, object] = {
        "engine": "podman",
        "image": "sha256:fc2a03d5",
        "name": container_name("job-1", 0, "worker", 2, 1),
        "user": "1800000001:1800000002",
        "work_dir": WORK,
        "labels": (("ai.pai.job", "job-1"), ("ai.pai.task", "0.worker-2.1")),
        "memory_mb": 1024,
        "cpus": 1.5,
        "pids": 4096,
        "cgroup_parent": "/pai-x/job-1.0.worker-2.1",
    }
    values.update(changes)
    return ContainerPlan(**values)  # type: ignore[arg-type]


def _config(template: dict[str, Any] | None = None, **changes: object) -> dict[str, Any]:
    return bundle_config(
        template or _template(),
        _plan(**changes),
        rootfs=ROOTFS,
        template_work_dir=TEMPLATE_WORK,
        files=FILES,
    )


def _mount(config: dict[str, Any], target: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [m for m in config["mounts"] if m["destination"] == target]
    [mount] = found
    return mount


def test_the_process_runs_as_the_tenant_in_the_work_dir_after_the_init_and_entrypoint() -> None:
    process = _config()["process"]
    assert process["user"] == {
        "uid": 1800000001,
        "gid": 1800000002,
        "umask": 18,
        "additionalGids": [1800000002],
    }
    assert process["cwd"] == WORK
    # The runtime appends each script's loader: what the template ran is taken off.
    assert process["args"] == ["/run/podman-init", "--", "/entry"]
    assert process["env"] == _template()["process"]["env"]


def test_the_root_is_the_tasks_own_overlay_writable() -> None:
    assert _config()["root"] == {"path": ROOTFS, "readonly": False}


def test_the_work_dir_replaces_the_templates_and_the_engines_files_are_the_executors_copies() -> None:
    config = _config()
    targets = [m["destination"] for m in config["mounts"]]
    assert TEMPLATE_WORK not in targets
    assert _mount(config, WORK) == {
        "destination": WORK,
        "type": "bind",
        "source": WORK,
        "options": ["rbind", "rprivate", "rw"],
    }
    hosts = _mount(config, "/etc/hosts")
    assert hosts["source"] == FILES["/etc/hosts"]
    assert hosts["options"][-1] == "ro"  # shared by the image's tasks: none may change it
    assert _mount(config, "/run/podman-init") == _template()["mounts"][1]  # the engine's init
    assert _mount(config, "/proc") == _template()["mounts"][0]


@pytest.mark.parametrize(
    ("memory_mb", "size"), [(1024, "size=512m"), (64, "size=64m"), (16, "size=64m")], ids=lambda v: str(v)
)
def test_shm_is_a_tmpfs_of_the_tasks_own_half_its_memory_at_least_64_mib(memory_mb: int, size: str) -> None:
    shm = _mount(_config(memory_mb=memory_mb), "/dev/shm")
    assert shm["type"] == "tmpfs"
    assert shm["options"][-1] == size
    assert {"nosuid", "noexec", "nodev"} <= set(shm["options"])


def test_the_tasks_own_mounts_follow_the_work_dir() -> None:
    config = _config(mounts=(("/run/mps/pipe", "/run/mps/pipe", False), ("/srv/ro", "/mnt/ro", True)))
    targets = [m["destination"] for m in config["mounts"]]
    assert targets[-3:] == [WORK, "/run/mps/pipe", "/mnt/ro"]
    assert _mount(config, "/mnt/ro")["options"][-1] == "ro"


def test_the_container_nests_under_the_tasks_memory_group_which_holds_its_memory() -> None:
    linux = _config()["linux"]
    assert linux["cgroupsPath"] == "/pai-x/job-1.0.worker-2.1/pai-job-1-0-worker-2-1"
    assert "memory" not in linux["resources"]
    assert linux["resources"]["pids"] == {"limit": 4096}
    assert linux["resources"]["cpu"] == {"quota": 150000, "period": 100000}
    assert linux["resources"]["devices"] == _template()["linux"]["resources"]["devices"]


def test_without_a_task_group_the_container_holds_the_memory_limit_under_the_engines_parent() -> None:
    linux = _config(cgroup_parent=None, memory_mb=64)["linux"]
    assert linux["resources"]["memory"] == {"limit": 64 * 2**20, "swap": 64 * 2**20}
    assert linux["cgroupsPath"] == "/libpod_parent/pai-job-1-0-worker-2-1"


def test_the_engines_security_settings_are_carried_over_untouched() -> None:
    template, config = _template(), _config()
    assert config["linux"]["seccomp"] == SECCOMP
    assert config["process"]["capabilities"] == {}
    assert config["process"]["noNewPrivileges"] is True
    for key in ("namespaces", "maskedPaths", "readonlyPaths"):
        assert config["linux"][key] == template["linux"][key]
    assert config["hostname"] == "vm"


def test_annotations_name_the_task_not_the_template() -> None:
    annotations = _config()["annotations"]
    assert annotations["ai.pai.job"] == "job-1"
    assert annotations["ai.pai.task"] == "0.worker-2.1"
    assert annotations["io.podman.annotations.init"] == "TRUE"
    assert "io.kubernetes.cri-o.Created" not in annotations


def test_the_template_is_not_changed() -> None:
    template = _template()
    before = copy.deepcopy(template)
    _config(template)
    _config(template, cgroup_parent=None)
    assert template == before


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda t: t["process"].update(args=["/bin/other"]), "do not end with its command"),
        (lambda t: t.pop("linux"), "no process or no linux section"),
    ],
    ids=["other arguments", "no linux section"],
)
def test_a_template_unlike_the_engines_is_refused(change: Any, message: str) -> None:
    template = _template()
    change(template)
    with pytest.raises(TemplateError, match=message):
        _config(template)


def test_the_template_is_created_with_the_tasks_run_arguments_its_image_and_command() -> None:
    plan = _plan()
    args = template_arguments(plan)
    assert args[0] == "create"
    assert args[1:-2] == run_arguments(plan)[1:]
    assert args[-2:] == [plan.image, *TEMPLATE_COMMAND]
    for security in ("--cap-drop", "--security-opt", "--init"):
        assert security in args
    with pytest.raises(TemplateError, match="made by Podman"):
        template_arguments(_plan(engine="docker"))


def test_the_engines_own_files_are_found_by_the_template_containers_id() -> None:
    assert engine_files(_template(), CONTAINER_ID) == {"/etc/hosts": f"{USERDATA}/hosts"}


ENGINE_ARCHES = ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"]


def _with_arches(arches: list[str]) -> dict[str, Any]:
    template = _template()
    template["linux"]["seccomp"] = {**SECCOMP, "architectures": arches}
    return template


@pytest.mark.parametrize(
    ("machine", "arches", "narrowed"),
    [
        ("x86_64", ENGINE_ARCHES, ["SCMP_ARCH_X86_64"]),
        ("aarch64", ["SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"], ["SCMP_ARCH_AARCH64"]),
    ],
)
def test_the_seccomp_filter_keeps_the_machines_own_abi_only(
    machine: str, arches: list[str], narrowed: list[str]
) -> None:
    template = _with_arches(arches)
    before = copy.deepcopy(template)
    config = native_abi_only(template, machine)
    assert config["linux"]["seccomp"] == {
        **SECCOMP,
        "architectures": narrowed,
        "syscalls": no_user_namespaces(SECCOMP["syscalls"], machine),
    }
    # Only the seccomp filter changes, and the engine's template is left as it was.
    assert {**config, "linux": {**config["linux"], "seccomp": None}} == {
        **before,
        "linux": {**before["linux"], "seccomp": None},
    }
    assert template == before


@pytest.mark.parametrize(
    ("machine", "arches"),
    [
        ("mips", ENGINE_ARCHES),  # a machine the table does not know
        ("x86_64", ["SCMP_ARCH_AARCH64"]),  # a filter without the native ABI: the engine's stands
        ("x86_64", ["SCMP_ARCH_X86_64"]),
    ],
)
def test_the_seccomp_filters_abi_is_left_to_the_engine_where_the_native_abi_is_not_one_of_several(
    machine: str, arches: list[str]
) -> None:
    template = _with_arches(arches)
    config = native_abi_only(template, machine)
    assert config["linux"]["seccomp"]["architectures"] == arches
    assert config["linux"]["seccomp"]["syscalls"] == no_user_namespaces(SECCOMP["syscalls"], machine)


def test_a_template_without_a_seccomp_filter_is_left_without_one() -> None:
    template = _template()
    del template["linux"]["seccomp"]
    assert native_abi_only(template, "x86_64") == template


PODMAN_PROFILE: dict[str, Any] = {
    "defaultAction": "SCMP_ACT_ERRNO",
    "archMap": [
        {"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86", "SCMP_ARCH_X32"]},
        {"architecture": "SCMP_ARCH_AARCH64", "subArchitectures": ["SCMP_ARCH_ARM"]},
    ],
    "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW"}],
}


def test_the_engines_profile_file_is_narrowed_to_the_machines_own_abi() -> None:
    narrowed = native_profile(PODMAN_PROFILE, "aarch64")
    assert narrowed == {
        **PODMAN_PROFILE,
        "archMap": [{"architecture": "SCMP_ARCH_AARCH64", "subArchitectures": []}],
        "syscalls": no_user_namespaces(PODMAN_PROFILE["syscalls"], "aarch64"),
    }
    assert PODMAN_PROFILE["archMap"][1]["subArchitectures"] == ["SCMP_ARCH_ARM"]


@pytest.mark.parametrize(
    ("profile", "machine"),
    [
        (PODMAN_PROFILE, "mips"),
        ({**PODMAN_PROFILE, "archMap": PODMAN_PROFILE["archMap"][1:]}, "x86_64"),
        ({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": []}, "x86_64"),
    ],
)
def test_an_engine_profile_without_rules_for_this_machine_is_left_to_the_engine(
    profile: dict[str, Any], machine: str
) -> None:
    assert native_profile(profile, machine) is None


NEWUSER = 0x10000000


def _masked(index: int, value: int) -> list[dict[str, Any]]:
    return [{"index": index, "value": NEWUSER, "valueTwo": value, "op": "SCMP_CMP_MASKED_EQ"}]


def test_no_new_user_namespace_clone_and_unshare_without_it_only_clone3_enosys() -> None:
    """Podman's profile allows clone, clone3 and unshare whatever their flags (so containers may
    nest); the platform's allows them only without CLONE_NEWUSER, as Kubernetes' RuntimeDefault
    does: EPERM with it, ENOSYS for clone3 (its flags are behind a pointer a filter cannot read,
    and the C library falls back to clone). What else a rule names stays allowed; a rule with
    conditions of its own stays as it is."""
    conditional = {"names": ["clone"], "action": "SCMP_ACT_ALLOW", "args": _masked(0, 0)[:1]}
    capped = {
        "names": ["unshare", "mount"],
        "action": "SCMP_ACT_ALLOW",
        "includes": {"caps": ["CAP_SYS_ADMIN"]},
    }
    rules = [
        {"names": ["read", "clone", "clone3", "unshare", "write"], "action": "SCMP_ACT_ALLOW"},
        {"names": ["clone3"], "action": "SCMP_ACT_ALLOW"},
        {"names": ["kill"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1},
        capped,
    ]
    narrowed = no_user_namespaces(rules, "x86_64")
    assert narrowed == [
        {"names": ["read", "write"], "action": "SCMP_ACT_ALLOW"},
        {"names": ["kill"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1},
        {**capped, "names": ["mount"]},
        {"names": ["clone"], "action": "SCMP_ACT_ALLOW", "args": _masked(0, 0)},
        {"names": ["unshare"], "action": "SCMP_ACT_ALLOW", "args": _masked(0, 0)},
        {"names": ["clone"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1, "args": _masked(0, NEWUSER)},
        {"names": ["unshare"], "action": "SCMP_ACT_ERRNO", "errnoRet": 1, "args": _masked(0, NEWUSER)},
        {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38},
    ]
    assert no_user_namespaces(narrowed, "x86_64") == narrowed, "applied twice: nothing more"
    assert no_user_namespaces([conditional], "x86_64")[0] == conditional
    # On s390x clone takes its flags second.
    s390 = no_user_namespaces([{"names": ["clone", "unshare"], "action": "SCMP_ACT_ALLOW"}], "s390x")
    assert s390[0]["args"] == _masked(1, 0)
    assert s390[1]["args"] == _masked(0, 0)


def test_no_new_user_namespace_allows_nothing_the_rules_did_not() -> None:
    """A profile that never allowed unshare (a default that refuses, no rule naming it) gets no
    rule allowing it: only the refusals are added."""
    rules = [{"names": ["read", "clone"], "action": "SCMP_ACT_ALLOW"}]
    narrowed = no_user_namespaces(rules, "x86_64")
    allowing = [rule for rule in narrowed if rule["action"] == "SCMP_ACT_ALLOW"]
    assert allowing == [
        {"names": ["read"], "action": "SCMP_ACT_ALLOW"},
        {"names": ["clone"], "action": "SCMP_ACT_ALLOW", "args": _masked(0, 0)},
    ]
    assert no_user_namespaces(narrowed, "x86_64") == narrowed
    assert [rule["action"] for rule in no_user_namespaces([], "x86_64")] == ["SCMP_ACT_ERRNO"] * 3
