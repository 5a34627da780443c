"""Safe regular expressions for failure rules: checked when loaded, matched on bounded text.

Rules are written by operators and matched against logs written by users, so neither side can be
trusted to keep the analysis cheap. Python's backtracking engine is exponential on nested
quantifiers such as `(a+)+` and polynomial on chains of open repeats such as `.*a.*b.*c`, and
cannot be interrupted once started. Rather than a timeout we cannot enforce, the cost is bounded
by construction:

- at load time a pattern is refused when it nests a variable repeat (or an alternation) inside a
  variable repeat, uses back-references, or chains open-ended repeats that could retry each
  other more than `MAX_BACKTRACK_PRODUCT` times on one line (the cost model is in `_walk`).
  A repeat that ends the pattern is free: it is reached only once all else matched. A leading
  `.*` is dropped before matching: a search finds `.*X` exactly where it finds `X`, and the
  leading repeat would otherwise retry the whole line from every starting position;
- at match time a log is cut to its last `DEFAULT_TAIL_KIB` KiB and matched one line at a time,
  each line cut to `MAX_LINE_CHARS` characters. Failure messages are one line; matching per line
  also gives the user the line to read.

The syntax is Python's `re`, which reads the Go (RE2) patterns of OpenPAI's rules unchanged.
"""

from __future__ import annotations

import importlib
import math
import re
from typing import Any

MAX_OPEN_REPEATS = 4
MAX_BACKTRACK_PRODUCT = 50_000
MAX_LINE_CHARS = 1024
MAX_FIELD_CHARS = 1024
DEFAULT_TAIL_KIB = 64

# The stdlib parser is the only exact reading of Python's own syntax; it has no public name and no
# type stubs, so it is reached dynamically and treated as untyped data.
_parser: Any = importlib.import_module("re._parser")
_const: Any = importlib.import_module("re._constants")

_REPEATS = {_const.MAX_REPEAT, _const.MIN_REPEAT, getattr(_const, "POSSESSIVE_REPEAT", None)} - {None}
_BACKREFS = {_const.GROUPREF, _const.GROUPREF_EXISTS, getattr(_const, "GROUPREF_IGNORE", None)} - {None}
_UNBOUNDED = _const.MAXREPEAT


class UnsafePattern(ValueError):
    """A pattern that does not compile or could make matching slow; the text says how to fix it."""


def _children(op: Any, av: Any) -> list[Any]:
    """The sub-patterns directly below one parsed node, whatever its kind."""
    if op in _REPEATS:
        return [av[2]]
    if op == _const.SUBPATTERN:
        return [av[3]]
    if op == _const.BRANCH:
        return list(av[1])
    if op in (_const.ASSERT, _const.ASSERT_NOT):
        return [av[1]]
    if op == getattr(_const, "ATOMIC_GROUP", None):
        return [av]
    return []


def _period(word: list[str]) -> int:
    """The smallest shift that maps a word onto itself: 'abcd' has 4, 'abab' 2, 'aaaa' 1."""
    for shift in range(1, len(word)):
        if all(word[i] == word[i + shift] for i in range(len(word) - shift)):
            return shift
    return len(word)


def _walk(sub: Any, inside_repeat: bool) -> list[int]:
    """Refuse dangerous shapes below `sub`; list for each open-ended repeat where it can start.

    A repeat can restart wherever what precedes it matches: anywhere on a line after a single
    character or class, but only every p characters after a literal word whose smallest period is
    p ('Error' 5, 'abab' 2). Chained repeats multiply these counts; that product bounds the work.
    """
    starts: list[int] = []
    word: list[str] = []
    for op, av in sub:
        if op in _BACKREFS:
            raise UnsafePattern("back-references are not allowed: they make matching exponential")
        variable = op in _REPEATS and av[0] != av[1]
        if inside_repeat and (variable or op == _const.BRANCH):
            raise UnsafePattern(
                "a repeat or alternation is nested inside a repeat, such as (a+)+ or (a|b)*; "
                "this can take exponential time — flatten it, e.g. a+ instead of (a+)+"
            )
        if op in _REPEATS and av[1] == _UNBOUNDED:
            starts.append(MAX_LINE_CHARS // (_period(word) if word else 1))
        word = [*word, chr(av).lower()] if op == _const.LITERAL else []
        for child in _children(op, av):
            starts.extend(_walk(child, inside_repeat or variable))
    return starts


def _ends_with_open_repeat(top: Any) -> bool:
    """Whether the pattern ends with an open repeat (optionally before `$`).

    Such a repeat is reached only once everything before it matched, and then always matches.
    """
    items = [(op, av) for op, av in top if op != _const.AT]
    return bool(items) and items[-1][0] in _REPEATS and items[-1][1][1] == _UNBOUNDED


_LEADING_ANY = re.compile(r"^(?P<flags>\(\?[aiLmsux]+\))?\.\*\??(?![*+?{])")


def search_form(pattern: str) -> str:
    """The pattern without a leading `.*`: it finds a match in exactly the same texts."""
    stripped = _LEADING_ANY.sub(lambda m: m.group("flags") or "", pattern, count=1)
    if stripped == pattern or stripped in ("", "(?ms)", "(?s)", "(?m)"):
        return pattern
    try:
        re.compile(stripped)
    except re.error:
        return pattern
    return stripped


def compile_safe(pattern: str) -> re.Pattern[str]:
    """Compile an operator's pattern for searching, or raise UnsafePattern saying what to change."""
    try:
        re.compile(pattern)
        compiled = re.compile(search_form(pattern))
        top = _parser.parse(compiled.pattern)
    except re.error as exc:
        raise UnsafePattern(f"not a valid regular expression: {exc}") from None
    starts = _walk(top, inside_repeat=False)
    if _ends_with_open_repeat(top):
        starts.pop()
    if len(starts) > MAX_OPEN_REPEATS:
        raise UnsafePattern(
            f"{len(starts)} open-ended repeats (*, +, {{n,}}) before the end; at most {MAX_OPEN_REPEATS} "
            "keep matching fast — match the words that matter, e.g. 'Error.*out of memory'"
        )
    if math.prod(starts) > MAX_BACKTRACK_PRODUCT:
        raise UnsafePattern(
            "its open-ended repeats (*, +, {n,}) could retry each other too often on a long line; "
            "put a literal word before each .* other than the first, e.g. 'Error.*out of memory' "
            "rather than 'r.*y.*x'"
        )
    return compiled


def matches_anything(pattern: str | None) -> bool:
    """Whether a pattern accepts every text, as OpenPAI's `(?ms).*` does; absent counts too."""
    if pattern is None:
        return True
    stripped = re.sub(r"^\(\?[a-zA-Z]+\)", "", pattern)
    return stripped in ("", ".*", "^.*", ".*$", "^.*$", "(.*)", "[\\s\\S]*")


def tail_lines(text: str, tail_kib: int = DEFAULT_TAIL_KIB) -> list[str]:
    """The last `tail_kib` KiB of a log (1024 characters each) as lines, each cut to MAX_LINE_CHARS."""
    limit = tail_kib * 1024
    if len(text) > limit:
        text = text[-limit:]
        # The cut almost always splits a line; a half line could match what the whole would not.
        newline = text.find("\n")
        text = text[newline + 1 :] if newline >= 0 else text
    return [line[:MAX_LINE_CHARS] for line in text.splitlines()]


def last_matching_line(regex: re.Pattern[str], lines: list[str]) -> str | None:
    """The last line the regex finds something in: the one nearest to the failure."""
    for line in reversed(lines):
        if regex.search(line) is not None:
            return line
    return None


def search_field(regex: re.Pattern[str], value: str) -> re.Match[str] | None:
    """Search a short status field (a reason, a message) cut to a bounded length."""
    return regex.search(value[:MAX_FIELD_CHARS])
