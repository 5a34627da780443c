"""How deep a JSON text nests, measured before any decoder recurses into it.

Python's json module recurses per level: a body of a few hundred thousand brackets is a
RecursionError (a 500), so every service that reads JSON from callers measures first and answers
400 past ``MAX_DEPTH`` levels (the same limit as YAML's, libs/protocol/yamlsource.py).
"""

from __future__ import annotations

import itertools
import re

from libs.protocol.yamlsource import MAX_DEPTH

__all__ = ["MAX_DEPTH", "json_depth"]

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def json_depth(text: str) -> int:
    """How deep `text` nests (the most brackets open at once), measured without recursing.

    Strings are dropped (their brackets do not nest) and so is everything but brackets, with
    regular expressions; the running count is summed by itertools in C, so a 1 MiB body costs
    milliseconds whatever its shape.
    """
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return 0  # cannot reach the limit; the common case costs two counts
    brackets = _NOT_BRACKETS.sub("", _STRINGS.sub("", text))
    return max(itertools.accumulate(map(_STEP.__getitem__, brackets)), default=0)
