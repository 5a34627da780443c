"""The OpenPAI job protocol v2: models, validation, rendering, and the event contracts.

The names below are loaded on first use, so that importing one light module of the package
(`libs.protocol.job_details` from the CLI, `libs.protocol.subjects`) does not import pydantic,
YAML and the validator with it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from libs.protocol.errors import JobProtocolError, Problem
    from libs.protocol.jobs import JobConfig, TaskRole
    from libs.protocol.rendering import dump_job_yaml, masked_config, render_entrypoint
    from libs.protocol.validation import parse_job

_HOMES = {
    "JobProtocolError": "errors",
    "Problem": "errors",
    "JobConfig": "jobs",
    "TaskRole": "jobs",
    "dump_job_yaml": "rendering",
    "masked_config": "rendering",
    "render_entrypoint": "rendering",
    "parse_job": "validation",
}

__all__ = [
    "JobConfig",
    "JobProtocolError",
    "Problem",
    "TaskRole",
    "dump_job_yaml",
    "masked_config",
    "parse_job",
    "render_entrypoint",
]


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"libs.protocol.{home}"), name)
    globals()[name] = value
    return value
