"""Alert conditions and durations as an operator writes them in the alerter's configuration:
each accepted form read, each mistake refused with the form to write."""

from __future__ import annotations

import pytest

from libs.alerting.durations import parse_duration
from libs.alerting.expressions import (
    Condition,
    ExpressionError,
    Matcher,
    matches_all,
    parse_condition,
    parse_matchers,
)
from services.alerter.core.timing import FakeClock, WallClock


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("2d", 172800.0),
        ("1w", 604800.0),
        ("250ms", 0.25),
        ("1.5h", 5400.0),
        ("  10s  ", 10.0),
        ("0s", 0.0),
        ("1d1h1m1s1ms", 90061.001),
        (30, 30.0),
        (2.5, 2.5),
        (0, 0.0),
    ],
)
def test_a_duration_is_read_in_seconds(text: str | float, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["5", "m", "5 m", "5mm", "1h 30m", "5y", "-5m", "x5m", "5m!"])
def test_a_wrong_duration_names_itself_and_the_forms(text: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_duration(text)
    assert str(caught.value) == f"{text!r} is not a duration; write e.g. 30s, 5m, 1h30m or 2d"


@pytest.mark.parametrize("text", ["", "   "])
def test_an_empty_duration_says_what_to_write(text: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_duration(text)
    assert str(caught.value) == "a duration cannot be empty; write e.g. 30s, 5m or 1h"


@pytest.mark.parametrize("value", [-1, -0.5])
def test_a_negative_number_of_seconds_is_refused(value: float) -> None:
    with pytest.raises(ValueError) as caught:
        parse_duration(value)
    assert str(caught.value) == "a duration cannot be negative"


def test_a_fake_clock_moves_only_when_told() -> None:
    clock = FakeClock()
    assert clock.now() == 1_700_000_000.0
    assert clock.advance(5) == 1_700_000_005.0
    assert clock.now() == 1_700_000_005.0
    assert FakeClock(10.0).now() == 10.0
    assert WallClock().now() > 1_700_000_000.0


# -- conditions -------------------------------------------------------------------------------


def test_a_condition_is_read_whole() -> None:
    assert parse_condition('task_gpu_percent{job_id!="", role=~"work.*"} < 10') == Condition(
        "task_gpu_percent", (Matcher("job_id", "!=", ""), Matcher("role", "=~", "work.*")), "<", 10.0
    )
    assert parse_condition("  node:up  ==  0  ") == Condition("node:up", (), "==", 0.0)
    assert parse_condition("m{} >= -1.5e2") == Condition("m", (), ">=", -150.0)
    assert parse_condition("m<=.5").threshold == 0.5
    assert parse_condition("m != 3.").op == "!="
    assert parse_condition("m > +2").threshold == 2.0


@pytest.mark.parametrize(
    "text", ["", "m", "m < ", "< 10", "m = 10", "m < ten", "1m < 3", 'm{a="x" < 3', "m < 1 2"]
)
def test_a_condition_that_cannot_be_read_shows_the_form(text: str) -> None:
    with pytest.raises(ExpressionError) as caught:
        parse_condition(text)
    assert str(caught.value) == (
        f'cannot read condition {text!r}; write metric{{label="value"}} OP number, '
        'e.g. task_gpu_percent{job_id!=""} < 10'
    )


@pytest.mark.parametrize(
    ("op", "value", "holds"),
    [
        (">", 11, True),
        (">", 10, False),
        ("<", 9, True),
        ("<", 10, False),
        (">=", 10, True),
        (">=", 9.9, False),
        ("<=", 10, True),
        ("<=", 10.1, False),
        ("==", 10, True),
        ("==", 11, False),
        ("!=", 11, True),
        ("!=", 10, False),
    ],
)
def test_each_comparison_holds_as_written(op: str, value: float, holds: bool) -> None:
    assert parse_condition(f"m {op} 10").holds({}, value) is holds


def test_a_condition_holds_only_for_series_its_matchers_take() -> None:
    condition = parse_condition('m{node="n1"} > 1')
    assert condition.holds({"node": "n1"}, 2)
    assert not condition.holds({"node": "n2"}, 2)
    assert not condition.holds({"node": "n1"}, 1)


def test_matchers_read_with_escapes_and_spaces() -> None:
    assert parse_matchers(' a = "x" ,b!="y \\"q\\" \\\\" , c=~"n[0-9]+",d!~"tmp.*" ') == (
        Matcher("a", "=", "x"),
        Matcher("b", "!=", 'y "q" \\'),
        Matcher("c", "=~", "n[0-9]+"),
        Matcher("d", "!~", "tmp.*"),
    )
    assert parse_matchers("") == ()
    assert parse_matchers('a="x",') == (Matcher("a", "=", "x"),)


def test_a_matcher_that_cannot_be_read_is_named() -> None:
    with pytest.raises(ExpressionError) as caught:
        parse_matchers('a="x", b=y')
    assert str(caught.value) == "cannot read label matcher at ' b=y'; write label=\"value\""
    with pytest.raises(ExpressionError) as caught:
        parse_matchers('1a="x"')
    assert str(caught.value) == 'cannot read label matcher at \'1a="x"\'; write label="value"'


def test_matchers_must_be_separated_by_commas() -> None:
    with pytest.raises(ExpressionError) as caught:
        parse_matchers('a="x" b="y"')
    assert str(caught.value) == "expected ',' between label matchers at 'b=\"y\"'"


def test_a_wrong_regular_expression_is_named_with_its_label() -> None:
    with pytest.raises(ExpressionError) as caught:
        parse_matchers('job=~"a(b"')
    assert (
        str(caught.value)
        == "label job: invalid regular expression 'a(b': missing ), unterminated subpattern at position 1"
    )


@pytest.mark.parametrize(
    ("matcher", "labels", "matches"),
    [
        (Matcher("a", "=", "x"), {"a": "x"}, True),
        (Matcher("a", "=", "x"), {"a": "y"}, False),
        (Matcher("a", "=", ""), {}, True),
        (Matcher("a", "!=", ""), {}, False),
        (Matcher("a", "!=", ""), {"a": "v"}, True),
        (Matcher("a", "=~", "n[0-9]"), {"a": "n1"}, True),
        (Matcher("a", "=~", "n[0-9]"), {"a": "n12"}, False),
        (Matcher("a", "=~", "n"), {"a": "xn"}, False),
        (Matcher("a", "!~", "tmp.*"), {"a": "tmp1"}, False),
        (Matcher("a", "!~", "tmp.*"), {"a": "data"}, True),
    ],
)
def test_a_matcher_takes_the_whole_label_value(
    matcher: Matcher, labels: dict[str, str], matches: bool
) -> None:
    assert matcher.matches(labels) is matches


def test_every_matcher_must_take_the_series() -> None:
    both = (Matcher("a", "=", "x"), Matcher("b", "=", "y"))
    assert matches_all(both, {"a": "x", "b": "y"})
    assert not matches_all(both, {"a": "x", "b": "z"})
    assert matches_all((), {})


def test_a_wrong_regular_expression_after_not_matching_is_named_too() -> None:
    with pytest.raises(ExpressionError) as caught:
        parse_matchers('job!~"a("')
    assert str(caught.value).startswith("label job: invalid regular expression 'a(': missing ), unterminated")


def test_an_equality_matcher_takes_its_value_as_text_not_a_pattern() -> None:
    assert Matcher("a", "!=", "x.y").matches({"a": "xzy"})
    assert not Matcher("a", "=", "x.y").matches({"a": "xzy"})
