"""Simulated GPUs: `pai up --gpus N[:MODEL]` on a machine without NVIDIA GPUs.

The node declares N GPUs of MODEL that do not exist; the scheduler places them like real
ones and each task gets CUDA_VISIBLE_DEVICES/NVIDIA_VISIBLE_DEVICES with its indices, so a
GPU job can be tried end to end. Every service of the platform sees the same declaration in
``PAI_SIMULATED_GPUS`` (the monitor reports the GPUs, REST says in a job's detail that they
were simulated). This module only reads and writes that declaration.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ENV = "PAI_SIMULATED_GPUS"
DEFAULT_MODEL = "simulated"
MAX_GPUS = 1024
_SPEC = re.compile(r"^\s*(\d+)\s*(?::\s*([A-Za-z0-9][A-Za-z0-9._-]{0,63})\s*)?$")


class SimulatedGpusError(ValueError):
    """The declaration is not `N` or `N:MODEL`."""


@dataclass(frozen=True)
class SimulatedGpus:
    count: int
    model: str = DEFAULT_MODEL

    def __str__(self) -> str:
        return f"{self.count}:{self.model}"


def parse(text: str) -> SimulatedGpus:
    """`8` or `8:V100` -> SimulatedGpus; a SimulatedGpusError naming the expected form otherwise."""
    match = _SPEC.match(text)
    if match is None:
        raise SimulatedGpusError(
            f"--gpus {text!r}: expected a count or COUNT:MODEL such as 2 or 8:V100 "
            "(the model: letters, digits, '.', '_' or '-')"
        )
    count = int(match.group(1))
    if not 1 <= count <= MAX_GPUS:
        raise SimulatedGpusError(f"--gpus {text!r}: the count must be between 1 and {MAX_GPUS}")
    return SimulatedGpus(count, match.group(2) or DEFAULT_MODEL)


def from_env(environ: dict[str, str] | None = None, *, value: str | None = None) -> SimulatedGpus | None:
    """The declaration in ``PAI_SIMULATED_GPUS`` (or ``value``), None when there is none."""
    text = value if value is not None else (environ or {}).get(ENV, "")
    return parse(text) if text.strip() else None
