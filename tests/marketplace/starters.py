"""The starter templates as tests read them: every folder, its job, its item and its README."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

STARTERS = Path(__file__).resolve().parents[2] / "services" / "marketplace" / "starters"


@dataclass(frozen=True)
class Starter:
    slug: str
    job_yaml: str
    item: dict[str, Any]
    readme: str


def starters() -> list[Starter]:
    return [
        Starter(
            slug=folder.name,
            job_yaml=(folder / "job.yaml").read_text(),
            item=yaml.safe_load((folder / "item.yaml").read_text()),
            readme=(folder / "README.md").read_text(),
        )
        for folder in sorted(STARTERS.iterdir())
        if folder.is_dir()
    ]


def with_parameters(job_yaml: str, **parameters: object) -> str:
    """The job with some parameters replaced (as a user edits them before submitting)."""
    job = yaml.safe_load(job_yaml)
    unknown = set(parameters) - set(job.get("parameters") or {})
    assert not unknown, f"{job['name']} has no parameters {sorted(unknown)}"
    job["parameters"].update(parameters)
    return str(yaml.safe_dump(job, sort_keys=False))
