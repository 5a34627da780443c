"""The SQL read model's tables, shared by the migrations and the queries.

Times are epoch milliseconds (BigInteger), as OpenPAI's API reports them, so a row reads out
without conversion and sorts the same on SQLite and PostgreSQL. JSON columns hold what is
shown as-is (exit specs, ports, tags, the masked config). Users and tokens are here from the
start so multi-tenancy (groups, virtual clusters per user) grows by adding columns, not by
reshaping what exists.
"""

from __future__ import annotations

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Computed,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    cast,
    literal_column,
    text,
)

metadata = MetaData()

# Name, user and VC, lower-cased and joined by a separator: a keyword without the separator
# (or LIKE's wildcards) is found in search_text exactly when it is in one of the three.
SEARCH_SEPARATOR = "/"
SEARCH_TEXT = "lower(name) || '/' || lower(username) || '/' || lower(virtual_cluster)"
# After the user in ix_jobs_user_list: the default order, then every other filter and order field.
USER_LIST_COLUMNS = (
    "submission_time",
    "id",
    "state",
    "virtual_cluster",
    "name",
    "retries",
    "total_tasks",
    "total_gpus",
    "completed_time",
    "priority_class",
)

# What the usage report reads of a job, led by its end (NULL while it has not ended) and its
# first start: ix_jobs_usage_completed.
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

jobs = Table(
    "jobs",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("username", String(128), nullable=False),
    Column("name", String(256), nullable=False),
    Column("virtual_cluster", String(128), nullable=False),
    Column("priority", Integer, nullable=False, default=0),
    Column("priority_class", String(64), nullable=True),
    Column("tags", JSON, nullable=False, default=list),
    Column("state", String(16), nullable=False),
    Column("sub_state", String(32), nullable=False),
    Column("execution_type", String(8), nullable=False, default="START"),
    Column("retries", Integer, nullable=False, default=0),
    Column("retries_user", Integer, nullable=False, default=0),
    Column("retries_platform", Integer, nullable=False, default=0),
    Column("retries_resource", Integer, nullable=False, default=0),
    Column("retry_delay_ms", BigInteger, nullable=True),
    Column("submission_time", BigInteger, nullable=False),
    Column("created_time", BigInteger, nullable=True),
    Column("launched_time", BigInteger, nullable=True),
    Column("completed_time", BigInteger, nullable=True),
    Column("attempt", Integer, nullable=True),
    Column("exit_code", Integer, nullable=True),
    Column("exit_spec", JSON, nullable=True),
    Column("exit_diagnostics", Text, nullable=True),
    Column("exit_trigger_message", Text, nullable=True),
    Column("exit_trigger_role", String(128), nullable=True),
    Column("exit_trigger_index", Integer, nullable=True),
    Column("pending_reason", Text, nullable=True),
    Column("total_gpus", Integer, nullable=False, default=0),
    Column("total_tasks", Integer, nullable=False, default=0),
    Column("total_task_roles", Integer, nullable=False, default=0),
    # What the job holds while it runs, for usage reports (services/rest/core/usage.py; 0008):
    # CPU cores and thousandths of a GPU (a GPU share counts its part), over every task; and,
    # once it has ended, how long its attempts ran in all (retry delays not counted).
    Column("total_cpus", BigInteger, nullable=False, server_default=text("0")),
    Column("total_gpu_milli", BigInteger, nullable=False, server_default=text("0")),
    Column("run_ms", BigInteger, nullable=True),
    Column("config", JSON, nullable=True),
    # Raised once by every projection transaction that writes the job's task rows, and stamped
    # on each row it writes (task_attempts.revision; 0005): a detail kept at revision R needs only
    # the rows above R to be current (services/rest/core/detail_cache.py).
    Column("tasks_revision", BigInteger, nullable=False, server_default=text("0")),
    # What the list's keyword searches, lower-cased once when the row is written (the three
    # fields never change). The same SQL on both backends; SQLite computes it on read.
    Column("search_text", Text, Computed(SEARCH_TEXT), nullable=True),
    UniqueConstraint("username", "name", name="uq_jobs_username_name"),
    # The job list (adapters/jobs_store.py) orders by a field, then submission time and id, newest
    # first: each filter and order field leads an index that ends in those two, so a page is read
    # in order from the index and a deep offset skips index entries, not rows (the narrow
    # ix_jobs_submission makes skipping cheap). ix_jobs_search also holds what the keyword reads,
    # so a keyword scan never reads the rows; PostgreSQL adds a trigram index of search_text
    # when pg_trgm is available (migration 0003).
    Index("ix_jobs_submission", "submission_time", "id"),
    Index("ix_jobs_search", "submission_time", "id", "name", "username", "virtual_cluster", "search_text"),
    # A user's own jobs (the portal's usual view, thousands for a busy user) are filtered,
    # counted and ordered by any field from this index alone, without reading their rows.
    Index("ix_jobs_user_list", "username", *USER_LIST_COLUMNS),
    Index("ix_jobs_vc_submission", "virtual_cluster", "submission_time", "id"),
    Index("ix_jobs_state_submission", "state", "submission_time", "id"),
    Index("ix_jobs_name_submission", "name", "submission_time", "id"),
    Index("ix_jobs_retries_submission", "retries", "submission_time", "id"),
    Index("ix_jobs_total_tasks_submission", "total_tasks", "submission_time", "id"),
    Index("ix_jobs_total_gpus_submission", "total_gpus", "submission_time", "id"),
    # The usage report (adapters/usage.py; 0008) reads the jobs that ran, started or ended in a
    # period from this alone, never the rows.
    Index("ix_jobs_usage_completed", *USAGE_COLUMNS),
)

# Nullable order fields: jobs without a value come last ascending and first descending, which
# the list expresses as ``<field> IS NULL`` before the field, so the index leads with it too.
Index(
    "ix_jobs_completed_order",
    jobs.c.completed_time.is_(None),
    jobs.c.completed_time,
    jobs.c.submission_time,
    jobs.c.id,
)
Index(
    "ix_jobs_priority_order",
    jobs.c.priority_class.is_(None),
    jobs.c.priority_class,
    jobs.c.submission_time,
    jobs.c.id,
)
# tagsContain / tagsNotContain read a partial index of the tagged jobs only (most jobs have
# none), tags included: a key column on SQLite, an INCLUDE column on PostgreSQL, whose btree
# cannot order JSON.
Index(
    "ix_jobs_tagged",
    jobs.c.submission_time,
    jobs.c.id,
    jobs.c.tags,
    sqlite_where=cast(jobs.c.tags, Text) != literal_column("'[]'"),
).ddl_if(dialect="sqlite")
Index(
    "ix_jobs_tagged_include",
    jobs.c.submission_time,
    jobs.c.id,
    postgresql_include=["tags"],
    postgresql_where=cast(jobs.c.tags, Text) != literal_column("'[]'"),
).ddl_if(dialect="postgresql")

job_attempts = Table(
    "job_attempts",
    metadata,
    Column("job_id", String(64), ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("state", String(16), nullable=False),
    Column("sub_state", String(32), nullable=False),
    Column("created_time", BigInteger, nullable=True),
    Column("launched_time", BigInteger, nullable=True),
    Column("completed_time", BigInteger, nullable=True),
    Column("exit_code", Integer, nullable=True),
    Column("exit_spec", JSON, nullable=True),
    Column("exit_diagnostics", Text, nullable=True),
    Column("exit_trigger_message", Text, nullable=True),
    Column("exit_trigger_role", String(128), nullable=True),
    Column("exit_trigger_index", Integer, nullable=True),
)

task_attempts = Table(
    "task_attempts",
    metadata,
    Column("job_id", String(64), ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True),
    Column("job_attempt", Integer, primary_key=True),
    Column("role", String(128), primary_key=True),
    Column("task_index", Integer, primary_key=True),
    Column("task_attempt", Integer, primary_key=True),
    Column("state", String(16), nullable=False),
    Column("node", String(256), nullable=True),
    Column("ip", String(256), nullable=True),
    Column("ports", JSON, nullable=False, default=dict),
    Column("gpus", String(256), nullable=True),
    Column("pid", Integer, nullable=True),
    Column("created_time", BigInteger, nullable=True),
    Column("launched_time", BigInteger, nullable=True),
    Column("completed_time", BigInteger, nullable=True),
    Column("exit_code", Integer, nullable=True),
    Column("exit_spec", JSON, nullable=True),
    Column("exit_diagnostics", Text, nullable=True),
    # What the executor told the user about how the task runs (task.started's note; 0004).
    Column("note", Text, nullable=True),
    # The image the task ran, repository@sha256:... (task.started's image_digest; 0006).
    Column("image_digest", String(512), nullable=True),
    # The job's tasks_revision of the transaction that last wrote this row (0005).
    Column("revision", BigInteger, nullable=False, server_default=text("0")),
)

# Event ids already applied: a redelivered or duplicated event is recognised and skipped.
applied_events = Table(
    "applied_events",
    metadata,
    Column("event_id", String(64), primary_key=True),
    Column("job_id", String(64), nullable=True, index=True),
    Column("applied_at", BigInteger, nullable=False),
)

users = Table(
    "users",
    metadata,
    Column("username", String(128), primary_key=True),
    Column("password_hash", String(256), nullable=True),
    Column("admin", Boolean, nullable=False, default=False),
    Column("email", String(256), nullable=True),
    Column("virtual_clusters", JSON, nullable=False, default=list),
    Column("extension", JSON, nullable=False, default=dict),
    Column("created_time", BigInteger, nullable=False),
)

tokens = Table(
    "tokens",
    metadata,
    Column("jti", String(64), primary_key=True),
    Column("username", String(128), ForeignKey("users.username", ondelete="CASCADE"), nullable=False),
    # "user" for a login, "application" for long-lived tokens of scripts (OpenPAI has both).
    Column("kind", String(16), nullable=False, default="user"),
    Column("created_time", BigInteger, nullable=False),
    Column("expires_time", BigInteger, nullable=False),
    Column("revoked", Boolean, nullable=False, default=False),
    # What the owner called an application token (empty for login tokens and older ones).
    Column("name", String(128), nullable=False, default="", server_default=""),
    Index("ix_tokens_username", "username"),
)

# Groups decide what a user may do, as in OpenPAI: ``extension.acls`` holds ``admin``,
# ``virtualClusters`` and ``storageConfigs``; a user's rights are the union over the groups.
groups = Table(
    "groups",
    metadata,
    Column("groupname", String(128), primary_key=True),
    Column("description", Text, nullable=False, default=""),
    Column("external_name", String(256), nullable=False, default=""),
    Column("extension", JSON, nullable=False, default=dict),
    Column("created_time", BigInteger, nullable=False),
)

user_groups = Table(
    "user_groups",
    metadata,
    Column("username", String(128), ForeignKey("users.username", ondelete="CASCADE"), primary_key=True),
    Column("groupname", String(128), ForeignKey("groups.groupname", ondelete="CASCADE"), primary_key=True),
    Index("ix_user_groups_groupname", "groupname"),
)
