"""How `pai job exec` enters a task, decided from its spec alone (runtime/entering.py): the
program, its arguments and environment for each way a task runs, and what cannot be entered."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from runtime.entering import REFUSED, Entry, EntryError, plan_entry
from runtime.spec import SpecError, TaskSpec, parse_spec
from tests.runtime.helpers import REPO_ROOT, role, spec_for, write_spec

DROP = ["/usr/bin/setpriv", "--reuid=2001", "--regid=2001", "--clear-groups", "--no-new-privs", "--"]
INHERITED = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}


def _spec(tmp_path: Path, **extra: Any) -> TaskSpec:
    return parse_spec(spec_for(tmp_path, "worker", 0, [role("worker")], "sleep 60", **extra))


TENANT: dict[str, Any] = {"run_as": {"name": "alice", "uid": 2001, "gid": 2001}}
SANDBOX: dict[str, Any] = {**TENANT, "sandbox": {"wrap": ["/usr/bin/bwrap", "--unshare-pid"], "drop": DROP}}
PODMAN: dict[str, Any] = {
    **TENANT,
    "container": {
        "engine": "/usr/bin/podman",
        "run": ["run", "--rm", "--name", "pai-job-1-0-worker-0-0", "--user", "2001:2001", "--workdir", "/w"],
        "image": "sha256:abc",
        "env": {"CONTAINERS_CONF": "/data/containers.conf"},
    },
}


def _plan(spec: TaskSpec, *, tty: bool = False, **how: Any) -> Entry:
    return plan_entry(spec, ["id", "-u"], tty=tty, inherited=INHERITED, **how)


def test_a_host_task_of_the_platforms_user_runs_the_command_itself_with_the_tasks_variables(
    tmp_path: Path,
) -> None:
    spec = _spec(tmp_path)
    entry = _plan(spec)

    assert entry.argv == ["id", "-u"]
    assert entry.drop_to is None
    assert entry.confine
    assert entry.cwd == str(spec.dirs.work_dir)
    assert entry.env["PAI_JOB_NAME"] == "alice~demo"
    assert entry.env["PAI_CURRENT_TASK_ROLE_NAME"] == "worker"
    assert entry.env["HOME"] == str(spec.dirs.work_dir)
    assert entry.env["PATH"] == INHERITED["PATH"]


def test_a_host_task_of_a_tenant_without_a_sandbox_drops_to_the_tenant(tmp_path: Path) -> None:
    entry = _plan(_spec(tmp_path, **TENANT))

    assert entry.argv == ["id", "-u"]
    assert entry.drop_to == (2001, 2001)
    assert entry.env["USER"] == entry.env["LOGNAME"] == "alice"
    assert Path(entry.env["TMPDIR"]).parts[-2:] == ("work", ".tmp")


@pytest.mark.parametrize("tty", [False, True], ids=["pipes", "a-terminal"])
def test_a_sandboxed_task_is_entered_in_its_namespaces_and_work_dir_then_dropped_as_its_commands_are(
    tmp_path: Path, tty: bool
) -> None:
    spec = _spec(tmp_path, **SANDBOX)
    entry = _plan(spec, tty=tty, target=4242, nsenter="/usr/bin/nsenter", chdir="/usr/bin/env")

    session = ["setsid", "--ctty"] if tty else []
    assert entry.argv == [
        "/usr/bin/nsenter",
        "--target=4242",
        "--pid",
        "--mount",
        "--ipc",
        "--",
        "/usr/bin/env",
        f"--chdir={spec.dirs.work_dir}",
        *session,
        *DROP,
        "id",
        "-u",
    ]
    assert entry.drop_to is None, "setpriv drops, after the namespaces are entered as root"
    assert entry.confine, "the exec joins the task's cgroups first"
    assert entry.env["PAI_JOB_NAME"] == "alice~demo"
    assert ("TERM" in entry.env) is tty


def test_a_sandboxed_task_between_its_commands_cannot_be_entered(tmp_path: Path) -> None:
    with pytest.raises(EntryError, match="runs no command now"):
        _plan(_spec(tmp_path, **SANDBOX), target=None)


@pytest.mark.parametrize("tty", [False, True], ids=["pipes", "a-terminal"])
def test_a_task_in_its_image_is_entered_with_the_engines_exec_its_variables_by_name(
    tmp_path: Path, tty: bool
) -> None:
    spec = _spec(tmp_path, **PODMAN)
    entry = _plan(spec, tty=tty)

    head = ["/usr/bin/podman", "exec", "-i", *(["-t"] if tty else [])]
    assert entry.argv[: len(head)] == head
    assert entry.argv[-3:] == ["pai-job-1-0-worker-0-0", "id", "-u"]
    options = entry.argv[len(head) : -3]
    assert options[:4] == ["--user", "2001:2001", "--workdir", str(spec.dirs.work_dir)]
    passed = options[5::2]
    assert set(options[4::2]) == {"--env"}
    assert "PAI_JOB_NAME" in passed
    assert "HOME" in passed
    assert not any("=" in name for name in passed), "values never appear in an argument"
    assert entry.env["PAI_JOB_NAME"] == "alice~demo"
    assert entry.env["CONTAINERS_CONF"] == "/data/containers.conf"
    assert not entry.confine, "the engine's client is the platform's: the container is in the task's groups"


def test_a_task_whose_scripts_runc_runs_is_entered_with_runcs_exec_into_the_running_one(
    tmp_path: Path,
) -> None:
    runc = {"program": "/usr/sbin/runc", "root": "/run/pai-runc", "config": "/x/config.json", "name": "pai-t"}
    try:
        spec = _spec(tmp_path, **{**PODMAN, "container": {**PODMAN["container"], "runc": runc}})
    except SpecError:
        pytest.skip("this checkout's specs have no runc runner")

    entry = _plan(spec, tty=True, target_container="pai-t-user-command")

    assert entry.argv == [
        "/usr/sbin/runc",
        "--root",
        "/run/pai-runc",
        "exec",
        "--tty",
        "--cwd",
        str(spec.dirs.work_dir),
        "--env",
        "TERM=xterm",
        "pai-t-user-command",
        "id",
        "-u",
    ]
    with pytest.raises(EntryError, match="runs no command now"):
        _plan(spec, target_container=None)


def test_an_engine_that_cannot_exec_is_refused_by_name(tmp_path: Path) -> None:
    other = {**PODMAN, "container": {**PODMAN["container"], "engine": "/usr/bin/nerdctl"}}
    with pytest.raises(EntryError, match="engine nerdctl"):
        _plan(_spec(tmp_path, **other))


def test_no_command_is_refused(tmp_path: Path) -> None:
    with pytest.raises(EntryError, match="no command"):
        plan_entry(_spec(tmp_path), [], tty=False, inherited=INHERITED)


def test_the_helper_runs_the_command_in_the_work_dir_with_the_tasks_variables(tmp_path: Path) -> None:
    spec = spec_for(tmp_path, "worker", 0, [role("worker")], "sleep 60")
    work = Path(spec["dirs"]["work_dir"])
    work.mkdir(parents=True)
    path = write_spec(tmp_path, spec)

    done = subprocess.run(
        [
            sys.executable,
            "-S",
            "-m",
            "runtime.entering",
            "--spec",
            str(path),
            "--",
            "sh",
            "-c",
            'echo "$(pwd) $PAI_JOB_NAME $PAI_TASK_INDEX"',
        ],
        cwd=REPO_ROOT,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )

    assert (done.returncode, done.stdout.split()) == (0, [str(work), "alice~demo", "0"]), done.stderr
    refused = subprocess.run(
        [sys.executable, "-S", "-m", "runtime.entering", "--spec", str(tmp_path / "none.json"), "--", "id"],
        cwd=REPO_ROOT,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert refused.returncode == REFUSED
    assert refused.stderr.startswith("pai exec: ")


def _bubblewrap(tmp_path: Path, entry_seccomp: str | None) -> TaskSpec:
    sandbox: dict[str, Any] = {
        "argv": [*DROP, "/usr/bin/bwrap", "--unshare-pid"],
        "env": ["PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C"],
        "rootfs": str(tmp_path / "rootfs"),
        "stage": "/run/pai-task-root",
        "seccomp": str(tmp_path / "seccomp.bpf"),
        **({"entry_seccomp": entry_seccomp} if entry_seccomp else {}),
    }
    return _spec(tmp_path, **{**PODMAN, "container": {**PODMAN["container"], "sandbox": sandbox}})


def test_a_task_in_its_image_that_bubblewrap_runs_is_entered_under_the_containers_seccomp_filter(
    tmp_path: Path,
) -> None:
    """Dropped to the tenant, then nsenter into the container's namespaces; the profile's filter
    (with nsenter's two calls) loaded by this process before it execs: the command runs under
    it as the task's own do. A container prepared before there was such a filter has none."""
    spec = _bubblewrap(tmp_path, str(tmp_path / "seccomp-entry.bpf"))
    entry = _plan(spec, target=4242, nsenter="/usr/bin/nsenter")
    assert entry.argv[: len(DROP) + 2] == [*DROP, "/usr/bin/nsenter", "--target=4242"]
    assert entry.argv[-3:] == ["--", "id", "-u"]
    assert entry.seccomp == str(tmp_path / "seccomp-entry.bpf")
    assert entry.env["LANG"] == "C"
    assert entry.env["PAI_JOB_NAME"] == "alice~demo"
    assert _plan(_bubblewrap(tmp_path, None), target=4242).seccomp is None
    with pytest.raises(EntryError, match="runs no command now"):
        _plan(spec, target=None)


def test_a_seccomp_filter_that_cannot_be_read_or_is_no_program_refuses_the_exec(tmp_path: Path) -> None:
    from runtime.entering import load_filter

    with pytest.raises(EntryError, match="cannot be read"):
        load_filter(str(tmp_path / "missing.bpf"))
    odd = tmp_path / "odd.bpf"
    odd.write_bytes(b"\0" * 7)
    with pytest.raises(EntryError, match="is not a BPF program"):
        load_filter(str(odd))
