"""A task's container in bubblewrap's words, from the engine's OCI configuration, without running
anything: the tenant's ids and nothing of root's, the engine's namespaces, mounts, masked and
read-only paths, and a refusal for what bubblewrap is not given to do."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from services.orchestrator.core.bundles import TemplateError
from services.orchestrator.core.image_sandboxes import STAGE, image_sandbox
from services.orchestrator.core.sandboxes import SandboxTools

TOOLS = SandboxTools("/usr/bin/bwrap", "/usr/bin/setpriv")
ROOTFS = "/data/jobs/j/attempt-0/worker-0/try-0/rootfs"
WORK = "/data/jobs/j/attempt-0/worker-0/try-0/work"
FOLDERS = {"/proc/acpi", "/sys/firmware"}
FILES = {"/proc/keys", "/proc/sys", "/proc/bus"}


def present(path: str) -> bool | None:
    """This test's kernel: some masked paths are folders, some files, the rest absent."""
    if path in FOLDERS:
        return True
    return False if path in FILES else None


def _config() -> dict[str, Any]:
    """The shape of a task's configuration from Podman 4.3's (core/bundles.py patched it)."""
    return {
        "process": {
            "user": {"uid": 1800000001, "gid": 1800000001, "umask": 18, "additionalGids": [1800000001, 3001]},
            "args": ["/run/podman-init", "--", "/entry"],
            "env": ["PATH=/usr/bin:/bin", "TERM=xterm", "container=podman"],
            "cwd": WORK,
            "capabilities": {},
            "noNewPrivileges": True,
        },
        "root": {"path": ROOTFS, "readonly": False},
        "hostname": "vm",
        "mounts": [
            {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "ro"]},
            {"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid"]},
            {
                "destination": "/dev",
                "type": "tmpfs",
                "source": "tmpfs",
                "options": ["mode=755", "size=65536k"],
            },
            {
                "destination": "/run/podman-init",
                "type": "bind",
                "source": "/usr/libexec/podman/catatonit",
                "options": ["bind", "ro"],
            },
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["newinstance"]},
            {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid"]},
            {
                "destination": "/etc/hosts",
                "type": "bind",
                "source": "/copies/hosts",
                "options": ["rprivate", "ro"],
            },
            {
                "destination": "/dev/shm",
                "type": "tmpfs",
                "source": "shm",
                "options": ["mode=1777", "size=64m"],
            },
            {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup", "options": ["ro"]},
            {"destination": WORK, "type": "bind", "source": WORK, "options": ["rbind", "rprivate", "rw"]},
        ],
        "linux": {
            "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}],
            "maskedPaths": ["/proc/acpi", "/proc/kcore", "/proc/keys", "/sys/firmware"],
            "readonlyPaths": ["/proc/bus", "/proc/sys", "/proc/sysrq-trigger"],
            "seccomp": {"defaultAction": "SCMP_ACT_ERRNO"},
        },
    }


def _after(argv: list[str], word: str) -> list[str]:
    """The values following each ``word`` in ``argv``."""
    return [argv[n + 1] for n, a in enumerate(argv) if a == word]


def _pairs(argv: list[str], word: str) -> list[tuple[str, str]]:
    return [(argv[n + 1], argv[n + 2]) for n, a in enumerate(argv) if a == word]


def test_setpriv_drops_to_the_tenant_with_nothing_of_roots_before_bubblewrap() -> None:
    argv = image_sandbox(_config(), TOOLS, present=present).argv
    split = argv.index("--")
    assert argv[:split] == [
        "/usr/bin/setpriv",
        "--reuid=1800000001",
        "--regid=1800000001",
        "--groups=1800000001,3001",
        "--inh-caps=-all",
        "--ambient-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
    ]
    assert argv[split + 1] == "/usr/bin/bwrap"


def test_bubblewrap_maps_the_tenants_ids_only_and_makes_the_engines_namespaces() -> None:
    argv = image_sandbox(_config(), TOOLS, present=present).argv
    bwrap = argv[argv.index("--") + 1 :]
    assert bwrap[:7] == [
        "/usr/bin/bwrap",
        "--unshare-user",
        "--uid",
        "1800000001",
        "--gid",
        "1800000001",
        "--die-with-parent",
    ]
    for flag in ("--unshare-pid", "--unshare-ipc", "--unshare-uts"):
        assert flag in bwrap
    assert _after(bwrap, "--hostname") == ["vm"]
    assert "--unshare-net" not in bwrap  # the host's network, as the engine's --network host
    # The root first (where root mounted the task's root file system): every mount lands in it.
    assert _pairs(bwrap, "--bind") == [(STAGE, "/")]
    assert _after(bwrap, "--chdir") == [WORK]


def test_a_private_network_in_the_configuration_is_one_in_the_sandbox_too() -> None:
    config = _config()
    config["linux"]["namespaces"].append({"type": "network"})
    assert "--unshare-net" in image_sandbox(config, TOOLS, present=present).argv


def test_the_engines_mounts_are_said_in_bubblewraps_words() -> None:
    argv = image_sandbox(_config(), TOOLS, present=present).argv
    assert _after(argv, "--proc") == ["/proc"]
    assert _after(argv, "--dev") == ["/dev"]
    assert _after(argv, "--mqueue") == ["/dev/mqueue"]
    assert ("/sys", "/sys") in _pairs(argv, "--ro-bind")
    shm = argv.index("/dev/shm")
    assert argv[shm - 5 : shm] == ["--perms", "1777", "--size", str(64 * 1024 * 1024), "--tmpfs"]
    # The cgroup tree is not shown: an empty read-only tmpfs over it.
    assert "/sys/fs/cgroup" in _after(argv, "--tmpfs")
    assert "/sys/fs/cgroup" in _after(argv, "--remount-ro")
    # Neither the engine's init nor its devpts: bubblewrap's own init and /dev stand for them.
    assert "/run/podman-init" not in argv
    assert "/dev/pts" not in argv


def test_masked_and_read_only_paths_are_covered_as_this_kernel_has_them() -> None:
    argv = image_sandbox(_config(), TOOLS, present=present).argv
    assert ("/dev/null", "/proc/keys") in _pairs(argv, "--ro-bind")  # a file: /dev/null over it
    for folder in ("/proc/acpi", "/sys/firmware"):  # a folder: an empty read-only tmpfs
        assert folder in _after(argv, "--tmpfs")
        assert folder in _after(argv, "--remount-ro")
    assert "/proc/kcore" not in argv  # absent here: nothing to cover
    assert ("/proc/bus", "/proc/bus") in _pairs(argv, "--ro-bind")
    assert ("/proc/sys", "/proc/sys") in _pairs(argv, "--ro-bind")
    assert "/proc/sysrq-trigger" not in argv
    # After the file systems they lie in.
    assert argv.index("/proc/keys") > argv.index("--proc")


def test_a_read_only_root_is_remounted_so_last() -> None:
    config = _config()
    config["root"]["readonly"] = True
    argv = image_sandbox(config, TOOLS, present=present).argv
    assert argv[argv.index("--chdir") - 2 : argv.index("--chdir")] == ["--remount-ro", "/"]
    assert "/" not in _after(image_sandbox(_config(), TOOLS, present=present).argv, "--remount-ro")


def test_the_engines_devices_are_bound_as_devices() -> None:
    config = _config()
    config["linux"]["devices"] = [{"path": "/dev/nvidia0", "type": "c", "major": 195, "minor": 0}]
    assert _pairs(image_sandbox(config, TOOLS, present=present).argv, "--dev-bind") == [
        ("/dev/nvidia0", "/dev/nvidia0")
    ]


def test_the_entry_drops_the_engines_init_and_the_environment_is_the_engines() -> None:
    made = image_sandbox(_config(), TOOLS, present=present)
    assert made.entry == ["/entry"]
    assert made.env == ["PATH=/usr/bin:/bin", "TERM=xterm", "container=podman"]


def test_the_engines_bind_mounts_are_left_to_root_and_none_is_bubblewraps() -> None:
    made = image_sandbox(_config(), TOOLS, present=present)
    assert made.binds == [("/copies/hosts", "/etc/hosts", True), (WORK, WORK, False)]
    assert WORK not in made.argv[: made.argv.index("--chdir")]  # the tenant may not reach it
    assert "/copies/hosts" not in made.argv


def test_the_mount_points_to_make_are_those_in_the_root_file_system() -> None:
    points = dict(image_sandbox(_config(), TOOLS, present=present).mount_points)
    assert points == {"/sys": None, "/proc": None, "/dev": None, "/etc/hosts": "/copies/hosts", WORK: WORK}


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda c: c["process"].update(capabilities={"bounding": ["CAP_NET_RAW"]}), "CAP_NET_RAW"),
        (lambda c: c["process"]["user"].update(uid=0), "root"),
        (lambda c: c["mounts"].append({"destination": "/x", "type": "nfs", "source": "h:/x"}), "nfs"),
        (
            lambda c: c["linux"]["namespaces"].append({"type": "network", "path": "/proc/1/ns/net"}),
            "existing",
        ),
        (lambda c: c["linux"]["namespaces"].append({"type": "time"}), "time"),
        (
            lambda c: c.update(hooks={"createContainer": [{"path": "/usr/bin/nvidia-cdi-hook"}]}),
            "createContainer",
        ),
    ],
    ids=["capability", "root", "mount-type", "joined-namespace", "namespace-type", "hooks"],
)
def test_what_bubblewrap_is_not_given_to_do_is_refused(change: Any, said: str) -> None:
    config = copy.deepcopy(_config())
    change(config)
    with pytest.raises(TemplateError, match=said):
        image_sandbox(config, TOOLS, present=present)
