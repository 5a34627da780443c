"""The OpenPAI job protocol v2: models, validation, rendering (and, later, event contracts)."""

from libs.protocol.errors import JobProtocolError, Problem
from libs.protocol.jobs import JobConfig, TaskRole
from libs.protocol.rendering import dump_job_yaml, masked_config, render_entrypoint
from libs.protocol.validation import parse_job

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
