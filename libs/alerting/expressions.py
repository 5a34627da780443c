"""A small PromQL-like condition: one metric, label matchers, a comparison with a number.

`task_gpu_percent{job_id!=""} < 10` reads like the Prometheus rules operators already know,
yet it is simple enough to evaluate in the engine without a query language: every alert
condition the platform ships is a threshold on one series family.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

_EXPR = re.compile(
    r"^\s*(?P<metric>[A-Za-z_:][A-Za-z0-9_:]*)\s*(?:\{(?P<matchers>[^}]*)\})?\s*"
    r"(?P<op>>=|<=|==|!=|>|<)\s*(?P<value>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$"
)
_MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*')
_OPS: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt,
    "<": operator.lt,
    ">=": operator.ge,
    "<=": operator.le,
    "==": operator.eq,
    "!=": operator.ne,
}


class ExpressionError(ValueError):
    """An expression that cannot be parsed; the message shows the accepted form."""


@dataclass(frozen=True)
class Matcher:
    label: str
    op: str
    value: str

    def matches(self, labels: Mapping[str, str]) -> bool:
        actual = labels.get(self.label, "")
        if self.op == "=":
            return actual == self.value
        if self.op == "!=":
            return actual != self.value
        found = re.fullmatch(self.value, actual) is not None
        return found if self.op == "=~" else not found


def parse_matchers(text: str) -> tuple[Matcher, ...]:
    """`a="x", b!~"y.*"` as matchers; raises ExpressionError on anything else."""
    matchers: list[Matcher] = []
    position = 0
    text = text.strip()
    while position < len(text):
        match = _MATCHER.match(text, position)
        if match is None:
            raise ExpressionError(f'cannot read label matcher at {text[position:]!r}; write label="value"')
        label, op, raw = match.groups()
        value = raw.replace('\\"', '"').replace("\\\\", "\\")
        if op in ("=~", "!~"):
            try:
                re.compile(value)
            except re.error as exc:
                raise ExpressionError(f"label {label}: invalid regular expression {value!r}: {exc}") from None
        matchers.append(Matcher(label, op, value))
        position = match.end()
        if position < len(text):
            if text[position] != ",":
                raise ExpressionError(f"expected ',' between label matchers at {text[position:]!r}")
            position += 1
    return tuple(matchers)


def matches_all(matchers: tuple[Matcher, ...], labels: Mapping[str, str]) -> bool:
    return all(m.matches(labels) for m in matchers)


@dataclass(frozen=True)
class Condition:
    metric: str
    matchers: tuple[Matcher, ...]
    op: str
    threshold: float

    def holds(self, labels: Mapping[str, str], value: float) -> bool:
        return matches_all(self.matchers, labels) and _OPS[self.op](value, self.threshold)


def parse_condition(text: str) -> Condition:
    match = _EXPR.match(text)
    if match is None:
        raise ExpressionError(
            f'cannot read condition {text!r}; write metric{{label="value"}} OP number, '
            'e.g. task_gpu_percent{job_id!=""} < 10'
        )
    matchers = parse_matchers(match.group("matchers") or "")
    return Condition(match.group("metric"), matchers, match.group("op"), float(match.group("value")))
