"""ssh keys and config, storage refusal rules and cmd parameter checks, without running a task."""

from __future__ import annotations

import os
import pwd
from pathlib import Path
from typing import Any

import pytest

from runtime.errors import PluginError
from runtime.plugins import applicable, prepare_cmd
from runtime.spec import PluginSpec, TaskSpec, parse_spec
from runtime.ssh import prepare_ssh
from runtime.storage import mount_point, requested_storages
from tests.runtime.helpers import result_of, role, run_runtime, spec_for, write_spec

SSH_PORTS = {
    ("master", 0): {"ssh": [46001]},
    ("worker", 0): {"ssh": [46002]},
    ("worker", 1): {"ssh": [46003]},
}
ROLES = [role("master"), role("worker", 2)]


def _task(tmp_path: Path, role_name: str, index: int, **extra: Any) -> TaskSpec:
    return parse_spec(spec_for(tmp_path, role_name, index, ROLES, "true", ports=SSH_PORTS, **extra))


def test_jobssh_gives_every_task_the_same_key_and_a_config_naming_each_peer(tmp_path: Path) -> None:
    messages: list[str] = []
    reports = [
        prepare_ssh({"jobssh": True}, _task(tmp_path, r, i), {}, messages.append)
        for r, i in [("master", 0), ("worker", 1)]
    ]
    assert reports[0]["keygen"] == "ssh-keygen"
    assert reports[1]["keygen"] == "existing"
    master_ssh = tmp_path / "master-0" / "work" / ".ssh"
    worker_ssh = tmp_path / "worker-1" / "work" / ".ssh"
    assert (master_ssh / "id_job").read_text() == (worker_ssh / "id_job").read_text()
    assert (master_ssh / "id_job").stat().st_mode & 0o077 == 0
    public = (master_ssh / "id_job.pub").read_text().strip()
    assert public.startswith("ssh-ed25519 ")
    assert public in (worker_ssh / "authorized_keys").read_text()
    config = (worker_ssh / "config").read_text()
    for name, port in [("master-0", 46001), ("worker-0", 46002), ("worker-1", 46003)]:
        assert f"Host {name}\n  HostName 127.0.0.1\n  Port {port}\n" in config
    assert any("sshd is not installed" in m for m in messages)


def test_jobssh_works_for_a_uid_without_a_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Kubernetes task pod runs as a uid its image seldom lists in /etc/passwd."""

    def unknown(uid: int) -> Any:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    for name in ("LOGNAME", "USER", "LNAME", "USERNAME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(pwd, "getpwuid", unknown)
    prepare_ssh({"jobssh": True}, _task(tmp_path, "master", 0), {}, print)
    config = (tmp_path / "master-0" / "work" / ".ssh" / "config").read_text()
    assert f"  User {os.getuid()}\n" in config


def test_user_keys_are_authorized_and_unknown_userssh_types_refused(tmp_path: Path) -> None:
    task = _task(tmp_path, "master", 0)
    prepare_ssh(
        {"userssh": {"type": "custom", "value": "ssh-rsa AAAA one\nssh-rsa BBBB two"}}, task, {}, print
    )
    keys = (tmp_path / "master-0" / "work" / ".ssh" / "authorized_keys").read_text().splitlines()
    assert keys == ["ssh-rsa AAAA one", "ssh-rsa BBBB two"]
    with pytest.raises(PluginError, match="userssh"):
        prepare_ssh({"userssh": {"type": "ldap"}}, task, {}, print)


def test_ssh_plugin_rendered_from_a_secret_reports_its_key_maker(tmp_path: Path) -> None:
    secrets = tmp_path / "secrets.json"
    secrets.write_text('{"userssh": "ssh-rsa SECRETKEY me"}')
    plugin = {
        "plugin": "ssh",
        "parameters": {"jobssh": True, "userssh": {"type": "custom", "value": "<% $secrets.userssh %>"}},
    }
    spec = spec_for(
        tmp_path,
        "worker",
        0,
        [role("worker")],
        "cat .ssh/authorized_keys",
        plugins=[plugin],
        secrets_file=str(secrets),
    )
    code, _ = run_runtime(write_spec(tmp_path, spec))
    assert code == 0
    report = result_of(spec)["plugins"][0]
    assert report["keygen"] == "ssh-keygen"
    assert report["sshd"] == "absent"
    assert report["authorizedKeys"] == 2
    assert "SECRETKEY" not in (Path(spec["dirs"]["log_dir"]) / "user.pai.all").read_text()


def test_plugins_apply_only_to_their_task_roles(tmp_path: Path) -> None:
    plugins = [{"plugin": "cmd", "taskroles": ["worker"]}, {"plugin": "ssh"}]
    master = parse_spec(spec_for(tmp_path, "master", 0, ROLES, "true", plugins=plugins))
    assert [p.plugin for p in applicable(master)] == ["ssh"]


def test_cmd_callbacks_and_pre_commands_cannot_be_mixed() -> None:
    spec = PluginSpec(plugin="cmd", parameters={"callbacks": [], "preCommands": ["x"]})
    with pytest.raises(PluginError, match="not both"):
        prepare_cmd(spec)


def test_storage_defaults_to_the_users_default_storages_and_refuses_others(tmp_path: Path) -> None:
    raw = spec_for(tmp_path, "master", 0, ROLES, "true")
    raw["storages"] = [
        {"name": "home", "type": "nfs", "path": "/data/home", "mount_path": "/home/me", "default": True},
        {"name": "team", "type": "nfs", "path": "/data/team", "mount_path": "/mnt/team"},
    ]
    allowed = parse_spec(raw).storages
    assert [(s.name, m) for s, m in requested_storages({}, allowed)] == [("home", "/home/me")]
    picked = requested_storages({"storages": [{"name": "team", "mountPath": "/data"}]}, allowed)
    assert [(s.name, m) for s, m in picked] == [("team", "/data")]
    with pytest.raises(PluginError, match="may not use"):
        requested_storages({"storageConfigNames": ["finance"]}, allowed)


def test_a_mount_path_cannot_leave_the_work_dir(tmp_path: Path) -> None:
    assert mount_point(tmp_path, "/mnt/data") == tmp_path / "mnt" / "data"
    with pytest.raises(PluginError, match=r"\.\."):
        mount_point(tmp_path, "/mnt/../../etc")
