"""The embedded platform has no per-user submission limit; clusters keep OpenPAI's; `pai up` says which."""

from __future__ import annotations

from pathlib import Path

import pytest

from pai.cli.up import _limits_line
from pai.embedded.platform import EmbeddedPlatform, embedded_defaults
from services.rest.settings import RestSettings


def test_the_embedded_default_turns_the_submission_limit_off_unless_the_environment_sets_one() -> None:
    assert embedded_defaults({})["PAI_RATE_LIMIT_SUBMIT_JOB_PER_HOUR"] == "0"
    assert "PAI_RATE_LIMIT_SUBMIT_JOB_PER_HOUR" not in embedded_defaults(
        {"PAI_RATE_LIMIT_SUBMIT_JOB_PER_HOUR": "10"}
    )
    assert "PAI_RATE_LIMIT_SUBMIT_JOB_PER_HOUR" not in embedded_defaults(
        {"RATE_LIMIT_SUBMIT_JOB_PER_HOUR": "10"}  # OpenPAI's own name
    )


def test_the_embedded_node_offers_four_times_its_cores_and_never_more_memory_than_it_has() -> None:
    assert embedded_defaults({})["PAI_CPU_OVERCOMMIT"] == "4"
    assert "PAI_MEMORY_OVERCOMMIT" not in embedded_defaults({})
    assert "PAI_CPU_OVERCOMMIT" not in embedded_defaults({"PAI_CPU_OVERCOMMIT": "1"})


def test_a_cluster_keeps_openpais_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("PAI_RATE_LIMIT_SUBMIT_JOB_PER_HOUR", "RATE_LIMIT_SUBMIT_JOB_PER_HOUR"):
        monkeypatch.delenv(name, raising=False)
    settings = RestSettings()
    assert settings.rate_limit_submit_job_per_hour == 60
    assert settings.rate_limit_api_per_min == 600


def test_pai_up_prints_the_limits_in_force(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("PAI_RATE_LIMIT_SUBMIT_JOB_PER_HOUR", "PAI_RATE_LIMIT_API_PER_MIN"):
        monkeypatch.delenv(name, raising=False)
    line = _limits_line(EmbeddedPlatform(tmp_path))
    assert "job submissions by user: none" in line
    assert "requests from address 600 per minute" in line
    monkeypatch.setenv("PAI_RATE_LIMIT_SUBMIT_JOB_PER_HOUR", "5")
    assert "job submissions by user 5 per hour" in _limits_line(EmbeddedPlatform(tmp_path))
