"""Rule files load, dump and reload unchanged; bad ones are refused with the rule and field named."""

from __future__ import annotations

import pytest

from libs.failures import (
    RuleError,
    RuleSet,
    analyze,
    default_rules,
    default_rules_text,
    dump_rules,
    load_rules,
)
from tests.support.anchors import anchor, needs


def _problems(text: str) -> list[str]:
    with pytest.raises(RuleError) as caught:
        load_rules(text)
    return [str(p) for p in caught.value.problems]


def test_the_shipped_rules_round_trip_through_dump() -> None:
    rules = default_rules()
    assert load_rules(dump_rules(rules)) == rules
    assert load_rules(default_rules_text()).version == rules.version == "1"


def test_a_bare_list_is_a_rule_file_too() -> None:
    rules = load_rules("- code: 5\n  phrase: Five\n")
    assert isinstance(rules, RuleSet)
    assert [r.code for r in rules.rules] == [5]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("- {code: 1, phrase: A, behavior: SOMETIMES}", "rule #0 (code 1), field 'behavior'"),
        ("- {code: 1, phrase: A}\n- {phrase: B}", "rule #1, field 'code'"),
        ("- {code: 9000, phrase: A}", "rule #0 (code 9000), field 'code'"),
        (
            "- {code: 1, phrase: A, pattern: {runtimeContainerPatterns: [{exitcode: 1}]}}",
            "field 'pattern.runtimeContainerPatterns[0].exitcode'",
        ),
        (
            "- {code: 1, phrase: A, pattern: {runtimeContainerPatterns: [{userLogRegex: '(a'}]}}",
            "not a valid regular expression",
        ),
        (
            "- {code: 1, phrase: A}\n- {code: 1, phrase: B}",
            "rule #1 (code 1), field 'code': the code is used twice",
        ),
        ("spec: 3", "no list of rules"),
        ("spec: [\n", "not valid YAML at line"),
    ],
    ids=["enum", "missing", "range", "typo", "bad-regex", "duplicate", "no-list", "yaml"],
)
def test_bad_rule_files_name_the_rule_and_field(text: str, expected: str) -> None:
    assert any(expected in problem for problem in _problems(text))


@pytest.mark.parametrize(
    "regex",
    [
        r"(a+)+$",
        r"(\w+\s?)*x",
        r"(ab|a)*c",
        r"(x)\1",
        r".*a.*b.*c",
        r"aaaa.*aaaa.*b",
        r"Error.*abcd.*efgh.*x",
    ],
    ids=[
        "nested-plus",
        "nested-star",
        "alternation-in-repeat",
        "backreference",
        "open-repeat-chain",
        "self-overlapping-words",
        "chain-of-three",
    ],
)
def test_patterns_that_could_hang_matching_are_refused_at_load(regex: str) -> None:
    text = (
        f"- code: 7\n  phrase: Slow\n  pattern:\n    controllerPodPatterns:\n    - messageRegex: '{regex}'\n"
    )
    problems = _problems(text)
    assert problems
    assert all(
        "rule #0 (code 7), field 'pattern.controllerPodPatterns[0].messageRegex'" in p for p in problems
    )


@pytest.mark.parametrize(
    "regex",
    [
        r"(?msi)tensorflow.*ResourceExhaustedError.*OOM.*",
        r"(?mi).*(not found|no such).*",
        r"(\d{1,3}\.){3}\d+",
    ],
    ids=["literal-anchored-chain", "leading-and-trailing-any", "bounded-repeat-in-repeat"],
)
def test_patterns_anchored_on_words_are_accepted(regex: str) -> None:
    text = (
        f"- code: 7\n  phrase: Fine\n  pattern:\n    runtimeContainerPatterns:\n    - userLogRegex: '{regex}'"
    )
    assert load_rules(text).rules[0].code == 7


def test_every_problem_of_a_file_is_reported_at_once() -> None:
    problems = _problems(
        "- {code: x, phrase: A}\n- {code: 2, phrase: 'two words'}\n- {code: 3, phrase: C, reason: 1}"
    )
    assert len(problems) == 3


RUNTIME_PATTERNS_PARTS = ("openpai", "exit-spec", "runtime-failurePatterns.example.yml")
RUNTIME_PATTERNS = anchor(*RUNTIME_PATTERNS_PARTS)


@needs(*RUNTIME_PATTERNS_PARTS)
def test_the_runtimes_own_pattern_format_loads_as_rules() -> None:
    rules = load_rules(RUNTIME_PATTERNS.read_text(encoding="utf-8"))
    assert [r.code for r in rules.rules] == [10, 12, 15, 16, 137, 143, 221]
    log = "Traceback:\n    exec(compile(getattr(tokenize, 'open', open)(__file__)\nValueError: x\n"
    verdict = analyze(rules, exit_code=1, user_log=log)
    assert (verdict.code, verdict.type) == (10, "unknown")
    assert verdict.matched_line == "    exec(compile(getattr(tokenize, 'open', open)(__file__)"
    ecc = analyze(rules, exit_code=1, gpu_double_ecc_error=True)
    assert ecc.code == 16


def test_problems_in_the_runtime_format_name_its_own_fields() -> None:
    problems = _problems("- containerExitCode: 3\n  patterns:\n  - exitCode: x\n")
    assert problems == [
        "rule #0 (code 3), field 'patterns[0].exitCode': Input should be a valid integer, unable to parse "
        "string as an integer — write a whole number"
    ]


def test_a_misspelt_field_gets_a_suggestion() -> None:
    assert _problems("- {code: 1, phrase: A, behaviour: PERMANENT}") == [
        "rule #0 (code 1), field 'behaviour': Extra inputs are not permitted — did you mean 'behavior'? "
        "Otherwise remove it"
    ]
