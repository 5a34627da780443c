"""Entry point: ``python -m runtime --spec FILE`` runs one task and exits with its exit code.

The arguments are read by hand: argparse (and shutil, bz2 and lzma, which it imports) would add
about 10 ms to the start of every task.
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path

from runtime import exitcodes
from runtime.running import run_task
from runtime.spec import SpecError, load_spec

USAGE = """usage: python -m runtime [-h] --spec SPEC

Run one task of a job.

options:
  -h, --help   show this help message and exit
  --spec SPEC  the task spec JSON written by the orchestrator
"""


def spec_path(argv: list[str]) -> Path | str:
    """The spec's path from ``--spec FILE`` or ``--spec=FILE``; otherwise what is wrong."""
    if len(argv) == 1 and argv[0].startswith("--spec="):
        value = argv[0].removeprefix("--spec=")
    elif len(argv) == 2 and argv[0] == "--spec":
        value = argv[1]
    elif "--spec" not in argv and not any(a.startswith("--spec=") for a in argv):
        return "the following arguments are required: --spec"
    else:
        return f"unrecognized arguments: {' '.join(argv)}"
    return Path(value) if value else "argument --spec: expected one argument"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if "-h" in args or "--help" in args:
        sys.stdout.write(USAGE)
        return 0
    path = spec_path(args)
    if isinstance(path, str):
        sys.stderr.write(f"{USAGE.splitlines()[0]}\npython -m runtime: error: {path}\n")
        return 2
    try:
        spec = load_spec(path)
    except SpecError as exc:
        print(f"[runtime] {exc}", file=sys.stderr)
        return exitcodes.SPEC_INVALID
    return run_task(spec)


if __name__ == "__main__":
    # What start-up made (modules, classes, functions) lives until the process exits: frozen, it
    # is out of the collector's sight, so neither the collections during the task nor the
    # interpreter's last ones at exit walk it again (about 2.5 ms of every task's CPU). What the
    # task allocates from here on is collected as usual.
    gc.freeze()
    sys.exit(main())
