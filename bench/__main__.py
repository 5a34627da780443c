"""Runs benchmarks by name: ``python -m bench [NAME ...]`` (``make bench ARGS="rest_list"``).

NAME is a script's name without ``_bench.py``; with no name every benchmark runs, one after
the other, each in its own interpreter with its default arguments. Results are read from the
output and recorded by hand in bench/RESULTS.md.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(names: list[str]) -> int:
    available = sorted(path.name.removesuffix("_bench.py") for path in HERE.glob("*_bench.py"))
    unknown = [name for name in names if name not in available]
    if unknown:
        print(f"no benchmark named {unknown[0]!r}; choose from: {', '.join(available)}", file=sys.stderr)
        return 2
    for name in names or available:
        print(f"== {name}", flush=True)
        code = subprocess.call([sys.executable, str(HERE / f"{name}_bench.py")])
        if code:
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
