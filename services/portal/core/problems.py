"""Where in the YAML a validation problem is, for the editor's gutter."""

from __future__ import annotations

import re

_LINE = re.compile(r"\(line (\d+)\)")


def line_of(message: str) -> int | None:
    """The YAML line the validator named in a problem's message, if any."""
    found = _LINE.search(message)
    return int(found.group(1)) if found else None
