"""Errors of the failure-rule library: one exception that carries every problem of a rule file.

An operator editing a rule file should see all of its mistakes in one round trip, each naming the
rule (its position and code), the field, what is wrong and how to fix it. Loading raises only this
type, so callers (the CLI, the runtime, the orchestrator) never show a stack trace for bad rules.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict


class RuleProblem(BaseModel):
    """One thing wrong with a rule file: which rule, which field, what, and how to fix it."""

    model_config = ConfigDict(frozen=True)

    index: int | None
    """Position of the rule in the file, counted from 0; None for the file as a whole."""
    code: int | None
    field: str
    message: str
    hint: str = ""

    def __str__(self) -> str:
        if self.index is None:
            where = "rule file"
        elif self.code is None:
            where = f"rule #{self.index}"
        else:
            where = f"rule #{self.index} (code {self.code})"
        if self.field:
            where = f"{where}, field '{self.field}'"
        text = f"{where}: {self.message}"
        return f"{text} — {self.hint}" if self.hint else text


class RuleError(ValueError):
    """A rule file was refused; `.problems` lists every reason in file order."""

    def __init__(self, problems: Iterable[RuleProblem]) -> None:
        self.problems: tuple[RuleProblem, ...] = tuple(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"the failure rules are invalid ({len(self.problems)} problem(s)):\n{lines}")
