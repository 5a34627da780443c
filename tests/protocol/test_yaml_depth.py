"""The YAML depth check: a text with no more indicators than the limit is let through unread,
which is sound because every level opens at an indicator of its own."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from libs.protocol.yamlsource import MAX_DEPTH, YamlTooLargeError, check_nesting

values = st.recursive(
    st.one_of(st.none(), st.integers(), st.text(max_size=8)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=40,
)


def depth_of(text: str) -> int:
    """The deepest nesting of collections, read from the parser's events."""
    depth = deepest = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
            depth += 1
            deepest = max(deepest, depth)
        elif isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
            depth -= 1
    return deepest


@settings(max_examples=300, deadline=None)
@given(value=values, flow=st.sampled_from([True, False, None]))
def test_no_text_nests_deeper_than_it_has_indicators(value: Any, flow: bool | None) -> None:
    text = yaml.safe_dump(value, default_flow_style=flow)
    assert depth_of(text) <= sum(text.count(indicator) for indicator in "[{-:?")


@pytest.mark.parametrize(
    ("name", "nest"),
    [
        ("flow", lambda n: "[" * n + "]" * n),
        ("compact sequences", lambda n: "- " * n + "x\n"),
        ("block mappings", lambda n: "".join(f"{'  ' * i}k:\n" for i in range(n)) + "  " * n + "x\n"),
    ],
)
def test_the_limit_is_exact_whether_the_text_is_read_or_not(name: str, nest: Any) -> None:
    check_nesting(nest(MAX_DEPTH))  # at the limit: let through (too few indicators to be read)
    with pytest.raises(YamlTooLargeError, match=f"nested more than {MAX_DEPTH} levels deep"):
        check_nesting(nest(MAX_DEPTH + 1))
    assert depth_of(nest(MAX_DEPTH + 1)) == MAX_DEPTH + 1, name
