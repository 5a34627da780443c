"""What a job holds while it runs, for usage reports: CPU cores and thousandths of a GPU.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-28 19:00:00

GET /api/v2/usage sums resources times running time in SQL, so each job row carries its
totals over every task (a GPU share counts its part of one GPU) and, once ended, the running
time of all its attempts. Rows written before this migration get them from their stored config
and attempts. One index lets the report read only what its period touches, never the rows:
jobs by when they ended (NULL while running), then when they first ran, holding the user, the
VC and all the report sums.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

from libs.protocol.jobs import stored_job_or_none

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_BATCH = 2000
# What ix_jobs_usage_completed holds (services/rest/adapters/tables.py's USAGE_COLUMNS then).
USAGE_COLUMNS = (
    "completed_time",
    "launched_time",
    "username",
    "virtual_cluster",
    "state",
    "total_gpu_milli",
    "total_cpus",
    "run_ms",
    "submission_time",
    "id",
)


def _totals(config: Any) -> tuple[int, int]:
    """(CPU cores, thousandths of a GPU) of a stored config, as services/rest/core/totals.py
    computed them when this revision was written; a row whose config is no job holds none."""
    job = stored_job_or_none(config)
    if job is None:
        return 0, 0
    shares = job.gpu_shares
    cpus = gpu_milli = 0
    for role, spec in job.task_roles.items():
        resources = spec.resource_per_instance
        cpus += spec.instances * resources.cpu
        share = shares.get(role)
        gpu_milli += spec.instances * (share.gpu_milli if share is not None else resources.gpu * 1000)
    return min(cpus, 2**63 - 1), min(gpu_milli, 2**63 - 1)


def upgrade() -> None:
    op.add_column("jobs", sa.Column("total_cpus", sa.BigInteger(), nullable=False, server_default="0"))
    op.add_column("jobs", sa.Column("total_gpu_milli", sa.BigInteger(), nullable=False, server_default="0"))
    jobs = sa.table(
        "jobs",
        sa.column("id", sa.String()),
        sa.column("config", sa.JSON()),
        sa.column("total_cpus", sa.BigInteger()),
        sa.column("total_gpu_milli", sa.BigInteger()),
    )
    bind = op.get_bind()
    update = (
        sa.update(jobs)
        .where(jobs.c.id == sa.bindparam("k_id"))
        .values(total_cpus=sa.bindparam("v_cpus"), total_gpu_milli=sa.bindparam("v_gpu_milli"))
    )
    after = ""
    while True:
        rows = bind.execute(
            sa.select(jobs.c.id, jobs.c.config).where(jobs.c.id > after).order_by(jobs.c.id).limit(_BATCH)
        ).all()
        if not rows:
            break
        changes = []
        for job_id, config in rows:
            cpus, gpu_milli = _totals(config)
            if cpus or gpu_milli:
                changes.append({"k_id": job_id, "v_cpus": cpus, "v_gpu_milli": gpu_milli})
        if changes:
            bind.execute(update, changes)
        after = rows[-1][0]
    # An ended job's running time over its attempts, as the projection records it from now on.
    op.add_column("jobs", sa.Column("run_ms", sa.BigInteger(), nullable=True))
    op.execute(
        "UPDATE jobs SET run_ms = (SELECT coalesce(sum(a.completed_time - a.launched_time), 0) "
        "FROM job_attempts a WHERE a.job_id = jobs.id AND a.launched_time IS NOT NULL "
        "AND a.completed_time IS NOT NULL) WHERE completed_time IS NOT NULL"
    )
    op.create_index("ix_jobs_usage_completed", "jobs", list(USAGE_COLUMNS))


def downgrade() -> None:
    op.drop_index("ix_jobs_usage_completed", "jobs")
    for column in ("run_ms", "total_gpu_milli", "total_cpus"):
        op.drop_column("jobs", column)
