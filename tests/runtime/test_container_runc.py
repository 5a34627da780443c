"""A task whose containers runc runs itself: each script gets a container of its own, named after
it, configured from the task's bundle with the loader as its command and the task's variables by
value, its script on stdin; its bundle is gone once it ends.

runc is a fake program here that records its arguments and the configuration it was given, then
runs the configuration's command (after the init's ``--``) with its environment, as runc would in
the container."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from runtime.container import run_name, run_prefix, script_config, shell_command
from tests.runtime.helpers import all_log, result_of, role, run_runtime, spec_for, write_spec

FAKE = f"""#!{sys.executable}
import json, os, sys
args = sys.argv[1:]
bundle, name = args[args.index("--bundle") + 1], args[-1]
here = os.path.dirname(os.path.abspath(__file__))
config = json.load(open(os.path.join(bundle, "config.json")))
with open(os.path.join(here, "calls"), "a") as f:
    f.write(json.dumps({{"args": args, "config": config}}) + "\\n")
argv = config["process"]["args"]
argv = argv[argv.index("--") + 1:]
env = dict(entry.split("=", 1) for entry in config["process"]["env"])
os.chdir(config["process"]["cwd"])
os.execve(argv[0], argv, env)
"""

BASE: dict[str, Any] = {
    "ociVersion": "1.0.2-dev",
    "process": {
        "user": {"uid": 0, "gid": 0},
        "args": ["/run/podman-init", "--"],
        "env": ["PATH=/usr/bin:/bin", "HOME=/image-home", "container=podman"],
        "cwd": "/",
    },
    "root": {"path": "/rootfs"},
    "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
    "linux": {"cgroupsPath": "/pai-x/task-group/pai-j-0-main-0-0", "seccomp": {"defaultAction": "X"}},
}


@pytest.fixture
def runc(tmp_path: Path) -> Path:
    program = tmp_path / "fake-runc" / "runc"
    program.parent.mkdir()
    program.write_text(FAKE)
    program.chmod(program.stat().st_mode | stat.S_IEXEC)
    return program


def _spec(tmp_path: Path, runc: Path, entrypoint: str, **extra: Any) -> dict[str, Any]:
    spec = spec_for(tmp_path, "main", 0, [role("main")], entrypoint, gang=False, **extra)
    work = Path(spec["dirs"]["work_dir"])
    base = {**BASE, "process": {**BASE["process"], "cwd": str(work)}}
    config = tmp_path / "bundle.json"
    config.write_text(json.dumps(base))
    spec["container"] = {
        "engine": "/usr/bin/podman",
        "run": [],
        "image": "sha256:feed",
        "runc": {
            "program": str(runc),
            "root": str(tmp_path / "state"),
            "config": str(config),
            "name": "pai-j-0-main-0-0",
        },
    }
    return spec


def _calls(runc: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (runc.parent / "calls").read_text().splitlines()]


def test_each_script_runs_in_a_container_of_its_own_configured_from_the_tasks_bundle(
    tmp_path: Path, runc: Path
) -> None:
    spec = _spec(tmp_path, runc, 'echo "home=$HOME job=$PAI_JOB_NAME"; echo in-the-container')
    code, err = run_runtime(write_spec(tmp_path, spec))
    assert code == 0, err
    log = all_log(spec)
    assert "in-the-container" in log
    assert "job=alice~demo" in log  # the task's variables, by value
    assert "home=/image-home" not in log  # over the image's
    [call] = _calls(runc)
    name = "pai-j-0-main-0-0-user-command"
    bundle = str(tmp_path / "main-0" / "private" / "bundles" / name)
    assert call["args"] == ["--root", str(tmp_path / "state"), "run", "--bundle", bundle, name]
    config = call["config"]
    assert config["process"]["args"] == ["/run/podman-init", "--", *shell_command("user-command")]
    assert config["linux"]["cgroupsPath"] == f"/pai-x/task-group/{name}"
    assert config["linux"]["seccomp"] == BASE["linux"]["seccomp"]
    assert "container=podman" in config["process"]["env"]
    assert not Path(bundle).exists()  # gone with its container
    assert result_of(spec)["exitCode"] == 0


def test_the_script_is_never_in_the_configuration_the_loader_reads_it_from_stdin(
    tmp_path: Path, runc: Path
) -> None:
    spec = _spec(tmp_path, runc, "echo the-secret-command-text")
    code, err = run_runtime(write_spec(tmp_path, spec))
    assert code == 0, err
    assert "the-secret-command-text" not in json.dumps(_calls(runc))
    assert "the-secret-command-text" in all_log(spec)


def test_a_command_that_fails_in_its_container_is_the_tasks_exit(tmp_path: Path, runc: Path) -> None:
    spec = _spec(tmp_path, runc, "exit 3")
    code, _ = run_runtime(write_spec(tmp_path, spec))
    assert code == 3
    assert result_of(spec)["userExitCode"] == 3


def test_a_scripts_configuration_adds_the_storages_and_keeps_the_tasks() -> None:
    mounts = [("/srv/team", "/mnt/team", True), ("/srv/scratch", "/mnt/scratch", False)]
    config = script_config(BASE, "pai-j-0-main-0-0", "ssh-pre", {"HOME": "/w", "PAI_X": "1"}, mounts)
    assert config["mounts"][0] == BASE["mounts"][0]
    assert config["mounts"][1:] == [
        {
            "destination": "/mnt/team",
            "type": "bind",
            "source": "/srv/team",
            "options": ["rbind", "rprivate", "ro"],
        },
        {
            "destination": "/mnt/scratch",
            "type": "bind",
            "source": "/srv/scratch",
            "options": ["rbind", "rprivate", "rw"],
        },
    ]
    assert config["process"]["env"] == ["PATH=/usr/bin:/bin", "container=podman", "HOME=/w", "PAI_X=1"]
    assert BASE["process"]["env"] == ["PATH=/usr/bin:/bin", "HOME=/image-home", "container=podman"]


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        ("user-command", "pai-j-user-command"),
        ("com.microsoft.pai.runtimeplugin.cmd-pre", "pai-j-com.microsoft.pai.runtimeplugin.cmd-pre"),
        ("odd label/x", "pai-j-odd_label_x"),
    ],
    ids=["the user's command", "a plugin's", "unsafe characters"],
)
def test_a_scripts_container_is_named_after_the_task_and_the_script(label: str, expected: str) -> None:
    assert run_name("pai-j", label) == expected
    assert run_name("pai-j", label).startswith(run_prefix("pai-j"))
    assert not run_name("pai-j1", label).startswith(run_prefix("pai-j"))  # another task's
