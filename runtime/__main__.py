"""Entry point: ``python -m runtime --spec FILE`` runs one task and exits with its exit code."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from runtime import exitcodes
from runtime.running import run_task
from runtime.spec import SpecError, load_spec


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runtime", description="Run one task of a job.")
    parser.add_argument(
        "--spec", required=True, type=Path, help="the task spec JSON written by the orchestrator"
    )
    args = parser.parse_args(argv)
    try:
        spec = load_spec(args.spec)
    except SpecError as exc:
        print(f"[runtime] {exc}", file=sys.stderr)
        return exitcodes.SPEC_INVALID
    return run_task(spec)


if __name__ == "__main__":
    sys.exit(main())
