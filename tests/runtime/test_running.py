"""The real runtime, run as ``python -m runtime --spec FILE`` subprocesses."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from runtime import exitcodes
from runtime.running import TaskRun
from runtime.spec import parse_spec
from tests.runtime.helpers import (
    all_log,
    log_dir,
    ports_outside_ephemeral,
    result_of,
    role,
    run_runtime,
    spec_for,
    start_runtime,
    write_spec,
)

TWO_ROLES = [role("master"), role("worker")]


def test_two_tasks_pass_the_barrier_together_and_see_each_other(tmp_path: Path) -> None:
    show = 'echo "peer=$PAI_HOST_IP_{peer}_0:$PAI_PORT_LIST_{peer}_0_http me=$PAI_CURRENT_TASK_ROLE_NAME"'
    master_port, worker_port = ports_outside_ephemeral(2)
    ports = {("master", 0): {"http": [master_port]}, ("worker", 0): {"http": [worker_port]}}
    master = spec_for(tmp_path, "master", 0, TWO_ROLES, show.format(peer="worker"), ports=ports)
    worker = spec_for(tmp_path, "worker", 0, TWO_ROLES, show.format(peer="master"), ports=ports)

    first = start_runtime(write_spec(tmp_path, master))
    assert first.stderr is not None
    # The runtime logs once it has announced itself; it then must wait for the worker.
    for line in first.stderr:
        if "waiting up to" in line:
            break
    else:
        raise AssertionError("the master ended without reaching the barrier")
    assert (tmp_path / "barrier" / "master-0.ready").exists()
    assert first.poll() is None, "the master ran before its peer was ready"
    assert not (log_dir(master) / "user.pai.all").read_text()

    code, worker_err = run_runtime(write_spec(tmp_path, worker))
    assert code == 0, worker_err
    _, master_err = first.communicate(timeout=60)
    assert first.returncode == 0, master_err
    assert f"peer=127.0.0.1:{worker_port} me=master" in all_log(master)
    assert f"peer=127.0.0.1:{master_port} me=worker" in all_log(worker)


def test_a_barrier_timeout_ends_the_task_as_a_conflict(tmp_path: Path) -> None:
    master = spec_for(tmp_path, "master", 0, TWO_ROLES, "echo should-not-run", barrier_timeout_s=0.3)
    code, _ = run_runtime(write_spec(tmp_path, master))
    assert code == exitcodes.BARRIER_TIMEOUT
    result = result_of(master)
    assert result["runtimeExit"]["code"] == exitcodes.BARRIER_TIMEOUT
    assert "worker-0" in result["runtimeExit"]["reason"]
    assert result["userExitCode"] is None
    assert "should-not-run" not in all_log(master)


def test_without_gang_allocation_a_task_starts_without_waiting_for_its_peers(tmp_path: Path) -> None:
    master = spec_for(tmp_path, "master", 0, TWO_ROLES, "echo alone", barrier_timeout_s=30, gang=False)
    code, _ = run_runtime(write_spec(tmp_path, master))
    assert code == 0
    assert "alone" in all_log(master)
    assert not (tmp_path / "barrier" / "master-0.ready").exists()


def test_secrets_reach_the_command_but_never_the_logs(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets.yaml"
    secrets.write_text("token: hunter2-xyz\npassword: 'p@ss w0rd'\n")
    command = (
        "echo token=<% $secrets.token %>; echo '<% $secrets.password %>' >&2; "
        "printf '%s' '<% $secrets.token %>' > proof.txt"
    )
    spec = spec_for(tmp_path, "worker", 0, [role("worker")], command, secrets_file=str(secrets))
    code, stderr = run_runtime(write_spec(tmp_path, spec))
    assert code == 0
    assert (Path(spec["dirs"]["work_dir"]) / "proof.txt").read_text() == "hunter2-xyz"
    assert "token=******" in all_log(spec)
    everything = stderr + "".join(p.read_text() for p in log_dir(spec).iterdir())
    assert "hunter2" not in everything
    assert "p@ss w0rd" not in everything
    assert "hunter2" not in write_spec(tmp_path, spec).read_text()


def test_a_missing_secret_fails_the_task_before_the_command_runs(tmp_path: Path) -> None:
    spec = spec_for(tmp_path, "worker", 0, [role("worker")], "echo <% $secrets.nope %>")
    code, _ = run_runtime(write_spec(tmp_path, spec))
    assert code == exitcodes.SECRET_MISSING
    assert "nope" in result_of(spec)["runtimeExit"]["reason"]


def test_logs_rotate_by_size_and_keep_the_configured_number(tmp_path: Path) -> None:
    command = "for i in $(seq 1 400); do echo line-$i-padding-padding-padding; done"
    rotation = {"max_bytes": 1024, "backup_count": 2}
    spec = spec_for(tmp_path, "worker", 0, [role("worker")], command, log_rotation=rotation)
    code, _ = run_runtime(write_spec(tmp_path, spec))
    assert code == 0
    logs = log_dir(spec)
    names = sorted(p.name for p in logs.iterdir() if p.name.startswith("user.pai.stdout"))
    assert names == ["user.pai.stdout", "user.pai.stdout.1", "user.pai.stdout.2"]
    assert all((logs / n).stat().st_size <= 1024 for n in names)
    assert "line-400-" in (logs / "user.pai.stdout").read_text()
    assert "line-1-" not in "".join((logs / n).read_text() for n in names)


def _cmd(policy: str, pre: list[str], post: list[str]) -> dict[str, object]:
    return {
        "plugin": "cmd",
        "failurePolicy": policy,
        "parameters": {"preCommands": pre, "postCommands": post},
    }


def test_cmd_plugin_runs_pre_then_user_then_post_commands(tmp_path: Path) -> None:
    callbacks = {
        "plugin": "com.microsoft.pai.runtimeplugin.cmd",
        "parameters": {
            "callbacks": [
                {"event": "taskStarts", "commands": ["echo PRE-2"]},
                {"event": "taskSucceeds", "commands": ["echo POST-2"]},
            ]
        },
    }
    plugins = [_cmd("fail", ["echo PRE-1"], ["echo POST-1"]), callbacks]
    spec = spec_for(tmp_path, "worker", 0, [role("worker")], "echo USER", plugins=plugins)
    assert run_runtime(write_spec(tmp_path, spec))[0] == 0
    lines = all_log(spec).split()
    assert lines == ["PRE-1", "PRE-2", "USER", "POST-2", "POST-1"]


def test_a_failing_pre_command_with_policy_fail_ends_the_task(tmp_path: Path) -> None:
    plugins = [_cmd("fail", ["false", "echo after-false"], [])]
    spec = spec_for(tmp_path, "worker", 0, [role("worker")], "echo USER", plugins=plugins)
    assert run_runtime(write_spec(tmp_path, spec))[0] == exitcodes.PLUGIN_FAILED
    assert "USER" not in all_log(spec)
    assert "after-false" not in all_log(spec)
    assert result_of(spec)["plugins"][-1]["status"] == "failed"


def test_a_failing_pre_command_with_policy_ignore_is_skipped(tmp_path: Path) -> None:
    plugins = [_cmd("ignore", ["false", "echo after-false"], [])]
    spec = spec_for(tmp_path, "worker", 0, [role("worker")], "echo USER", plugins=plugins)
    assert run_runtime(write_spec(tmp_path, spec))[0] == 0
    assert all_log(spec).split() == ["after-false", "USER"]


def test_post_commands_do_not_run_when_the_user_command_fails(tmp_path: Path) -> None:
    plugins = [_cmd("fail", [], ["echo POST"])]
    spec = spec_for(tmp_path, "worker", 0, [role("worker")], "exit 5", plugins=plugins)
    assert run_runtime(write_spec(tmp_path, spec))[0] == 5
    assert "POST" not in all_log(spec)
    assert result_of(spec)["userExitCode"] == 5


def test_storage_plugin_links_usable_storages_and_refuses_others(tmp_path: Path) -> None:
    data = tmp_path / "nfs-share"
    data.mkdir()
    (data / "hello.txt").write_text("from storage")
    storages = [{"name": "share", "type": "nfs", "path": str(data), "mount_path": "/mnt/share"}]
    ok = {"plugin": "storage", "parameters": {"storages": [{"name": "share"}]}}
    spec = spec_for(
        tmp_path, "worker", 0, [role("worker")], "cat mnt/share/hello.txt", plugins=[ok], storages=storages
    )
    assert run_runtime(write_spec(tmp_path, spec))[0] == 0
    assert all_log(spec) == "from storage"

    refused = {"plugin": "storage", "parameters": {"storageConfigNames": ["secret-team-share"]}}
    other = tmp_path / "other"
    spec = spec_for(other, "worker", 0, [role("worker")], "echo USER", plugins=[refused], storages=storages)
    other.mkdir()
    assert run_runtime(write_spec(other, spec))[0] == exitcodes.PLUGIN_FAILED
    assert "secret-team-share" in result_of(spec)["runtimeExit"]["reason"]
    assert not (Path(spec["dirs"]["work_dir"]) / "mnt").exists()


def test_sigterm_is_forwarded_and_nothing_runs_after_the_command(tmp_path: Path) -> None:
    fifo = tmp_path / "started"
    os.mkfifo(fifo)
    command = f"trap 'echo got-term; exit 0' TERM; echo started > {fifo}; sleep 60; echo not-reached"
    plugins = [_cmd("fail", [], ["echo POST"])]
    spec = spec_for(tmp_path, "worker", 0, [role("worker")], command, plugins=plugins)
    proc = start_runtime(write_spec(tmp_path, spec))
    with open(fifo) as f:
        assert f.readline().strip() == "started"
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=20)
    assert proc.returncode == 0
    log = all_log(spec)
    assert "got-term" in log
    assert "not-reached" not in log
    assert "POST" not in log
    assert result_of(spec)["stoppedBy"] == "SIGTERM"


def test_what_a_stopping_command_starts_after_the_signal_is_signalled_too(tmp_path: Path) -> None:
    fifo = tmp_path / "started"
    os.mkfifo(fifo)
    # On SIGTERM the command starts a new process: the runtime keeps signalling the tree.
    command = f"trap 'sleep 60; echo after-late-child' TERM; echo started > {fifo}; sleep 60"
    spec = spec_for(tmp_path, "worker", 0, [role("worker")], command)
    proc = start_runtime(write_spec(tmp_path, spec))
    with open(fifo) as f:
        assert f.readline().strip() == "started"
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=20)
    assert time.monotonic() - started < 10
    assert "after-late-child" in all_log(spec)
    assert result_of(spec)["stoppedBy"] == "SIGTERM"


def test_a_task_users_script_reaches_bash_whole_through_its_descriptor_alone(tmp_path: Path) -> None:
    run_as = {"name": "someone", "uid": 4242, "gid": 4242}
    spec = parse_spec(spec_for(tmp_path, "worker", 0, [role("worker")], "true", run_as=run_as))
    text = (
        'printf "%s|%s|" "$0" "${_pai_script-unset}"\n'
        "x='back\\slash  '\n"
        'printf "%s|" "$x"\n'
        'for fd in /proc/self/fd/*; do readlink "$fd"; done | grep -c script.sh || true\n\n\n'
    )
    path = tmp_path / "script.sh"
    path.write_text(text)
    script = os.open(path, os.O_RDONLY)
    try:
        # As the runtime's own user: the command line, not the change of user, is under test.
        done = subprocess.run(
            TaskRun(spec)._command(path, script), pass_fds=(script,), capture_output=True, text=True
        )
    finally:
        os.close(script)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "script.sh|unset|back\\slash  |0\n"


def test_an_invalid_spec_is_reported_by_field(tmp_path: Path) -> None:
    spec = spec_for(tmp_path, "worker", 3, [role("worker")], "true")
    code, stderr = run_runtime(write_spec(tmp_path, spec))
    assert code == exitcodes.SPEC_INVALID
    assert "worker-3" in stderr or "index" in stderr
    assert "Traceback" not in stderr


def test_a_reserved_port_taken_on_the_node_is_a_port_conflict(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("0.0.0.0", 0))
        holder.listen()
        port = holder.getsockname()[1]
        ports = {("worker", 0): {"http": [port]}}
        spec = spec_for(tmp_path, "worker", 0, [role("worker")], "echo USER", ports=ports)
        code, _ = run_runtime(write_spec(tmp_path, spec))
    assert code == exitcodes.PORT_CONFLICT
    assert str(port) in result_of(spec)["runtimeExit"]["reason"]


def test_sigterm_during_the_barrier_stops_the_task_before_anything_runs(tmp_path: Path) -> None:
    plugins = [_cmd("fail", ["echo PRE"], [])]
    spec = spec_for(tmp_path, "master", 0, TWO_ROLES, "echo USER", plugins=plugins)
    proc = start_runtime(write_spec(tmp_path, spec))
    assert proc.stderr is not None
    for line in proc.stderr:
        if "waiting up to" in line:
            break
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=20)
    assert proc.returncode == exitcodes.TERMINATED
    assert all_log(spec) == ""
    assert result_of(spec)["runtimeExit"]["reason"] == "stopped while waiting for the gang barrier"


def test_unwritable_directories_end_the_runtime_with_a_message(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    spec = spec_for(tmp_path, "worker", 0, [role("worker")], "true")
    spec["dirs"]["log_dir"] = str(blocker / "logs")
    code, stderr = run_runtime(write_spec(tmp_path, spec))
    assert code == exitcodes.INTERNAL_ERROR
    assert "cannot prepare" in stderr
    assert "Traceback" not in stderr
