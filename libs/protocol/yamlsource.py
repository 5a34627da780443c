"""Line-aware loading of job YAML, reading the text the way OpenPAI's js-yaml reader does.

OpenPAI refuses a job whose text holds more than one YAML document, has a duplicated key or an
unknown tag, and it reads `yes`/`no`/`on`/`off` as text, not booleans. This module loads with
the same rules, remembers the line of every value so problems can point at it, and bounds the
work a hostile document can cause (alias bombs, cycles, very deep nesting).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from libs.protocol.errors import JobProtocolError, Problem
from libs.protocol.jsvalues import js_string

Path = tuple[str | int, ...]

MAX_VALUES = 200_000
MAX_DEPTH = 100

_SafeBase: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_BaseLoader = _SafeBase
_BOOL_TAG = "tag:yaml.org,2002:bool"
_MAP_TAGS = {"tag:yaml.org,2002:map", "tag:yaml.org,2002:set", "tag:yaml.org,2002:omap"}
_SEQ_TAGS = {"tag:yaml.org,2002:seq"}


class _Loader(_BaseLoader):  # type: ignore[valid-type,misc]
    """A safe loader whose booleans are only true/false, as in js-yaml and YAML 1.2."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _BOOL_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(_BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
# js-yaml (and JSON) read `1e18` as a number; YAML 1.1 wants a dot before the exponent.
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


@dataclass
class Source:
    """A loaded document plus the 1-based line where each value starts."""

    data: object
    lines: dict[Path, int] = field(default_factory=dict)

    def line_of(self, path: Path) -> int | None:
        """The line of the value at `path`, or of its nearest ancestor that has one."""
        probe = tuple(path)
        while probe:
            if probe in self.lines:
                return self.lines[probe]
            probe = probe[:-1]
        return self.lines.get((), None)


def _problem(message: str, mark: yaml.Mark | None, hint: str) -> Problem:
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return Problem(path="", message=f"{message}{where}", hint=hint)


class _Builder:
    """Turns a node tree into plain values, recording lines and refusing what js-yaml refuses."""

    def __init__(self, loader: yaml.SafeLoader) -> None:
        self.loader = loader
        self.lines: dict[Path, int] = {}
        self.problems: list[Problem] = []
        self.budget = MAX_VALUES

    def build(self, node: Node, path: Path) -> Any:
        self.budget -= 1
        if self.budget < 0 or len(path) > MAX_DEPTH:
            raise _TooBig
        self.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, ScalarNode):
            return self.loader.construct_object(node, deep=True)
        if isinstance(node, SequenceNode):
            self._check_tag(node, _SEQ_TAGS)
            return [self.build(item, (*path, i)) for i, item in enumerate(node.value)]
        if isinstance(node, MappingNode):
            self._check_tag(node, _MAP_TAGS)
            self.loader.flatten_mapping(node)
            result: dict[str, Any] = {}
            for key_node, value_node in node.value:
                # js-yaml turns every key into text, a mapping key into "[object Object]".
                key = js_string(self.build(key_node, (*path, "[key]")))
                if key in result:
                    self.problems.append(
                        _problem(
                            f"duplicated key {key!r}",
                            key_node.start_mark,
                            "each key may appear only once in a mapping; remove or rename one of them",
                        )
                    )
                    continue
                result[key] = self.build(value_node, (*path, key))
            return result
        raise _TooBig  # pragma: no cover - the composer yields only the three node kinds

    def _check_tag(self, node: Node, allowed: set[str]) -> None:
        if node.tag not in allowed:
            self.problems.append(
                _problem(
                    f"unknown tag {node.tag!r}", node.start_mark, "remove the tag; job YAML uses plain values"
                )
            )


class _TooBig(Exception):
    pass


class YamlTooLargeError(yaml.YAMLError):
    """A YAML text beyond the depth or size limit; the message names the limit and where."""


_OPENERS = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
_INDICATORS = "[{-:?"
_CLOSERS = (yaml.SequenceEndEvent, yaml.MappingEndEvent)


def check_nesting(text: str, loader_class: type[yaml.SafeLoader] = _BaseLoader) -> None:
    """Refuse text nested deeper than MAX_DEPTH, reading its events only.

    The composer (libyaml's through Cython) recurses once per level and crashes the process on
    a few hundred thousand nested brackets, so the depth is measured before anything composes.
    A text with no more indicators than the limit is let through unread: each level opens at an
    indicator of its own (a flow collection's `[` or `{`, a block sequence's `-`, a block
    mapping's `:` or `?`), and a job's YAML has a few dozen (every example of OpenPAI's has at
    most 94), so most submissions skip this second parse.
    """
    if sum(text.count(indicator) for indicator in _INDICATORS) <= MAX_DEPTH:
        return
    loader = loader_class(text)
    try:
        depth = 0
        while loader.check_event():
            event = loader.get_event()  # type: ignore[no-untyped-call]
            if isinstance(event, _OPENERS):
                depth += 1
                if depth > MAX_DEPTH:
                    mark = event.start_mark
                    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
                    raise YamlTooLargeError(
                        f"the document is nested more than {MAX_DEPTH} levels deep (the limit){where}"
                    )
            elif isinstance(event, _CLOSERS):
                depth -= 1
    finally:
        loader.dispose()


def count_values(root: Node) -> int:
    """The values a node tree holds with every alias expanded; YamlTooLargeError past MAX_VALUES.

    Iterative and cheap (no Python objects are built), so an alias bomb is refused before any
    construction starts.
    """
    budget = MAX_VALUES
    stack: list[Node] = [root]
    while stack:
        node = stack.pop()
        budget -= 1
        if budget < 0:
            raise YamlTooLargeError(
                f"the document holds more than {MAX_VALUES} values after expanding aliases (the limit)"
            )
        if isinstance(node, SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, MappingNode):
            for key, value in node.value:
                stack.extend((key, value))
    return MAX_VALUES - budget


def safe_load_bounded(text: str) -> Any:
    """`yaml.safe_load` within MAX_DEPTH levels and MAX_VALUES values, aliases expanded.

    For the YAML documents other than jobs that the API reads (cluster config, failure rules):
    an alias bomb or deep nesting is a YamlTooLargeError (a YAMLError) instead of exhausting
    memory or the stack.
    """
    check_nesting(text, _SafeBase)
    loader = _SafeBase(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        count_values(root)
        return loader.construct_document(root)
    finally:
        loader.dispose()


def load_yaml(text: str) -> Source:
    """Load one YAML document; raise JobProtocolError naming the line of any syntax problem."""
    try:
        check_nesting(text, _Loader)
    except YamlTooLargeError as exc:
        raise JobProtocolError(
            [Problem(path="", message=str(exc), hint="flatten the YAML: a job needs only a few levels")]
        ) from None
    except yaml.YAMLError:
        pass  # a syntax error: reported below, with its line, by the loader that composes
    loader = _Loader(text)
    try:
        try:
            root = loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            reason = " ".join(part for part in (exc.context, exc.problem) if part)
            hint = "fix the YAML syntax at that line"
            if "single document" in reason:
                hint = "a job is one YAML document: remove the '---' separator and what follows it"
            raise JobProtocolError([_problem(f"malformed YAML: {reason}", mark, hint)]) from None
        if root is None:
            return Source(data=None, lines={})
        builder = _Builder(loader)
        try:
            count_values(root)  # an alias bomb is refused before anything is built
            data = builder.build(root, ())
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            reason = " ".join(part for part in (exc.context, exc.problem) if part)
            raise JobProtocolError(
                [_problem(f"malformed YAML: {reason}", mark, "fix or remove that value")]
            ) from None
        except (_TooBig, YamlTooLargeError, RecursionError):
            raise JobProtocolError(
                [
                    Problem(
                        path="",
                        message=f"the document is too large or too deeply nested (more than {MAX_VALUES} "
                        f"values after expanding aliases, or more than {MAX_DEPTH} levels)",
                        hint="write the job without recursive or heavily repeated YAML aliases",
                    )
                ]
            ) from None
        except (ValueError, OverflowError, TypeError) as exc:
            raise JobProtocolError(
                [Problem(path="", message=f"malformed YAML value: {exc}", hint="fix or quote that value")]
            ) from None
        if builder.problems:
            raise JobProtocolError(builder.problems)
        return Source(data=data, lines=builder.lines)
    except yaml.YAMLError as exc:
        raise JobProtocolError(
            [Problem(path="", message=f"malformed YAML: {exc}", hint="fix the YAML syntax")]
        ) from None
    except RecursionError:
        raise JobProtocolError(
            [Problem(path="", message="the document is nested too deeply", hint="flatten the YAML")]
        ) from None
    finally:
        loader.dispose()
