"""Warnings for valid jobs: fields the platform will not act on as their author expects."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from libs.protocol import parse_job
from libs.protocol.advice import advise


def _job(retries: int, *, gang: bool | None = None, roles: int = 1) -> str:
    doc: dict[str, object] = {
        "protocolVersion": 2,
        "name": "retry",
        "type": "job",
        "prerequisites": [{"name": "image", "type": "dockerimage", "uri": "busybox"}],
        "taskRoles": {
            f"role{n}": {
                "instances": 1,
                "taskRetryCount": retries,
                "dockerImage": "image",
                "resourcePerInstance": {"cpu": 1, "memoryMB": 256, "gpu": 0},
                "commands": ["false"],
            }
            for n in range(roles)
        },
    }
    if gang is not None:
        doc["extras"] = {"gangAllocation": gang}
    return json.dumps(doc)


def test_a_task_retry_count_under_gang_allocation_is_named_with_the_fix() -> None:
    [warning] = advise(parse_job(_job(1)))
    assert warning.path == "taskRoles.role0.taskRetryCount"
    assert "ignored while gang allocation is on" in warning.message
    assert "extras.gangAllocation: false" in warning.message


def test_each_role_is_named_and_gang_on_said_outright_counts_too() -> None:
    warnings = advise(parse_job(_job(2, gang=True, roles=2)))
    assert [w.path for w in warnings] == ["taskRoles.role0.taskRetryCount", "taskRoles.role1.taskRetryCount"]


def test_no_warning_with_gang_allocation_off_or_no_task_retries() -> None:
    assert advise(parse_job(_job(1, gang=False))) == []
    assert advise(parse_job(_job(0))) == []


def test_pai_job_validate_prints_the_warning_and_still_says_ok(tmp_path: Path) -> None:
    path = tmp_path / "retry.yaml"
    path.write_text(_job(1))
    done = subprocess.run(
        [str(Path(sys.executable).with_name("pai")), "job", "validate", str(path), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert record["valid"] is True
    [warning] = record["warnings"]
    assert warning.startswith("taskRoles.role0.taskRetryCount: ")
    assert "extras.gangAllocation" in warning
