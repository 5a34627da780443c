"""The `<% %>` template language of job commands, with OpenPAI's exact rendering rules.

OpenPAI parses commands with mustache (tags `<%` and `%>`) and keeps only two token kinds: text,
and plain names, which it looks up after turning `[n]` into `.n`. Sections, comments, partials
and unescaped tags vanish from the output; a name that resolves to nothing is written back as
`<% name %>` so a later stage (the runtime, for `$secrets`) can fill it. Broken templates
(an unclosed tag or section) are refused rather than guessed at.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from libs.protocol.jsvalues import JS_SPACE, js_string, js_trim

DEFAULT_TAGS = ("<%", "%>")
_WS = f"[{re.escape(JS_SPACE)}]*"
_TAG_TYPES = "#^/>{&=!"
_INDEX = re.compile(r"\[(\d+)\]")


class TemplateError(ValueError):
    """A command template that mustache itself would refuse to parse."""


@dataclass
class Token:
    """One parsed piece of a template: literal text, a name to look up, or another tag kind."""

    kind: str
    value: str
    start: int
    children: list[Token] | None = None


class _Scanner:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def eos(self) -> bool:
        return self.pos >= len(self.text)

    def scan(self, pattern: re.Pattern[str]) -> str:
        match = pattern.match(self.text, self.pos)
        if match is None:
            return ""
        self.pos = match.end()
        return match.group(0)

    def matches(self, pattern: re.Pattern[str]) -> bool:
        return pattern.match(self.text, self.pos) is not None

    def scan_until(self, pattern: re.Pattern[str]) -> str:
        match = pattern.search(self.text, self.pos)
        end = len(self.text) if match is None else match.start()
        found = self.text[self.pos : end]
        self.pos = end
        return found


def _tag_patterns(tags: Sequence[str]) -> tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    opening, closing = tags
    return (
        re.compile(re.escape(opening) + _WS),
        re.compile(_WS + re.escape(closing)),
        re.compile(_WS + re.escape("}" + closing)),
    )


def parse_template(template: str, tags: Sequence[str] = DEFAULT_TAGS) -> list[Token]:
    """Parse like mustache.js: standalone non-name tags swallow their line's whitespace."""
    opening_re, closing_re, closing_curly_re = _tag_patterns(tags)
    white_re = re.compile(_WS)
    equals_re = re.compile(_WS + "=")
    curly_re = re.compile(_WS + r"\}")
    tag_type_re = re.compile(f"[{re.escape(_TAG_TYPES)}]")
    scanner = _Scanner(template)
    tokens: list[Token | None] = []
    sections: list[Token] = []
    spaces: list[int] = []
    has_tag = False
    non_space = False

    def strip_space() -> None:
        nonlocal has_tag, non_space
        if has_tag and not non_space:
            for index in spaces:
                tokens[index] = None
        spaces.clear()
        has_tag = False
        non_space = False

    while not scanner.eos():
        start = scanner.pos
        for char in scanner.scan_until(opening_re):
            if char in JS_SPACE:
                spaces.append(len(tokens))
            else:
                non_space = True
            tokens.append(Token("text", char, start))
            start += 1
            if char == "\n":
                strip_space()
        if not scanner.scan(opening_re):
            break
        has_tag = True
        kind = scanner.scan(tag_type_re) or "name"
        scanner.scan(white_re)
        if kind == "=":
            value = scanner.scan_until(equals_re)
            scanner.scan(equals_re)
            scanner.scan_until(closing_re)
        elif kind == "{":
            value = scanner.scan_until(closing_curly_re)
            scanner.scan(curly_re)
            scanner.scan_until(closing_re)
            kind = "&"
        else:
            value = scanner.scan_until(closing_re)
        if not scanner.scan(closing_re):
            raise TemplateError(f"the tag opened at character {start} is never closed with {tags[1]!r}")
        token = Token(kind, value, start)
        tokens.append(token)
        if kind in ("#", "^"):
            sections.append(token)
        elif kind == "/":
            if not sections:
                raise TemplateError(f"section {value!r} is closed at character {start} but never opened")
            opened = sections.pop()
            if opened.value != value:
                raise TemplateError(
                    f"section {opened.value!r} opened at character {opened.start} is never closed"
                )
        elif kind in ("name", "&"):
            non_space = True
        elif kind == "=":
            new_tags = re.split(f"[{re.escape(JS_SPACE)}]+", value, maxsplit=1)
            if len(new_tags) != 2 or not all(new_tags):
                raise TemplateError(f"invalid delimiters {value!r}")
            opening_re, closing_re, closing_curly_re = _tag_patterns(new_tags)
    strip_space()
    if sections:
        opened = sections.pop()
        raise TemplateError(f"section {opened.value!r} opened at character {opened.start} is never closed")
    return _nest([token for token in tokens if token is not None])


def _nest(tokens: list[Token]) -> list[Token]:
    nested: list[Token] = []
    collector = nested
    stack: list[tuple[Token, list[Token]]] = []
    for token in tokens:
        if token.kind in ("#", "^"):
            token.children = []
            collector.append(token)
            stack.append((token, collector))
            collector = token.children
        elif token.kind == "/":
            _, collector = stack.pop()
        elif token.kind == "text" and collector and collector[-1].kind == "text":
            collector[-1].value += token.value
        else:
            collector.append(Token(token.kind, token.value, token.start))
    return nested


_MISSING = object()


def _get(container: object, key: str) -> object:
    """Read one property as JavaScript would for plain data: own keys, indexes, `length`."""
    if isinstance(container, Mapping):
        return container.get(key, _MISSING)
    if isinstance(container, list | str):
        if key == "length":
            return len(container)
        if key.isdigit() and (key == "0" or not key.startswith("0")) and int(key) < len(container):
            return container[int(key)]
    return _MISSING


def lookup(name: str, view: Mapping[str, object]) -> object:
    """Resolve a dotted name against the view as mustache's Context.lookup does."""
    if name == ".":
        return view
    if name.find(".") > 0:
        value: object = view
        for part in name.split("."):
            if value is None or value is _MISSING:
                return _MISSING
            value = _get(value, part)
        return value
    return _get(view, name)


def render(template: str, view: Mapping[str, object], tags: Sequence[str] = DEFAULT_TAGS) -> str:
    """Render like OpenPAI: text and names only; unknown names are kept as `<% name %>`."""
    out: list[str] = []
    for token in parse_template(template, tags):
        if token.kind == "text":
            out.append(token.value)
        elif token.kind == "name":
            name = _INDEX.sub(r".\1", token.value)
            value = lookup(name, view)
            if value is _MISSING or value is None:
                out.append(f"{tags[0]} {name} {tags[1]}")
            else:
                out.append(js_string(value))
    return js_trim("".join(out))
