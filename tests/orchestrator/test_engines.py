"""The engine adapter against a fake engine program that records what it is asked."""

from __future__ import annotations

import json
import os
import stat
from dataclasses import replace
from pathlib import Path

import pytest

from services.orchestrator.adapters import engines
from services.orchestrator.adapters.engines import (
    Engine,
    ImageLookups,
    ImageMissingError,
    choose_runner,
    detect_engine,
    find_image,
    resolve_image,
)

FAKE = """#!/bin/sh
# A fake engine: records each call; an image exists once pulled (or if pre-made).
echo "$*" >> "$FAKE_DIR/calls"
case "$1 $2" in
  "image inspect")
    digests=${FAKE_DIGESTS:-'["registry.example/team/app@sha256:abcd"]'}
    if [ -f "$FAKE_DIR/pulled" ]; then echo "sha256:1234 $digests"; exit 0; fi
    echo "Error: no such image" >&2; exit 125 ;;
  "pull --authfile")
    cp "$3" "$FAKE_DIR/auth-seen.json"; ls -l "$3" | cut -c1-10 > "$FAKE_DIR/auth-mode"
    [ -n "$FAKE_PULL_FAILS" ] && { echo "Error: unauthorized: bad credentials" >&2; exit 125; }
    touch "$FAKE_DIR/pulled"; exit 0 ;;
  "pull --quiet")
    [ -n "$FAKE_PULL_FAILS" ] && { echo "Error: manifest unknown" >&2; exit 125; }
    touch "$FAKE_DIR/pulled"; exit 0 ;;
  "info --format") echo runc; exit 0 ;;
esac
exit 0
"""


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Engine:
    program = tmp_path / "podman"
    program.write_text(FAKE)
    program.chmod(program.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("FAKE_DIR", str(tmp_path))
    return Engine("podman", str(program), "runc")


async def test_a_private_image_is_pulled_with_its_credentials_in_a_root_only_file_removed_after(
    fake: Engine, tmp_path: Path
) -> None:
    scratch = tmp_path / "task" / "private"
    auth = {"username": "alice", "password": "s3cret-pw", "registryuri": "registry.example"}
    found = await resolve_image(fake, "registry.example/team/app:1", "missing", auth=auth, scratch=scratch)
    assert found.run == "sha256:1234"
    assert found.digest == "registry.example/team/app@sha256:abcd"
    seen = json.loads((tmp_path / "auth-seen.json").read_text())
    assert list(seen["auths"]) == ["registry.example"]
    assert (tmp_path / "auth-mode").read_text().startswith("-rw-------")
    assert not any(scratch.rglob("*.json"))  # removed once the pull is over
    calls = (tmp_path / "calls").read_text()
    assert "s3cret-pw" not in calls  # never an argument


async def test_pull_policies(fake: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ImageMissingError, match="PAI_IMAGE_PULL=never") as never:
        await resolve_image(fake, "app:1", "never")
    assert never.value.exit_code == 254
    assert "pull" not in (tmp_path / "calls").read_text()
    monkeypatch.setenv("FAKE_PULL_FAILS", "1")
    with pytest.raises(ImageMissingError, match="could not be pulled: Error: manifest unknown"):
        await resolve_image(fake, "app:1", "missing")
    monkeypatch.delenv("FAKE_PULL_FAILS")
    (tmp_path / "pulled").touch()
    os.remove(tmp_path / "calls")
    await resolve_image(fake, "app:1", "always")  # there already, pulled again all the same
    assert (tmp_path / "calls").read_text().splitlines()[0] == "pull --quiet app:1"
    os.remove(tmp_path / "calls")
    await resolve_image(fake, "app:1", "missing")  # there: not pulled
    assert "pull" not in (tmp_path / "calls").read_text()


async def test_always_pulls_a_present_image_and_records_the_digest_of_the_repository_pulled(
    fake: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One image under three names: a mirror first, a repository whose name ends like the one
    # pulled, then the one pulled.
    monkeypatch.setenv(
        "FAKE_DIGESTS",
        '["mirror.example/team/app@sha256:1111", "registry.example/team/myapp@sha256:2222",'
        ' "registry.example/team/app@sha256:3333"]',
    )
    (tmp_path / "pulled").touch()
    found = await resolve_image(fake, "registry.example/team/app:1", "always")
    assert (tmp_path / "calls").read_text().splitlines()[0] == "pull --quiet registry.example/team/app:1"
    assert found.digest == "registry.example/team/app@sha256:3333"
    monkeypatch.setenv(
        "FAKE_DIGESTS", '["registry.example/team/myapp@sha256:2222", "docker.io/library/app@sha256:5555"]'
    )
    hub = await resolve_image(fake, "app:1", "missing")  # a short name: docker.io/library/app
    assert hub.digest == "docker.io/library/app@sha256:5555"
    monkeypatch.setenv("FAKE_DIGESTS", '["docker.io/library/busybox@sha256:4444"]')
    by_id = await resolve_image(fake, "sha256:1234", "missing")  # by id: no repository named
    assert by_id.digest == "docker.io/library/busybox@sha256:4444"


def test_an_engine_named_outright_that_does_not_work_stops_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no podman, no docker
    with pytest.raises(ValueError, match="PAI_TASK_ENGINE=docker: no docker"):
        detect_engine("docker", tmp_path)
    choice = detect_engine("auto", tmp_path)
    assert choice.engine is None
    assert choice.describe() == "tasks run on the host: no container engine works (no podman; no docker)"


async def test_an_image_not_on_the_node_is_left_to_the_tasks_runtime_to_pull(
    fake: Engine, tmp_path: Path
) -> None:
    missing = await find_image(fake, "registry.example/team/app:1", "missing")
    assert (missing.run, missing.digest, missing.pull) == ("registry.example/team/app:1", None, True)
    asked = (tmp_path / "calls").read_text()
    always = await find_image(fake, "app:1", "always")
    assert always.pull
    assert (tmp_path / "calls").read_text() == asked  # always: not even looked at
    with pytest.raises(ImageMissingError, match="PAI_IMAGE_PULL=never"):
        await find_image(fake, "app:1", "never")
    (tmp_path / "pulled").touch()
    here = await find_image(fake, "registry.example/team/app:1", "missing")
    assert (here.run, here.digest, here.pull) == (
        "sha256:1234",
        "registry.example/team/app@sha256:abcd",
        False,
    )


async def test_an_image_is_looked_at_again_only_once_the_engines_list_of_images_changed(
    fake: Engine, tmp_path: Path
) -> None:
    images = tmp_path / "storage" / "overlay-images" / "images.json"
    images.parent.mkdir(parents=True)
    images.write_text("[]")
    engine = replace(fake, images_file=str(images))
    lookups = ImageLookups()
    (tmp_path / "pulled").touch()

    def looks() -> int:
        return (tmp_path / "calls").read_text().count("image inspect")

    first = await find_image(engine, "app:1", "missing", lookups)
    assert await find_image(engine, "app:1", "missing", lookups) == first
    assert looks() == 1  # the second attempt's look is the first's
    rewritten = images.with_name("images.json.tmp")
    rewritten.write_text('[{"id": "another"}]')
    os.replace(rewritten, images)  # a pull, tag, import or removal: the engine rewrites it
    await find_image(engine, "app:1", "missing", lookups)
    assert looks() == 2
    await find_image(fake, "app:1", "missing", lookups)  # no list to watch (Docker): always asked
    await find_image(fake, "app:1", "missing", lookups)
    assert looks() == 4
    os.remove(tmp_path / "pulled")
    images.write_text("[]  ")
    missing = await find_image(engine, "app:1", "missing", lookups)
    assert missing.pull  # an image gone is gone at once
    assert await find_image(engine, "app:1", "missing", lookups) == missing
    assert looks() == 6  # what is not there is never kept


def test_the_runner_is_runc_where_podman_runs_it_and_the_platform_is_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    podman = Engine("podman", "/usr/bin/podman", "runc")
    (tmp_path / "runc").write_text("#!/bin/sh\n")
    (tmp_path / "runc").chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert choose_runner(podman, "auto") == replace(podman, runner="runc", runc=str(tmp_path / "runc"))
    assert choose_runner(podman, "engine") == podman
    assert choose_runner(Engine("docker", "/usr/bin/docker", "runc"), "auto").runner == "engine"
    assert choose_runner(Engine("podman", "/usr/bin/podman", "crun"), "auto").runner == "engine"
    with pytest.raises(ValueError, match="PAI_CONTAINER_RUNNER=runc: Podman runs crun, not runc"):
        choose_runner(Engine("podman", "/usr/bin/podman", "crun"), "runc")
    with pytest.raises(ValueError, match="must be auto, bwrap, runc or engine"):
        choose_runner(podman, "crun")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert choose_runner(podman, "auto") == podman
    with pytest.raises(ValueError, match="mounting an image's files needs root"):
        choose_runner(podman, "runc")
    (tmp_path / "runc").unlink()
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    with pytest.raises(ValueError, match="no runc"):
        choose_runner(podman, "runc")


def test_the_platforms_containers_conf_names_the_engines_profile_for_this_machine_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine_profile = tmp_path / "seccomp.json"
    engine_profile.write_text(
        json.dumps(
            {
                "defaultAction": "SCMP_ACT_ERRNO",
                "archMap": [
                    {
                        "architecture": "SCMP_ARCH_X86_64",
                        "subArchitectures": ["SCMP_ARCH_X86", "SCMP_ARCH_X32"],
                    },
                    {"architecture": "SCMP_ARCH_AARCH64", "subArchitectures": ["SCMP_ARCH_ARM"]},
                ],
                "syscalls": [{"names": ["read"], "action": "SCMP_ACT_ALLOW"}],
            }
        )
    )
    monkeypatch.setattr(engines, "ENGINE_SECCOMP", engine_profile)
    monkeypatch.setattr("platform.machine", lambda: "x86_64")
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    conf = engines.write_containers_conf(data_dir).read_text()
    written = data_dir / engines.SECCOMP_PROFILE
    assert f'seccomp_profile = "{written}"' in conf.splitlines()
    narrowed = json.loads(written.read_text())
    assert narrowed["archMap"] == [{"architecture": "SCMP_ARCH_X86_64", "subArchitectures": []}]
    assert narrowed["syscalls"][0] == {"names": ["read"], "action": "SCMP_ACT_ALLOW"}
    # No new user namespace (core/bundles.py no_user_namespaces): clone3 refused as unknown.
    assert {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38} in narrowed["syscalls"]


def test_without_an_engine_profile_file_the_containers_conf_leaves_the_engines_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(engines, "ENGINE_SECCOMP", tmp_path / "missing.json")
    conf = engines.write_containers_conf(tmp_path).read_text()
    assert "seccomp_profile" not in conf
    assert "default_ulimits = []" in conf.splitlines()
    assert not (tmp_path / engines.SECCOMP_PROFILE).exists()


def _tool(folder: Path, name: str, body: str) -> str:
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


def test_the_runner_is_bubblewrap_where_it_makes_a_user_namespace_and_the_platform_is_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    podman = Engine("podman", "/usr/bin/podman", "runc")
    runc = _tool(tmp_path, "runc", "exit 0")
    # setpriv runs what follows its "--"; bubblewrap answers as the probe's marker file says.
    setpriv = _tool(tmp_path, "setpriv", 'while [ "$1" != "--" ]; do shift; done; shift; exec "$@"')
    said = tmp_path / "refuse"
    bwrap = _tool(
        tmp_path,
        "bwrap",
        f'if [ -e {said} ]; then echo "bwrap: No permissions to creating new namespace" >&2; exit 1; fi',
    )
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    chosen = choose_runner(podman, "auto")
    assert chosen == replace(podman, runner="bwrap", sandbox=(bwrap, setpriv), runc=runc)
    assert "bubblewrap in a user namespace" in chosen.describe()
    assert choose_runner(podman, "bwrap") == chosen
    assert choose_runner(podman, "runc").runner == "runc"  # asked for: runc, bubblewrap or not
    said.touch()  # no user namespace here: runc where it is, and a refusal where bwrap was asked for
    assert choose_runner(podman, "auto").runner == "runc"
    with pytest.raises(ValueError, match=r"PAI_CONTAINER_RUNNER=bwrap: .*No permissions"):
        choose_runner(podman, "bwrap")
    said.unlink()
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(ValueError, match="PAI_CONTAINER_RUNNER=bwrap: mounting an image's files needs root"):
        choose_runner(podman, "bwrap")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    with pytest.raises(ValueError, match=r"PAI_CONTAINER_RUNNER=bwrap: .*Podman's images, not docker's"):
        choose_runner(Engine("docker", "/usr/bin/docker", "runc"), "bwrap")
