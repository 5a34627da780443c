"""The engine adapter against a fake engine program that records what it is asked."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from services.orchestrator.adapters.engines import (
    Engine,
    ImageMissingError,
    detect_engine,
    find_image,
    resolve_image,
)

FAKE = """#!/bin/sh
# A fake engine: records each call; an image exists once pulled (or if pre-made).
echo "$*" >> "$FAKE_DIR/calls"
case "$1 $2" in
  "image inspect")
    digests='["registry.example/team/app@sha256:abcd"]'
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
