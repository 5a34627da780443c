"""How OpenPAI's JavaScript server turns YAML values into text, re-expressed for Python.

OpenPAI reads job YAML with js-yaml and pastes values into commands with JavaScript's string
conversion, so `1.0` renders as `1`, `true` as `true` and a list as `a,b`. Matching that keeps an
entrypoint byte-for-byte what OpenPAI would run, and keeps mapping keys such as `1:` textual.
"""

from __future__ import annotations

import math
import re

_EXPONENT = re.compile(r"e([+-])0*(\d)")


def js_number(value: float) -> str:
    """Format a number as JavaScript's String(number) does."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    text = repr(value)
    # Python writes 1e-07 where JavaScript writes 1e-7.
    return _EXPONENT.sub(lambda m: f"e{m.group(1)}{m.group(2)}", text)


def js_string(value: object) -> str:
    """Convert any loaded YAML value to text as JavaScript's `'' + value` would."""
    if isinstance(value, str):
        return value
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return js_number(value)
    if isinstance(value, list | tuple):
        # Array.prototype.toString joins elements, with null and undefined as empty text.
        return ",".join("" if item is None else js_string(item) for item in value)
    if isinstance(value, dict):
        return "[object Object]"
    return str(value)


# JavaScript's String.prototype.trim() and the \s class differ from Python's str.strip():
# JavaScript treats U+FEFF as space and does not treat U+001C..U+001F as space.
JS_SPACE = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)


def js_trim(text: str) -> str:
    """Trim text as JavaScript's String.prototype.trim() does."""
    return text.strip(JS_SPACE)
