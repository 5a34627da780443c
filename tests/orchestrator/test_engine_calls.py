"""Each call the platform makes to its container engine, argument by argument, over a fake engine.

The fake is a shell script (named podman or docker) that records its arguments, the environment
the platform gives it (CONTAINERS_CONF, DOCKER_CONFIG) and answers from files a test writes:
``<engine>.<command>.out`` / ``.err`` / ``.code``, ``.sleep`` for one that never answers. An
image is there once ``present`` exists (a pull that succeeds makes it).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import platform
import stat
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from services.orchestrator.adapters import engines
from services.orchestrator.adapters.engines import (
    Engine,
    EngineChoice,
    EngineError,
    ImageLookups,
    ImageMissingError,
    ResolvedImage,
    choose_runner,
    containers_of,
    detect_engine,
    find_image,
    platform_label,
    pull_policy,
    remove_container,
    resolve_image,
    write_auth_file,
    write_containers_conf,
)
from services.orchestrator.core.bundles import no_user_namespaces

FAKE = """#!/bin/sh
name=${0##*/}
{ echo "$name"; for a in "$@"; do echo "$a"; done; echo "--end--"; } >> "$FAKE_DIR/calls"
echo "${CONTAINERS_CONF-<unset>} ${DOCKER_CONFIG-<unset>}" >> "$FAKE_DIR/env"
echo $$ > "$FAKE_DIR/pid"
if [ "$1 $2" = "pull --authfile" ]; then
  /bin/cp "$3" "$FAKE_DIR/auth-seen.json"
  if [ -f "$FAKE_DIR/remove-auth" ]; then /bin/rm "$3"; fi
fi
if [ -n "$DOCKER_CONFIG" ]; then /bin/cp "$DOCKER_CONFIG/config.json" "$FAKE_DIR/auth-seen.json"; fi
at="$FAKE_DIR/$name.$1"
if [ "$1" = image ] && [ -f "$FAKE_DIR/present" ]; then at="$at.present"; fi
[ -f "$at.sleep" ] && exec /bin/sleep 60
[ -f "$at.out" ] && /bin/cat "$at.out"
[ -f "$at.err" ] && /bin/cat "$at.err" >&2
code=0
[ -f "$at.code" ] && read -r code < "$at.code"
if [ "$1" = pull ] && [ "$code" = 0 ]; then : > "$FAKE_DIR/present"; fi
exit "$code"
"""

LONG = "x" * 350 + "END"  # a stderr line past the 300 characters a message keeps


@dataclass
class Fake:
    folder: Path
    bin: Path

    def program(self, name: str) -> str:
        path = self.bin / name
        path.write_text(FAKE)
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
        return str(path)

    def engine(self, name: str = "podman", env: dict[str, str] | None = None) -> Engine:
        return Engine(name, self.program(name), "runc", env or {})

    def answer(self, engine: str, command: str, out: str = "", err: str = "", code: int = 0) -> None:
        (self.folder / f"{engine}.{command}.out").write_text(out)
        (self.folder / f"{engine}.{command}.err").write_text(err)
        (self.folder / f"{engine}.{command}.code").write_text(str(code))

    def hang(self, engine: str, command: str) -> None:
        (self.folder / f"{engine}.{command}.sleep").write_text("")

    def calls(self) -> list[list[str]]:
        path = self.folder / "calls"
        if not path.exists():
            return []
        found: list[list[str]] = []
        current: list[str] = []
        for line in path.read_text().splitlines():
            if line == "--end--":
                found.append(current)
                current = []
            else:
                current.append(line)
        return found

    def envs(self) -> list[str]:
        return (self.folder / "env").read_text().splitlines()


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Fake:
    folder, bin_dir = tmp_path / "fake", tmp_path / "bin"
    folder.mkdir()
    bin_dir.mkdir()
    monkeypatch.setenv("FAKE_DIR", str(folder))
    monkeypatch.setenv("PATH", str(bin_dir))  # only the fake engines (and no runc)
    monkeypatch.delenv("CONTAINERS_CONF", raising=False)
    monkeypatch.delenv("DOCKER_CONFIG", raising=False)
    monkeypatch.setattr(engines, "ENGINE_SECCOMP", tmp_path / "no-seccomp.json")
    monkeypatch.setattr(engines, "CDI_SPECS", (tmp_path / "cdi-etc", tmp_path / "cdi-run"))
    return Fake(folder, bin_dir)


Limits = list[tuple[tuple[str, ...], float]]


@pytest.fixture
def limits(monkeypatch: pytest.MonkeyPatch) -> Limits:
    """Each engine call's arguments and its time limit."""
    seen: Limits = []
    call = engines._call

    async def spy(
        engine: Engine, *args: str, limit_s: float = engines.PROBE_TIMEOUT_S
    ) -> tuple[int, str, str]:
        seen.append((args, limit_s))
        return await call(engine, *args, limit_s=limit_s)

    monkeypatch.setattr(engines, "_call", spy)
    return seen


INFO_PODMAN = "{{.Host.OCIRuntime.Name}} {{.Store.GraphRoot}} {{.Store.GraphDriverName}}"
INSPECT = ["image", "inspect", "--format", "{{.Id}} {{json .RepoDigests}}"]


# detect_engine and its probe ----------------------------------------------------------------


def test_podman_is_asked_for_its_runtime_and_store_under_the_platforms_containers_conf(
    fake: Fake, tmp_path: Path
) -> None:
    program = fake.program("podman")
    fake.answer("podman", "info", out="crun /var/lib/containers/storage overlay\n")
    (tmp_path / "data0").mkdir()
    choice = detect_engine("auto", tmp_path / "data0", "engine")
    conf = str(tmp_path / "data0" / "containers.conf")
    assert choice == EngineChoice(
        Engine(
            "podman",
            program,
            "crun",
            {"CONTAINERS_CONF": conf},
            images_file="/var/lib/containers/storage/overlay-images/images.json",
        )
    )
    assert fake.calls() == [["podman", "info", "--format", INFO_PODMAN]]
    assert fake.envs() == [f"{conf} <unset>"]  # the probe runs under the platform's own file
    assert choice.describe() == "tasks run in their docker images through podman (crun)"


def test_docker_is_asked_for_its_default_runtime_without_containers_conf(fake: Fake, tmp_path: Path) -> None:
    program = fake.program("docker")
    fake.answer("docker", "info", out="runc\n")
    choice = detect_engine(" Docker ", tmp_path, "auto")
    assert choice == EngineChoice(Engine("docker", program, "runc", {}))
    assert fake.calls() == [["docker", "info", "--format", "{{.DefaultRuntime}}"]]
    assert fake.envs() == ["<unset> <unset>"]
    assert not (tmp_path / "containers.conf").exists()  # Podman's file only


@pytest.mark.parametrize(
    ("out", "runtime", "images"),
    [
        ("", "default runtime", ""),
        ("runc\n", "runc", ""),
        ("runc /store\n", "runc", ""),  # a store without its driver: no list to watch
        ("runc /store vfs extra\n", "runc", ""),
        ("runc /store vfs\n", "runc", "/store/vfs-images/images.json"),
    ],
)
def test_the_probe_reads_the_runtime_then_the_graph_root_and_driver_of_podmans_store(
    fake: Fake, tmp_path: Path, out: str, runtime: str, images: str
) -> None:
    fake.answer("podman", "info", out=out)
    engine, why = engines._probe("podman", fake.program("podman"), {})
    assert why == ""
    assert engine is not None
    assert (engine.runtime, engine.images_file) == (runtime, images)


def test_an_nvidia_cdi_spec_in_either_folder_turns_the_cdi_flag_on(fake: Fake, tmp_path: Path) -> None:
    fake.answer("podman", "info", out="runc\n")
    program = fake.program("podman")

    def cdi() -> bool:
        engine, _ = engines._probe("podman", program, {})
        assert engine is not None
        return engine.cdi

    assert cdi() is False  # neither folder exists
    (tmp_path / "cdi-etc").mkdir()
    (tmp_path / "cdi-etc" / "amd.yaml").write_text("")
    assert cdi() is False
    (tmp_path / "cdi-run").mkdir()
    (tmp_path / "cdi-run" / "nvidia.yaml").write_text("")
    assert cdi() is True  # the second folder counts too
    (tmp_path / "cdi-run" / "nvidia.yaml").unlink()
    (tmp_path / "cdi-etc" / "nvidia-ctk.json").write_text("")
    assert cdi() is True


def test_a_probe_that_fails_says_the_engine_and_the_last_line_of_its_error(fake: Fake) -> None:
    fake.answer("podman", "info", err="WARN something\nError: cannot connect to Podman\n", code=125)
    assert engines._probe("podman", fake.program("podman"), {}) == (
        None,
        "podman info failed: Error: cannot connect to Podman",
    )
    fake.answer("docker", "info", code=1)
    assert engines._probe("docker", fake.program("docker"), {}) == (None, "docker info failed: no message")


def test_a_probe_that_never_answers_is_killed_at_its_limit(
    fake: Fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engines, "PROBE_TIMEOUT_S", 0.3)
    fake.hang("podman", "info")
    program = fake.program("podman")
    started = time.monotonic()
    engine, why = engines._probe("podman", program, {})
    assert time.monotonic() - started < 10
    assert engine is None
    assert why.startswith(f"podman did not answer (Command '['{program}', 'info', '--format'")
    assert why.endswith("timed out after 0.3 seconds)")


def test_a_probe_of_a_program_that_cannot_run_says_why(fake: Fake, tmp_path: Path) -> None:
    program = tmp_path / "bin" / "podman"
    program.write_text("not a program")
    assert engines._probe("podman", str(program), {}) == (
        None,
        f"podman did not answer ([Errno 13] Permission denied: '{program}')",
    )


def test_auto_falls_back_from_a_failing_podman_to_docker(fake: Fake, tmp_path: Path) -> None:
    fake.program("podman")
    docker = fake.program("docker")
    fake.answer("podman", "info", err="Error: no storage\n", code=125)
    fake.answer("docker", "info", out="runc\n")
    choice = detect_engine("", tmp_path)  # auto by default
    assert choice == EngineChoice(Engine("docker", docker, "runc", {}))
    assert [c[:2] for c in fake.calls()] == [["podman", "info"], ["docker", "info"]]
    assert fake.envs()[1] == "<unset> <unset>"  # Podman's containers.conf is not Docker's


def test_auto_without_a_working_engine_runs_tasks_on_the_host_and_says_each_reason(
    fake: Fake, tmp_path: Path
) -> None:
    fake.program("podman")
    fake.answer("podman", "info", err="Error: no storage\n", code=125)
    choice = detect_engine("AUTO", tmp_path)
    assert choice == EngineChoice(
        None, "no container engine works (podman info failed: Error: no storage; no docker)"
    )
    assert choice.describe() == (
        "tasks run on the host: no container engine works (podman info failed: Error: no storage; no docker)"
    )
    fake.program("docker")
    fake.answer("docker", "info", code=1)
    assert detect_engine("auto", tmp_path).why == (
        "no container engine works (podman info failed: Error: no storage; docker info failed: no message)"
    )


def test_an_engine_named_outright_that_fails_stops_the_start_with_its_reason(
    fake: Fake, tmp_path: Path
) -> None:
    fake.program("podman")
    fake.program("docker")
    fake.answer("podman", "info", err="Error: no storage\n", code=125)
    fake.answer("docker", "info", out="runc\n")
    with pytest.raises(ValueError) as failed:
        detect_engine("podman", tmp_path)
    assert str(failed.value) == "PAI_TASK_ENGINE=podman: podman info failed: Error: no storage"
    assert [c[0] for c in fake.calls()] == ["podman"]  # docker was not asked for


def test_host_and_unknown_engine_settings(fake: Fake, tmp_path: Path) -> None:
    fake.program("podman")
    assert detect_engine(" Host ", tmp_path) == EngineChoice(None, "PAI_TASK_ENGINE=host")
    with pytest.raises(ValueError) as unknown:
        detect_engine("LXC", tmp_path)
    assert str(unknown.value) == "PAI_TASK_ENGINE='lxc': must be auto, podman, docker or host"
    assert fake.calls() == []


def test_the_runner_setting_reaches_the_engine_detected(fake: Fake, tmp_path: Path) -> None:
    fake.program("podman")
    fake.answer("podman", "info", out="runc /s overlay\n")
    with pytest.raises(ValueError, match="PAI_CONTAINER_RUNNER=runc: no runc"):
        detect_engine("podman", tmp_path, "runc")


# containers.conf ----------------------------------------------------------------------------


def test_the_containers_conf_sets_no_default_ulimits_and_runc_only_where_installed(
    fake: Fake, tmp_path: Path
) -> None:
    path = write_containers_conf(tmp_path)
    assert path == tmp_path / "containers.conf"
    assert path.read_text() == "[containers]\ndefault_ulimits = []\n"
    inode = path.stat().st_ino
    assert write_containers_conf(tmp_path) == path
    assert path.stat().st_ino == inode  # the same text is not written again
    fake.program("runc")
    write_containers_conf(tmp_path)
    assert path.read_text() == '[containers]\ndefault_ulimits = []\n\n[engine]\nruntime = "runc"\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "bin",
        "containers.conf",
        "fake",
    ]  # no temporary left


def test_the_containers_conf_names_the_engines_seccomp_profile_narrowed_to_this_machine(
    fake: Fake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seccomp = tmp_path / "seccomp.json"
    arches = [
        {"architecture": "SCMP_ARCH_AARCH64", "subArchitectures": ["SCMP_ARCH_ARM"]},
        {"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86", "SCMP_ARCH_X32"]},
    ]
    seccomp.write_text(json.dumps({"defaultAction": "SCMP_ACT_ERRNO", "archMap": arches}))
    monkeypatch.setattr(engines, "ENGINE_SECCOMP", seccomp)
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    data = tmp_path / "data"
    data.mkdir()
    path = write_containers_conf(data)
    native = data / "seccomp-native.json"
    assert path.read_text() == f'[containers]\ndefault_ulimits = []\nseccomp_profile = "{native}"\n'
    assert native.read_text() == json.dumps(
        {
            "defaultAction": "SCMP_ACT_ERRNO",
            "archMap": [{"architecture": "SCMP_ARCH_X86_64", "subArchitectures": []}],
            "syscalls": no_user_namespaces([], "x86_64"),  # the refusals only: nothing was allowed
        },
        indent=1,
    )
    inode = native.stat().st_ino
    write_containers_conf(data)
    assert native.stat().st_ino == inode
    assert sorted(p.name for p in data.iterdir()) == ["containers.conf", "seccomp-native.json"]
    monkeypatch.setattr(platform, "machine", lambda: "mips")  # no entry: the engine's own
    write_containers_conf(data)
    assert path.read_text() == "[containers]\ndefault_ulimits = []\n"
    seccomp.write_text("[1, 2]")  # not a profile
    assert engines._native_seccomp(data) is None
    seccomp.write_text("{not json")
    assert engines._native_seccomp(data) is None


# pull policy ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "policy"),
    [("", "missing"), ("missing", "missing"), (" Never ", "never"), ("ALWAYS", "always"), ("never", "never")],
)
def test_the_pull_policy_is_read_trimmed_and_in_any_case(value: str, policy: str) -> None:
    assert pull_policy(value) == policy


def test_an_unknown_pull_policy_names_the_setting_and_its_values() -> None:
    with pytest.raises(ValueError) as wrong:
        pull_policy(" Sometimes")
    assert str(wrong.value) == "PAI_IMAGE_PULL='sometimes': must be missing, never or always"


# _call --------------------------------------------------------------------------------------


async def test_a_call_runs_the_program_with_stdin_closed_and_the_engines_env_added(
    fake: Fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = fake.engine("podman", {"CONTAINERS_CONF": "/data/containers.conf"})
    fake.answer("podman", "ps", out="out\xe9\n", err="err\n", code=3)
    seen: list[dict[str, Any]] = []
    spawn = asyncio.create_subprocess_exec

    async def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append({"args": args, **kwargs})
        return await spawn(*args, **kwargs)

    monkeypatch.setattr(asyncio, "create_subprocess_exec", spy)
    monkeypatch.setenv("PAI_OTHER", "kept")
    assert await engines._call(engine, "ps", "--all") == (3, "out\xe9\n", "err\n")
    [call] = seen
    assert call["args"] == (engine.program, "ps", "--all")
    assert call["stdin"] == subprocess.DEVNULL
    assert call["stdout"] == subprocess.PIPE
    assert call["stderr"] == subprocess.PIPE
    assert call["env"]["CONTAINERS_CONF"] == "/data/containers.conf"
    assert call["env"]["PAI_OTHER"] == "kept"  # the platform's environment, the engine's added
    assert fake.envs() == ["/data/containers.conf <unset>"]


async def test_a_calls_output_that_is_not_utf8_is_replaced_not_an_error(fake: Fake) -> None:
    engine = fake.engine("podman")
    (fake.folder / "podman.ps.out").write_bytes(b"a\xffb")
    (fake.folder / "podman.ps.err").write_bytes(b"\xfe")
    assert await engines._call(engine, "ps") == (0, "a\ufffdb", "\ufffd")


async def test_a_call_that_never_answers_is_killed_at_its_limit_and_says_so(fake: Fake) -> None:
    engine = fake.engine("docker")
    fake.hang("docker", "ps")

    with pytest.raises(EngineError) as late:
        await asyncio.wait_for(engines._call(engine, "ps", limit_s=0.25), 20)
    assert str(late.value) == "the container engine docker did not answer in 0.25s"
    pid = int((fake.folder / "pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # killed and reaped


async def test_an_engine_that_cannot_be_run_is_an_engine_error(tmp_path: Path) -> None:
    gone = tmp_path / "gone"
    engine = Engine("podman", str(gone), "runc")
    with pytest.raises(EngineError) as failed:
        await engines._call(engine, "ps")
    assert str(failed.value) == (
        f"the container engine podman cannot be run: [Errno 2] No such file or directory: '{gone}'"
    )


# image inspect ------------------------------------------------------------------------------


async def test_an_image_is_inspected_for_its_id_and_repository_digests(fake: Fake, limits: Limits) -> None:
    engine = fake.engine("podman")
    (fake.folder / "present").touch()
    fake.answer("podman", "image.present", out='sha256:77 ["registry.example/app@sha256:ab"]\n')
    found = await engines._inspect(engine, "registry.example/app:1")
    assert found is not None
    assert (found.run, found.digest, found.pull) == ("sha256:77", "registry.example/app@sha256:ab", False)
    assert fake.calls() == [["podman", *INSPECT, "registry.example/app:1"]]
    assert limits == [((*INSPECT, "registry.example/app:1"), engines.PROBE_TIMEOUT_S)]


@pytest.mark.parametrize("out", ["sha256:77", "sha256:77 null", "sha256:77 {not json", "sha256:77 []"])
async def test_an_image_without_readable_digests_has_none(fake: Fake, out: str) -> None:
    engine = fake.engine("podman")
    (fake.folder / "present").touch()
    fake.answer("podman", "image.present", out=out + "\n")
    found = await engines._inspect(engine, "app:1")
    assert found is not None
    assert (found.run, found.digest) == ("sha256:77", None)


@pytest.mark.parametrize(
    "err",
    [
        "Error: No such image: app:1",
        "Error: app:1: image not known",
        "Error response from daemon: Not Found",
        "Error: unknown image",
    ],
)
async def test_an_image_the_engine_does_not_know_is_not_there(fake: Fake, err: str) -> None:
    engine = fake.engine("podman")
    fake.answer("podman", "image", err=err + "\n", code=125)
    assert await engines._inspect(engine, "app:1") is None


async def test_an_inspect_that_fails_otherwise_names_the_engine_the_image_and_the_error_truncated(
    fake: Fake,
) -> None:
    engine = fake.engine("docker")
    fake.answer("docker", "image", err=f"Error: permission denied {LONG}\n", code=1)
    with pytest.raises(EngineError) as failed:
        await engines._inspect(engine, "app:1")
    tail = f"Error: permission denied {LONG}"[-300:]
    assert str(failed.value) == f"docker image inspect app:1 failed: {tail}"


# resolve_image ------------------------------------------------------------------------------


async def test_a_missing_image_is_pulled_quietly_then_inspected(fake: Fake, limits: Limits) -> None:
    engine = fake.engine("podman")
    fake.answer("podman", "image", err="Error: no such image\n", code=125)
    fake.answer("podman", "image.present", out='sha256:77 ["docker.io/library/app@sha256:ab"]\n')
    found = await resolve_image(engine, "app:1", "missing")
    assert (found.run, found.digest) == ("sha256:77", "docker.io/library/app@sha256:ab")
    assert limits == [
        ((*INSPECT, "app:1"), engines.PROBE_TIMEOUT_S),
        (("pull", "--quiet", "app:1"), engines.PULL_TIMEOUT_S),
        ((*INSPECT, "app:1"), engines.PROBE_TIMEOUT_S),
    ]


async def test_podman_pulls_with_an_auth_file_only_root_can_read_removed_after(
    fake: Fake, tmp_path: Path
) -> None:
    engine = fake.engine("podman", {"CONTAINERS_CONF": "/c.conf"})
    scratch = tmp_path / "task" / "scratch"
    auth = {"username": "alice", "password": "pw", "registryuri": "registry.example"}
    await resolve_image(engine, "registry.example/app:1", "always", auth=auth, scratch=scratch)
    path = scratch / ".registry-auth" / "config.json"
    pull = fake.calls()[0]
    assert pull == ["podman", "pull", "--authfile", str(path), "--quiet", "registry.example/app:1"]
    token = base64.b64encode(b"alice:pw").decode()
    assert json.loads((fake.folder / "auth-seen.json").read_text()) == {
        "auths": {"registry.example": {"auth": token}}
    }
    assert fake.envs()[0] == "/c.conf <unset>"  # no DOCKER_CONFIG for Podman
    assert not path.exists()


async def test_docker_pulls_with_its_config_folder_holding_the_credentials(
    fake: Fake, tmp_path: Path
) -> None:
    engine = fake.engine("docker")
    scratch = tmp_path / "scratch"
    auth = {"username": "bob", "password": "pw2"}
    await resolve_image(engine, "app:1", "always", auth=auth, scratch=scratch)
    folder = scratch / ".registry-auth"
    assert fake.calls()[0] == ["docker", "pull", "--quiet", "app:1"]
    assert fake.envs() == [f"<unset> {folder}", "<unset> <unset>"]  # the pull only, not the inspect
    token = base64.b64encode(b"bob:pw2").decode()
    assert json.loads((fake.folder / "auth-seen.json").read_text()) == {
        "auths": {"docker.io": {"auth": token}}
    }
    assert not (folder / "config.json").exists()
    assert engine.env == {}  # the engine itself is unchanged


@pytest.mark.parametrize(
    ("auth", "with_scratch"),
    [({"username": "", "password": "pw"}, True), ({"password": "pw"}, True), ({"username": "a"}, False)],
)
async def test_no_auth_file_without_a_user_name_or_a_place_for_it(
    fake: Fake, tmp_path: Path, auth: dict[str, str], with_scratch: bool
) -> None:
    engine = fake.engine("podman")
    await resolve_image(
        engine, "app:1", "always", auth=auth, scratch=tmp_path / "s" if with_scratch else None
    )
    assert fake.calls()[0] == ["podman", "pull", "--quiet", "app:1"]
    assert not (tmp_path / "s").exists()


async def test_a_failed_pull_says_the_image_and_the_last_error_line_truncated_and_removes_the_credentials(
    fake: Fake, tmp_path: Path
) -> None:
    engine = fake.engine("podman")
    fake.answer("podman", "pull", err=f"Trying to pull...\nError: denied {LONG}\n", code=125)
    auth = {"username": "alice", "password": "pw"}
    with pytest.raises(ImageMissingError) as failed:
        await resolve_image(engine, "app:1", "always", auth=auth, scratch=tmp_path / "s")
    assert str(failed.value) == f"the image app:1 could not be pulled: {f'Error: denied {LONG}'[-300:]}"
    assert failed.value.exit_code == 254
    assert list((tmp_path / "s" / ".registry-auth").iterdir()) == []
    fake.answer("podman", "pull", code=1)
    with pytest.raises(ImageMissingError) as silent:
        await resolve_image(engine, "app:1", "always")
    assert str(silent.value) == "the image app:1 could not be pulled: no message"


async def test_an_image_pulled_but_not_found_after_is_missing(fake: Fake) -> None:
    engine = fake.engine("podman")
    fake.answer("podman", "image", err="Error: no such image\n", code=125)
    fake.answer("podman", "image.present", err="Error: image not known\n", code=125)
    with pytest.raises(ImageMissingError) as failed:
        await resolve_image(engine, "app:1", "missing")
    assert str(failed.value) == "the image app:1 was pulled but is not on this machine"


async def test_never_does_not_pull_a_missing_image(fake: Fake) -> None:
    engine = fake.engine("podman")
    fake.answer("podman", "image", err="Error: no such image\n", code=125)
    with pytest.raises(ImageMissingError) as failed:
        await resolve_image(engine, "app:1", "never")
    assert str(failed.value) == (
        "the image app:1 is not on this machine and images are not pulled (PAI_IMAGE_PULL=never)"
    )
    assert [c[1] for c in fake.calls()] == ["image"]


async def test_an_engine_failure_while_looking_is_not_a_missing_image(fake: Fake) -> None:
    engine = fake.engine("podman")
    fake.answer("podman", "image", err="Error: database is locked\n", code=125)
    with pytest.raises(EngineError) as failed:
        await resolve_image(engine, "app:1", "missing")
    assert str(failed.value) == "podman image inspect app:1 failed: Error: database is locked"
    assert [c[1] for c in fake.calls()] == ["image"]


# auth files ---------------------------------------------------------------------------------


def test_an_auth_file_is_root_only_in_a_folder_of_its_own(tmp_path: Path) -> None:
    directory = tmp_path / "deep" / "task"
    path = write_auth_file(
        directory, {"registryuri": "r.example:5000", "username": "alice", "password": "p:w"}
    )
    assert path == directory / ".registry-auth" / "config.json"
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    token = base64.b64encode(b"alice:p:w").decode()
    assert json.loads(path.read_text()) == {"auths": {"r.example:5000": {"auth": token}}}
    # Written again, shorter: the old text does not trail.
    again = write_auth_file(directory, {"username": "al"})
    assert again == path
    assert json.loads(path.read_text()) == {
        "auths": {"docker.io": {"auth": base64.b64encode(b"al:").decode()}}
    }
    write_auth_file(directory, {"password": "pw"})  # no user: an empty one, as the registry is told
    assert json.loads(path.read_text()) == {
        "auths": {"docker.io": {"auth": base64.b64encode(b":pw").decode()}}
    }


# remove_container and containers_of ---------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "args"),
    [("podman", ["rm", "--force", "--ignore", "task-1"]), ("docker", ["rm", "--force", "task-1"])],
)
async def test_a_container_is_removed_running_or_not(
    fake: Fake, limits: Limits, name: str, args: list[str]
) -> None:
    engine = fake.engine(name)
    await remove_container(engine, "task-1")
    assert fake.calls() == [[name, *args]]
    assert limits == [(tuple(args), engines.PROBE_TIMEOUT_S)]
    fake.answer(name, "rm", err="Error: no such container\n", code=1)
    await remove_container(engine, "task-1")  # none there: nothing raised


@pytest.mark.parametrize("name", ["podman", "docker"])
async def test_the_containers_of_a_label_are_listed_by_name(fake: Fake, limits: Limits, name: str) -> None:
    engine = fake.engine(name)
    fake.answer(name, "ps", out="task-1\ntask-2\n")
    assert await containers_of(engine, "pai.platform", "abc") == ["task-1", "task-2"]
    args = ["ps", "--all", "--filter", "label=pai.platform=abc", "--format", "{{.Names}}"]
    assert fake.calls() == [[name, *args]]
    assert limits == [(tuple(args), engines.PROBE_TIMEOUT_S)]
    fake.answer(name, "ps", out="half\n", err="Error: cannot list\n", code=125)
    assert await containers_of(engine, "pai.platform", "abc") == []
    fake.answer(name, "ps", out="")
    assert await containers_of(engine, "pai.platform", "abc") == []


async def test_a_user_without_a_password_pulls_with_an_empty_one(fake: Fake, tmp_path: Path) -> None:
    engine = fake.engine("podman")
    await resolve_image(engine, "app:1", "always", auth={"username": "bob"}, scratch=tmp_path / "s")
    token = base64.b64encode(b"bob:").decode()
    assert json.loads((fake.folder / "auth-seen.json").read_text()) == {
        "auths": {"docker.io": {"auth": token}}
    }


async def test_an_auth_file_the_engine_removed_itself_is_no_error(fake: Fake, tmp_path: Path) -> None:
    engine = fake.engine("podman")
    (fake.folder / "remove-auth").touch()
    fake.answer("podman", "image.present", out="sha256:77 []\n")
    found = await resolve_image(engine, "app:1", "always", auth={"username": "bob"}, scratch=tmp_path / "s")
    assert found.run == "sha256:77"
    assert not (tmp_path / "s" / ".registry-auth" / "config.json").exists()


# runners, labels, lookups -------------------------------------------------------------------


def test_an_empty_runner_setting_is_auto_and_a_runner_that_cannot_be_says_why_in_whole(
    fake: Fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    podman = Engine("podman", "/usr/bin/podman", "runc")
    fake.program("runc")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert choose_runner(podman, "") == choose_runner(podman, "auto")
    assert choose_runner(podman, "").runner == "runc"
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(ValueError) as refused:
        choose_runner(podman, "runc")
    assert str(refused.value) == "PAI_CONTAINER_RUNNER=runc: mounting an image's files needs root"
    with pytest.raises(ValueError) as docker:
        choose_runner(Engine("docker", "/usr/bin/docker", "runc"), " RUNC ")
    assert (
        str(docker.value) == "PAI_CONTAINER_RUNNER=runc: bundles are made from Podman's images, not docker's"
    )


def test_an_engine_whose_containers_runc_runs_says_so() -> None:
    engine = Engine("podman", "/usr/bin/podman", "runc", runner="runc", runc="/usr/bin/runc")
    assert engine.describe() == "tasks run in their docker images: podman's images, run by runc itself"
    assert EngineChoice(engine).describe() == engine.describe()


def test_the_platform_label_is_its_resolved_data_dirs_hash(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "data")
    label = platform_label(tmp_path / "data")
    assert label == hashlib.sha256(str((tmp_path / "data").resolve()).encode()).hexdigest()[:16]
    assert platform_label(tmp_path / "link") == label  # one platform, however its dir is named
    assert platform_label(tmp_path / "other") != label


async def test_always_leaves_the_pull_to_the_tasks_runtime_by_its_reference(fake: Fake) -> None:
    engine = fake.engine("podman")
    assert await find_image(engine, "registry.example/app:1", "always") == ResolvedImage(
        "registry.example/app:1", None, pull=True
    )
    assert fake.calls() == []


@pytest.fixture
def images(fake: Fake, tmp_path: Path) -> tuple[Engine, Path]:
    listing = tmp_path / "overlay-images" / "images.json"
    listing.parent.mkdir()
    listing.write_text("[]")
    (fake.folder / "present").touch()
    fake.answer("podman", "image.present", out='sha256:77 ["docker.io/library/app@sha256:ab"]\n')
    engine = Engine("podman", fake.program("podman"), "runc", images_file=str(listing))
    return engine, listing


def _rewrite(listing: Path, text: str) -> None:
    tmp = listing.with_name("new.json")
    tmp.write_text(text)
    os.replace(tmp, listing)


def _looked(fake: Fake) -> list[str]:
    return [call[-1] for call in fake.calls() if call[1] == "image"]


async def test_each_image_is_kept_under_its_own_reference(fake: Fake, images: tuple[Engine, Path]) -> None:
    engine, _ = images
    lookups = ImageLookups()
    await lookups.inspect(engine, "a:1")
    await lookups.inspect(engine, "b:1")
    await lookups.inspect(engine, "a:1")
    await lookups.inspect(engine, "b:1")
    assert _looked(fake) == ["a:1", "b:1"]


async def test_the_lookups_keep_the_most_recently_asked_images_up_to_their_number(
    fake: Fake, images: tuple[Engine, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, listing = images
    monkeypatch.setattr(ImageLookups, "KEPT", 2)
    lookups = ImageLookups()
    await lookups.inspect(engine, "a:1")
    await lookups.inspect(engine, "b:1")
    await lookups.inspect(engine, "b:1")  # two kept: not asked again
    assert _looked(fake) == ["a:1", "b:1"]
    _rewrite(listing, "[1]")
    await lookups.inspect(engine, "a:1")  # looked at again: now the most recent
    await lookups.inspect(engine, "c:1")  # a third: the oldest (b) goes
    await lookups.inspect(engine, "a:1")
    assert _looked(fake) == ["a:1", "b:1", "a:1", "c:1"]
    assert list(lookups._found) == [(engine.program, "a:1"), (engine.program, "c:1")]
