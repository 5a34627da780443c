"""Values pasted into commands read as OpenPAI's JavaScript server writes them."""

from __future__ import annotations

import datetime

import pytest

from libs.protocol.jsvalues import js_number, js_string, js_trim


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (float("nan"), "NaN"),
        (float("inf"), "Infinity"),
        (float("-inf"), "-Infinity"),
        (1.0, "1"),
        (-3.0, "-3"),
        (0.0, "0"),
        (0.5, "0.5"),
        (-2.25, "-2.25"),
        (1e20, "100000000000000000000"),
        (-1e20, "-100000000000000000000"),
        (123456789012.0, "123456789012"),
        (1e21, "1e+21"),
        (-1e21, "-1e+21"),
        (1.5e300, "1.5e+300"),
        (1e-7, "1e-7"),
        (2.5e-8, "2.5e-8"),
        (1e-100, "1e-100"),
    ],
)
def test_a_number_reads_as_javascript_writes_it(value: float, text: str) -> None:
    assert js_number(value) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("as is", "as is"),
        ("", ""),
        (None, "null"),
        (True, "true"),
        (False, "false"),
        (0, "0"),
        (42, "42"),
        (-7, "-7"),
        (1.0, "1"),
        (0.25, "0.25"),
        (["a", "b"], "a,b"),
        ([1, None, "x", [2, 3.0]], "1,,x,2,3"),
        (("t", True), "t,true"),
        ([], ""),
        ({"a": 1}, "[object Object]"),
        ({}, "[object Object]"),
        (datetime.date(2026, 1, 2), "2026-01-02"),
    ],
)
def test_any_yaml_value_reads_as_javascript_joins_it_to_text(value: object, text: str) -> None:
    assert js_string(value) == text


def test_trimming_follows_javascript_not_python() -> None:
    assert js_trim("\ufeff\u00a0 run \u3000\n") == "run"
    assert js_trim("\x1crun\x1f") == "\x1crun\x1f", "U+001C..U+001F are not space to JavaScript"
    assert js_trim("  a b  ") == "a b"
