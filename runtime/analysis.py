"""Where a finished task's exit is explained, inside the task.

The runtime matches the container-level failure rules when the user command ends, while the
user's log is at hand; the verdict travels in runtime-result.json to the orchestrator, which
puts it on task.completed. The rules are the operator's current set, handed over as a file in
the task spec (so a rule changed at run time applies to the next failure), or the packaged
defaults. A rule file that cannot be read never hides the exit: the defaults are used.
"""

from __future__ import annotations

from pathlib import Path

TYPE_CHECKING = False  # not `typing`'s: importing it costs every task's start-up
if TYPE_CHECKING:
    from typing import Any

    from libs.failures import RuleSet


def _rules(rules_file: Path | None) -> RuleSet:
    # Imported here, not at start: every task pays for start-up, only failed ones need the rules.
    from libs.failures import RuleError, default_rules, load_rules

    if rules_file is None:
        return default_rules()
    try:
        return load_rules(rules_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, RuleError):
        return default_rules()


def analyze_exit(
    exit_code: int, user_log_tail: str, rules_file: Path | None = None, *, runtime_reason: str | None = None
) -> dict[str, Any] | None:
    """The matched failure rule for a non-zero exit, as JSON-ready data; None for success.

    ``runtime_reason``: the runtime itself ended the task (its own exit code, 245-255): that code's
    rule explains it, as the platform's own failures are explained, not the user's log."""
    if exit_code == 0:
        return None
    from libs.failures import analyze

    if runtime_reason is not None:
        verdict = analyze(
            _rules(rules_file), exit_code=exit_code, platform_log=runtime_reason, stage="platform"
        )
        return verdict.model_dump(mode="json")
    verdict = analyze(_rules(rules_file), exit_code=exit_code, user_log=user_log_tail, stage="container")
    return verdict.model_dump(mode="json")
