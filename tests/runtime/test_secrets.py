"""Secret references, the secrets file and masking."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime.secrets import MASK, Masker, SecretsError, load_secrets, render_in, render_secrets
from runtime.spec import SpecError, load_spec
from tests.runtime.helpers import role, spec_for, write_spec


def test_references_are_replaced_with_or_without_spaces() -> None:
    text = "a <% $secrets.k1 %> b <%$secrets.k-2%>"
    assert render_secrets(text, {"k1": "X", "k-2": "Y"}) == "a X b Y"


def test_an_unknown_reference_names_the_secret() -> None:
    with pytest.raises(SecretsError, match="'gone'"):
        render_secrets("<% $secrets.gone %>", {})


def test_nested_plugin_parameters_are_rendered() -> None:
    params = {"userssh": {"value": "<% $secrets.key %>"}, "n": 1, "cmds": ["x <% $secrets.key %>"]}
    assert render_in(params, {"key": "K"}) == {"userssh": {"value": "K"}, "n": 1, "cmds": ["x K"]}


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        pytest.param('{"a": "1", "b": 2}', {"a": "1", "b": "2"}, id="json"),
        pytest.param("a: x\nb: [1, 2]\n", {"a": "x", "b": "[1, 2]"}, id="yaml"),
        pytest.param("", {}, id="empty"),
    ],
)
def test_the_secrets_file_may_be_json_or_yaml(tmp_path: Path, content: str, expected: dict[str, str]) -> None:
    path = tmp_path / "s"
    path.write_text(content)
    assert load_secrets(path) == expected


def test_a_malformed_secrets_file_is_refused_without_quoting_it(tmp_path: Path) -> None:
    path = tmp_path / "s"
    path.write_text("- just-a-list-with-topsecret")
    with pytest.raises(SecretsError) as info:
        load_secrets(path)
    assert "topsecret" not in str(info.value)


def test_masking_hides_whole_values_and_each_line_of_multiline_values() -> None:
    masker = Masker(["abc", "abcdef", "line-one\nline-two", ""])
    assert masker.text("x abcdef y abc") == f"x {MASK} y {MASK}"
    assert masker.data(b"line-two\n") == MASK.encode() + b"\n"
    assert Masker([]).text("unchanged") == "unchanged"


def test_spec_errors_name_the_field(tmp_path: Path) -> None:
    raw = spec_for(tmp_path, "worker", 0, [role("worker")], "true")
    raw["barrier_timeout_s"] = -1
    with pytest.raises(SpecError, match="barrier_timeout_s"):
        load_spec(write_spec(tmp_path, raw))
    with pytest.raises(SpecError, match="cannot read"):
        load_spec(tmp_path / "absent.json")
