"""Warnings about rule files that load but would not behave as their author expects.

Loading refuses what is wrong; these checks point at what is legal but suspicious: a pattern an
earlier rule always wins over (OpenPAI's own spec has one: -1205 behind -1204), a behavior that
contradicts the reaction, a failure without reason or solution for the user, or a pattern that
matches every exit. `pai failure-rules check` prints them; nothing else depends on them.
"""

from __future__ import annotations

from libs.failures.errors import RuleProblem
from libs.failures.models import ContainerPattern, FailureRule, PodContainerPattern, PodPattern, RuleSet
from libs.failures.regexes import matches_anything

_AGREEING = {
    "TRANSIENT": {"ALWAYS_RETRY"},
    "TRANSIENT_CONFLICT": {"ALWAYS_BACKOFF_RETRY", "ALWAYS_RETRY"},
    "PERMANENT": {"NEVER_RETRY"},
    "UNKNOWN": {"RETRY_TO_MAX"},
}


def _covers_text(wide: str | None, narrow: str | None) -> bool:
    return matches_anything(wide) or wide == narrow


def _covers_value(wide: int | bool | None, narrow: int | bool | None) -> bool:
    return wide is None or wide == narrow


def _container_covers(a: ContainerPattern, b: ContainerPattern) -> bool:
    a_ecc = a.gpu_info.nvidia_double_ecc_error if a.gpu_info else None
    b_ecc = b.gpu_info.nvidia_double_ecc_error if b.gpu_info else None
    return (
        _covers_value(a.exit_code, b.exit_code)
        and _covers_value(a_ecc, b_ecc)
        and _covers_text(a.user_log_regex, b.user_log_regex)
        and _covers_text(a.platform_log_regex, b.platform_log_regex)
    )


def _pod_container_covers(a: PodContainerPattern, b: PodContainerPattern) -> bool:
    return (
        _covers_value(a.exit_code, b.exit_code)
        and _covers_text(a.name_regex, b.name_regex)
        and _covers_text(a.reason_regex, b.reason_regex)
        and _covers_text(a.message_regex, b.message_regex)
    )


def _pod_covers(a: PodPattern, b: PodPattern) -> bool:
    if not (_covers_text(a.reason_regex, b.reason_regex) and _covers_text(a.message_regex, b.message_regex)):
        return False
    # Each container condition of the earlier pattern must be implied by one of the later one's.
    return all(any(_pod_container_covers(ac, bc) for bc in b.containers) for ac in a.containers)


def _shadow_problems(rules: RuleSet) -> list[RuleProblem]:
    problems: list[RuleProblem] = []
    for index, rule in enumerate(rules.rules):
        if rule.pattern is None:
            continue
        kinds: tuple[tuple[str, tuple[ContainerPattern | PodPattern, ...]], ...] = (
            ("runtimeContainerPatterns", rule.pattern.runtime_container_patterns),
            ("controllerPodPatterns", rule.pattern.controller_pod_patterns),
        )
        for kind, patterns in kinds:
            for number, pattern in enumerate(patterns):
                winner = _earlier_winner(rules.rules[:index], kind, pattern)
                if winner is not None:
                    problems.append(
                        RuleProblem(
                            index=index,
                            code=rule.code,
                            field=f"pattern.{kind}[{number}]",
                            message=f"never wins: the earlier rule {winner.code} ({winner.phrase}) "
                            "matches everything it matches",
                            hint="move this rule above that one, or make the earlier pattern narrower",
                        )
                    )
    return problems


def _earlier_winner(
    earlier: tuple[FailureRule, ...], kind: str, pattern: ContainerPattern | PodPattern
) -> FailureRule | None:
    for rule in earlier:
        if rule.pattern is None:
            continue
        if isinstance(pattern, ContainerPattern) and kind == "runtimeContainerPatterns":
            if any(_container_covers(p, pattern) for p in rule.pattern.runtime_container_patterns):
                return rule
        elif isinstance(pattern, PodPattern) and any(
            _pod_covers(p, pattern) for p in rule.pattern.controller_pod_patterns
        ):
            return rule
    return None


def _rule_problems(index: int, rule: FailureRule) -> list[RuleProblem]:
    problems: list[RuleProblem] = []

    def warn(field: str, message: str, hint: str) -> None:
        problems.append(RuleProblem(index=index, code=rule.code, field=field, message=message, hint=hint))

    ends_well = rule.type in ("USER_SUCCESS", "USER_STOP")
    if rule.behavior and rule.reaction and rule.reaction not in _AGREEING[rule.behavior] and not ends_well:
        warn(
            "reaction",
            f"{rule.reaction} contradicts behavior {rule.behavior}",
            f"use {' or '.join(sorted(_AGREEING[rule.behavior]))}",
        )
    if not ends_well and not rule.reason:
        warn("reason", "users are not told why the task failed", "add a reason in plain words")
    if not ends_well and not rule.solution:
        warn("solution", "users are not told what to do", "add at least one step they can take")
    if rule.pattern is not None:
        for number, p in enumerate(rule.pattern.runtime_container_patterns):
            if p.exit_code == 0:
                warn(
                    f"pattern.runtimeContainerPatterns[{number}].exitCode",
                    "exit code 0 is always a success; this pattern is never consulted",
                    "remove it",
                )
            elif p == ContainerPattern():
                warn(
                    f"pattern.runtimeContainerPatterns[{number}]",
                    "an empty pattern matches every failed command",
                    "add an exitCode or a regex",
                )
    return problems


def check_rules(rules: RuleSet) -> list[RuleProblem]:
    """Every warning about a loaded rule set, in file order; an empty list means nothing to say."""
    problems = [p for index, rule in enumerate(rules.rules) for p in _rule_problems(index, rule)]
    problems.extend(_shadow_problems(rules))
    problems.sort(key=lambda p: -1 if p.index is None else p.index)
    return problems
