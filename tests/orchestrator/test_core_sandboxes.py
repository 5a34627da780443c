"""A host task's sandbox, decided without running it: bubblewrap's namespaces, setpriv's drop."""

from __future__ import annotations

import pytest

from services.orchestrator.adapters.sandboxing import detect_sandbox
from services.orchestrator.core.sandboxes import SandboxTools, drop_arguments, wrap_arguments

TOOLS = SandboxTools("/usr/bin/bwrap", "/usr/bin/setpriv")


def _pairs(args: list[str], flag: str) -> list[list[str]]:
    return [args[i + 1 : i + 3] for i, a in enumerate(args) if a == flag]


def test_a_host_task_has_its_own_pid_namespace_proc_and_mnt_and_dies_with_its_runtime() -> None:
    args = wrap_arguments(TOOLS)
    assert args[0] == "/usr/bin/bwrap"
    assert "--unshare-pid" in args
    assert args[args.index("--proc") + 1] == "/proc"
    assert args[args.index("--tmpfs") + 1] == "/mnt"
    assert "--die-with-parent" in args
    assert "--unshare-ipc" in args
    # The host's tree comes first: the mounts above it are laid over it, not under.
    assert _pairs(args, "--dev-bind") == [["/", "/"]]
    assert args.index("--dev-bind") < args.index("--proc") < args.index("--tmpfs")


def test_a_task_on_a_gpu_share_keeps_the_hosts_ipc_for_the_mps_daemon() -> None:
    assert "--unshare-ipc" not in wrap_arguments(TOOLS, share_ipc=True)


def test_the_drop_leaves_the_tenants_ids_and_no_capability_or_way_back() -> None:
    args = drop_arguments(TOOLS, 1800000007, 1800000008)
    assert args[0] == "/usr/bin/setpriv"
    assert args[-1] == "--"
    assert "--reuid=1800000007" in args
    assert "--regid=1800000008" in args
    for wanted in ("--clear-groups", "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all"):
        assert wanted in args
    assert "--no-new-privs" in args


def test_no_sandbox_when_the_platform_is_not_root_and_it_says_why() -> None:
    choice = detect_sandbox("auto", euid=1000)
    assert choice.tools is None
    assert "not root" in choice.describe()


def test_off_turns_it_off_and_required_without_one_refuses_to_start() -> None:
    assert detect_sandbox("off").tools is None
    assert "PAI_TASK_SANDBOX=off" in detect_sandbox("off").describe()
    with pytest.raises(ValueError, match="PAI_TASK_SANDBOX=required"):
        detect_sandbox("required", euid=1000)
    with pytest.raises(ValueError, match="must be auto, required or off"):
        detect_sandbox("sometimes")


def test_without_bubblewrap_the_line_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shutil.which", lambda name: None if name == "bwrap" else f"/usr/bin/{name}")
    choice = detect_sandbox("auto", euid=0)
    assert choice.tools is None
    assert "apt-get install bubblewrap" in choice.describe()
