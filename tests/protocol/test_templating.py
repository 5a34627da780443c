"""Commands' `<% %>` templates render as OpenPAI renders them: names filled in, unknown names kept
for the runtime, every other tag gone, and a broken template refused with the place to fix."""

from __future__ import annotations

import pytest

from libs.protocol.templating import TemplateError, lookup, parse_template, render

VIEW: dict[str, object] = {
    "$script": "train.py",
    "$output": [{"uri": "hdfs://out"}, {"uri": "hdfs://second"}],
    "$gpus": 2.0,
    "$ratio": 0.5,
    "$flag": True,
    "$list": ["a", "b", "c"],
    "$text": "word",
    "$none": None,
    "$map": {"key": "value", "nothing": None},
    ".dotted": "kept whole",
}


@pytest.mark.parametrize(
    ("template", "text"),
    [
        ("python <% $script %>", "python train.py"),
        ("python <%$script%>", "python train.py"),
        ("python <%\u00a0$script\ufeff%>", "python train.py"),
        ("cp x <% $output[0].uri %>", "cp x hdfs://out"),
        ("cp x <% $output[1].uri %>", "cp x hdfs://second"),
        ("cp x <% $output.1.uri %>", "cp x hdfs://second"),
        ("n=<% $gpus %> r=<% $ratio %> f=<% $flag %>", "n=2 r=0.5 f=true"),
        ("<% $list %>", "a,b,c"),
        ("<% $list.length %> <% $text.length %>", "3 4"),
        ("<% $list.0 %><% $list.2 %> <% $text.1 %>", "ac o"),
        ("<% $map %>", "[object Object]"),
        ("<% $map.key %>", "value"),
        ("<% .dotted %>", "kept whole"),
        ("<% . %>", "[object Object]"),
        ("  echo hi  \n", "echo hi"),
        ("a\u3000", "a"),
    ],
)
def test_names_are_filled_in_as_javascript_writes_their_values(template: str, text: str) -> None:
    assert render(template, VIEW) == text


@pytest.mark.parametrize(
    ("template", "text"),
    [
        ("echo <%  $secrets.token  %>", "echo <% $secrets.token %>"),
        ("echo <% $none %>", "echo <% $none %>"),
        ("echo <% $map.nothing %>", "echo <% $map.nothing %>"),
        ("echo <% $none.x %>", "echo <% $none.x %>"),
        ("echo <% $missing.x.y %>", "echo <% $missing.x.y %>"),
        ("echo <% $output[5].uri %>", "echo <% $output.5.uri %>"),
        ("echo <% $list.3 %>", "echo <% $list.3 %>"),
        ("echo <% $list.01 %>", "echo <% $list.01 %>"),
        ("echo <% $list.x %>", "echo <% $list.x %>"),
        ("echo <% $gpus.x %>", "echo <% $gpus.x %>"),
        ("echo <% $text.9 %>", "echo <% $text.9 %>"),
    ],
)
def test_a_name_that_resolves_to_nothing_is_kept_for_the_runtime(template: str, text: str) -> None:
    assert render(template, VIEW) == text


@pytest.mark.parametrize(
    ("template", "text"),
    [
        ("a<%#section%>b<%/section%>c", "ac"),
        ("a<%^inverted%>b<%/inverted%>c", "ac"),
        ("a<%! a comment %>c", "ac"),
        ("a<%> partial %>c", "ac"),
        ("a<%& $script %>c", "ac"),
        ("a<%{ $script }%>c", "ac"),
        ("a<%{$script}%>c", "ac"),
        ("a<%#outer%><%#inner%>b<%/inner%><%/outer%>c", "ac"),
    ],
)
def test_every_other_tag_vanishes(template: str, text: str) -> None:
    assert render(template, VIEW) == text


def test_a_line_holding_only_a_section_tag_vanishes_whole() -> None:
    template = "first\n  <%#s%>  \nsecond\n\t<%/s%>\nthird\n  <%! note %>\nlast"
    assert render(template, VIEW) == "first\nthird\nlast"


def test_a_line_with_a_name_or_text_beside_the_tag_keeps_its_spaces() -> None:
    assert render("first\n  <%#s%> x\n<%/s%>last", VIEW) == "first\n  last"
    assert render("first\n  <% $text %>  <%! c %>\nlast", VIEW) == "first\n  word  \nlast"
    assert render("first\n  <%& $text %>  <%! c %>\nlast", VIEW) == "first\n    \nlast"


def test_a_line_of_spaces_without_a_tag_is_kept_and_a_triple_tag_is_not_standalone() -> None:
    assert render("a\n  \nb", VIEW) == "a\n  \nb"
    assert render("a\n  <%{ $text }%>  \nb", VIEW) == "a\n    \nb"


def test_a_dotted_name_is_read_part_by_part_unless_it_starts_with_the_dot() -> None:
    assert render("<% a.b %>", {"a": {"b": "one"}}) == "one"
    assert render("<% .x.y %>", {".x.y": "whole"}) == "whole"


def test_the_delimiters_may_be_changed_within_a_template() -> None:
    assert render("<%=[[ ]]=%>run [[ $script ]] <% $script %>", VIEW) == "run train.py <% $script %>"
    assert render("<%= [[  ]] =%>[[$script]]", VIEW) == "train.py"
    assert render("<%=[[ ]]=%>[[{ $script }]]x", VIEW) == "x"
    assert render("<%=[[ ]]=%>[[ $missing ]]", VIEW) == "<% $missing %>"


def test_other_tags_can_be_given() -> None:
    assert render("{{ $script }} <% $script %>", VIEW, ("{{", "}}")) == "train.py <% $script %>"
    assert render("{{ $missing }}", VIEW, ("{{", "}}")) == "{{ $missing }}"


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("echo <% $script", "the tag opened at character 5 is never closed with '%>'"),
        ("x <%#s%>", "section 's' opened at character 2 is never closed"),
        ("x <%#s%>y<%#t%>z<%/t%>", "section 's' opened at character 2 is never closed"),
        ("x <%#s%>y<%/t%>", "section 's' opened at character 2 is never closed"),
        ("x <%/s%>", "section 's' is closed at character 2 but never opened"),
        ("<%=[[=%>", "invalid delimiters '[['"),
        ("<%= [[ =%>", "invalid delimiters '[['"),
        ("<%=[[ ]]=%>[[ x", "the tag opened at character 11 is never closed with '%>'"),
        ("<%{ x %>", "the tag opened at character 0 is never closed with '%>'"),
    ],
)
def test_a_broken_template_is_refused_with_the_place(template: str, message: str) -> None:
    with pytest.raises(TemplateError) as caught:
        render(template, VIEW)
    assert str(caught.value) == message


def test_text_is_kept_as_one_piece_between_tags() -> None:
    tokens = parse_template("ab <% x %>\ncd")
    assert [(t.kind, t.value, t.start) for t in tokens] == [
        ("text", "ab ", 0),
        ("name", "x", 3),
        ("text", "\ncd", 10),
    ]


def test_a_section_holds_its_tokens() -> None:
    (section,) = parse_template("<%#s%>a<% x %><%/s%>")
    assert (section.kind, section.value, section.start) == ("#", "s", 0)
    assert section.children is not None
    assert [(t.kind, t.value) for t in section.children] == [("text", "a"), ("name", "x")]


def test_lookup_reads_dotted_names_and_the_view_itself() -> None:
    assert lookup(".", VIEW) is VIEW
    assert lookup("$map.key", VIEW) == "value"
    assert lookup("$list.length", VIEW) == 3
    assert lookup("$text", VIEW) == "word"
