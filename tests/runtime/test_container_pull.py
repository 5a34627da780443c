"""A task whose image is not on the node: its runtime pulls it first (the task's log says so), runs
it by the id the pull gave, records its digest, and ends with 254 when it cannot be pulled.

The engine is a fake program that records what it is asked: `pull` succeeds unless told to fail,
`image inspect` answers once pulled, and `run` runs the container's command here (everything from
the image id on), its script on stdin as a real engine passes it."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest

from runtime.exitcodes import IMAGE_NOT_EXISTS
from tests.runtime.helpers import all_log, result_of, role, run_runtime, spec_for, write_spec

FAKE = """#!/bin/sh
dir=$(dirname "$0")
echo "$*" >> "$dir/calls"
case "$1" in
  pull)
    [ -f "$dir/refuse" ] && { echo "Error: reading manifest: manifest unknown" >&2; exit 125; }
    for a in "$@"; do [ -f "$a" ] && cp "$a" "$dir/auth-seen"; done
    touch "$dir/pulled"; exit 0 ;;
  image)
    [ -f "$dir/pulled" ] || { echo "Error: no such image" >&2; exit 125; }
    digests='["registry.example/team/app@sha256:beef"]'
    [ -f "$dir/digests" ] && digests=$(cat "$dir/digests")
    echo "sha256:feed $digests"; exit 0 ;;
  run)
    while [ "$1" != "sha256:feed" ]; do
      shift; [ $# -gt 0 ] || { echo "ran another image" >&2; exit 99; }
    done
    shift; exec "$@" ;;
esac
exit 3
"""


@pytest.fixture
def engine(tmp_path: Path) -> Path:
    program = tmp_path / "engine" / "podman"
    program.parent.mkdir()
    program.write_text(FAKE)
    program.chmod(program.stat().st_mode | stat.S_IEXEC)
    return program


def _spec(tmp_path: Path, engine: Path, auth: Path | None = None) -> dict[str, Any]:
    container = {
        "engine": str(engine),
        "run": ["run", "--rm", "-i"],
        "image": "registry.example/team/app:1",
        "pull": True,
        **({"auth_file": str(auth)} if auth else {}),
    }
    return spec_for(tmp_path, "main", 0, [role("main")], "echo in-the-image", container=container, gang=False)


def test_the_runtime_pulls_then_runs_the_image_by_its_id_and_records_its_digest(
    tmp_path: Path, engine: Path
) -> None:
    auth = tmp_path / "private" / ".registry-auth" / "config.json"
    auth.parent.mkdir(parents=True)
    credentials = json.dumps({"auths": {"registry.example": {"auth": "YWxpY2U6cHc="}}})
    auth.write_text(credentials)
    spec = _spec(tmp_path, engine, auth)
    code, err = run_runtime(write_spec(tmp_path, spec))
    assert code == 0, err
    assert "in-the-image" in all_log(spec)
    runtime_log = (Path(spec["dirs"]["log_dir"]) / "runtime.pai.log").read_text()
    assert "pulling the docker image registry.example/team/app:1" in runtime_log
    assert (
        "pulled the docker image registry.example/team/app:1: registry.example/team/app@sha256:beef"
        in runtime_log
    )
    assert result_of(spec)["imageDigest"] == "registry.example/team/app@sha256:beef"
    calls = (engine.parent / "calls").read_text().splitlines()
    assert calls[0] == f"pull --quiet --authfile {auth} registry.example/team/app:1"
    assert (engine.parent / "auth-seen").read_text() == credentials
    assert not auth.exists()  # the credentials are gone once the pull is over


def test_an_image_that_cannot_be_pulled_ends_the_task_with_254_before_its_command(
    tmp_path: Path, engine: Path
) -> None:
    (engine.parent / "refuse").touch()
    spec = _spec(tmp_path, engine)
    code, _ = run_runtime(write_spec(tmp_path, spec))
    assert code == IMAGE_NOT_EXISTS
    result = result_of(spec)
    assert result["runtimeExit"]["phrase"] == "ContainerImageNotExists"
    assert "could not be pulled: Error: reading manifest: manifest unknown" in result["runtimeExit"]["reason"]
    assert result["failure"]["code"] == 254
    assert result["userExitCode"] is None
    assert "in-the-image" not in all_log(spec)


def test_an_image_with_several_names_records_the_digest_of_the_repository_pulled(
    tmp_path: Path, engine: Path
) -> None:
    (engine.parent / "digests").write_text(
        '["mirror.example/team/app@sha256:1111", "registry.example/team/myapp@sha256:2222",'
        ' "registry.example/team/app@sha256:3333"]'
    )
    spec = _spec(tmp_path, engine)
    code, err = run_runtime(write_spec(tmp_path, spec))
    assert code == 0, err
    assert result_of(spec)["imageDigest"] == "registry.example/team/app@sha256:3333"
