"""Where the `pai` commands print: one console setting for every command.

On a terminal, tables fit its width. Piped or redirected, output is read by programs (or in a
wide window later): nothing is wrapped, so a long job name stays on its line whatever
`$COLUMNS` says.
"""

from __future__ import annotations

import sys

from rich.console import Console

# Wide enough for any row; a table still takes only the width its cells need.
UNWRAPPED_WIDTH = 100_000


def console(*, stderr: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    width = None if stream.isatty() else UNWRAPPED_WIDTH
    return Console(stderr=stderr, highlight=False, soft_wrap=True, width=width)
