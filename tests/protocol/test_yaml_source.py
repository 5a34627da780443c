"""Job YAML read as OpenPAI's js-yaml reads it, as a submitter meets each refusal: the whole
message with its line and column and the fix; the line of every value; the bounds on depth and
on aliases for every YAML the API reads."""

from __future__ import annotations

import pytest

from libs.protocol import JobProtocolError
from libs.protocol.yamlsource import Source, YamlTooLargeError, load_yaml, safe_load_bounded

TOO_LARGE = (
    "the document is too large or too deeply nested (more than 200000 values after expanding aliases, "
    "or more than 100 levels)",
    "write the job without recursive or heavily repeated YAML aliases",
)
LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(6)
)


def refusal(text: str) -> list[tuple[str, str, str]]:
    with pytest.raises(JobProtocolError) as caught:
        load_yaml(text)
    return [(p.path, p.message, p.hint) for p in caught.value.problems]


@pytest.mark.parametrize(
    ("text", "message", "hint"),
    [
        (
            "a: 1\nb: 2\na: 3\n",
            "duplicated key 'a' at line 3, column 1",
            "each key may appear only once in a mapping; remove or rename one of them",
        ),
        (
            "a: !foo [1]\n",
            "unknown tag '!foo' at line 1, column 4",
            "remove the tag; job YAML uses plain values",
        ),
        (
            "a: !bar {b: 1}\n",
            "unknown tag '!bar' at line 1, column 4",
            "remove the tag; job YAML uses plain values",
        ),
        (
            "a: [1\n",
            "malformed YAML: while parsing a flow sequence did not find expected ',' or ']' "
            "at line 2, column 1",
            "fix the YAML syntax at that line",
        ),
        (
            "a: 1\n---\nb: 2\n",
            "malformed YAML: expected a single document in the stream but found another document at line 2, "
            "column 1",
            "a job is one YAML document: remove the '---' separator and what follows it",
        ),
        (
            "a: !!python/name:os.system x\n",
            "malformed YAML: could not determine a constructor for the tag "
            "'tag:yaml.org,2002:python/name:os.system' at line 1, column 4",
            "fix or remove that value",
        ),
        (
            "a: !!int x\n",
            "malformed YAML value: invalid literal for int() with base 10: 'x'",
            "fix or quote that value",
        ),
        (
            "[" * 101 + "]" * 101,
            "the document is nested more than 100 levels deep (the limit) at line 1, column 101",
            "flatten the YAML: a job needs only a few levels",
        ),
        ("a: &a [*a]\n", *TOO_LARGE),
        (LAUGHS, *TOO_LARGE),
    ],
)
def test_a_refused_text_says_where_and_how_to_fix_it(text: str, message: str, hint: str) -> None:
    assert refusal(text) == [("", message, hint)]


def test_every_duplicated_key_is_told() -> None:
    assert [message for _, message, _ in refusal("a: 1\na: 2\nb: {c: 1, c: 2}\n")] == [
        "duplicated key 'a' at line 2, column 1",
        "duplicated key 'c' at line 3, column 11",
    ]


def test_values_read_as_js_yaml_reads_them() -> None:
    source = load_yaml("a: yes\nb: on\nc: True\nd: 1e3\ne: 1.5e3\nf: FALSE\ng: 0x1F\n? [1, 2]\n: listed\n")
    assert source.data == {
        "a": "yes",
        "b": "on",
        "c": True,
        "d": 1000.0,
        "e": 1500.0,
        "f": False,
        "g": 31,
        "1,2": "listed",
    }


def test_an_empty_text_is_no_document() -> None:
    assert load_yaml("") == Source(data=None, lines={})
    assert load_yaml("# only a comment\n") == Source(data=None, lines={})
    assert safe_load_bounded("") is None


def test_the_line_of_each_value_and_of_the_nearest_ancestor() -> None:
    source = load_yaml("a:\n  b:\n    - 1\n    - x: 2\nc: 3\n")
    assert source.data == {"a": {"b": [1, {"x": 2}]}, "c": 3}
    assert (source.line_of(("a",)), source.line_of(("a", "b")), source.line_of(("a", "b", 1, "x"))) == (
        2,
        3,
        4,
    )
    assert source.line_of(("c",)) == 5
    assert source.line_of(("a", "b", 7, "y")) == 3
    assert source.line_of(("a", "b", 1, "zz")) == 4
    assert source.line_of(("zz",)) == 1
    assert source.line_of(()) == 1
    assert Source(data=None).line_of(("a",)) is None


def test_a_document_a_hundred_levels_deep_is_read() -> None:
    data = load_yaml("[" * 100 + "]" * 100).data
    depth = 0
    while isinstance(data, list) and data:
        data, depth = data[0], depth + 1
    assert depth == 99


def test_other_yaml_the_api_reads_is_bounded_too() -> None:
    assert safe_load_bounded("a: [1, yes]") == {"a": [1, True]}
    with pytest.raises(YamlTooLargeError) as caught:
        safe_load_bounded("[" * 101 + "]" * 101)
    assert (
        str(caught.value)
        == "the document is nested more than 100 levels deep (the limit) at line 1, column 101"
    )
    with pytest.raises(YamlTooLargeError) as caught:
        safe_load_bounded(LAUGHS)
    assert (
        str(caught.value) == "the document holds more than 200000 values after expanding aliases (the limit)"
    )
