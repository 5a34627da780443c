"""Errors of the job protocol: one exception that carries every problem found in a job at once.

A user fixing a job YAML should see all of its problems in one round trip, each with the place
in the YAML, what is wrong and how to fix it; callers (REST, CLI) only ever catch this one type.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict


class Problem(BaseModel):
    """One thing wrong with a job: where (a dotted YAML path), what, and how to fix it."""

    model_config = ConfigDict(frozen=True)

    path: str
    message: str
    hint: str

    def __str__(self) -> str:
        where = self.path or "(document)"
        return f"{where}: {self.message} ({self.hint})" if self.hint else f"{where}: {self.message}"


class JobProtocolError(Exception):
    """A job was refused; `.problems` lists every reason, in the order they appear in the YAML."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems: list[Problem] = list(problems)
        super().__init__("; ".join(str(p) for p in self.problems) or "invalid job")


def format_path(parts: Iterable[str | int]) -> str:
    """Join path parts the way users read them: keys with dots, list positions in brackets."""
    text = ""
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += f".{part}" if text else part
    return text
