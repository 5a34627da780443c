"""Where the OpenPAI reference jobs live, and the verdicts OpenPAI's own validator gave them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.support.anchors import anchor

ANCHORS = anchor("openpai")
JOBS = ANCHORS / "jobs"
# What the modules reading these files need: a clone without them skips those modules.
NEEDED = ("openpai", "jobs")


@dataclass(frozen=True)
class Verdict:
    relative_path: str
    accepted: bool
    reason: str


def openpai_verdicts() -> dict[str, Verdict]:
    """Read README.txt's file table: a NOTE starting with REJECTED marks a refused job."""
    verdicts: dict[str, Verdict] = {}
    for line in (ANCHORS / "README.txt").read_text(encoding="utf-8").splitlines():
        columns = line.split("\t")
        if not columns[0].startswith("jobs/") or len(columns) < 6:
            continue
        note = columns[6] if len(columns) > 6 else ""
        relative = columns[0].removeprefix("jobs/")
        verdicts[relative] = Verdict(relative, not note.startswith("REJECTED"), note)
    return verdicts


def job_files() -> list[Path]:
    return sorted(p for p in JOBS.rglob("*") if p.suffix in (".yaml", ".yml"))


def largest_job() -> Path:
    return max(job_files(), key=lambda p: p.stat().st_size)
