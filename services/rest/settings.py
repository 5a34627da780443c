"""The REST service's settings: the shared backbone ones plus where it listens and stores.

Loaded once in ``__main__`` from ``PAI_*`` variables and passed down, so tests build them
explicitly. The admin password comes from the caller (``pai up`` passes it); when it is
absent one is generated at first start and written next to the database for the operator.
"""

from __future__ import annotations

import socket
from pathlib import Path

from limits.aio.storage import Storage
from limits.storage import storage_from_string
from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import SettingsConfigDict

from libs.backbone.settings import BackboneSettings
from libs.protocol.limits import DEFAULT_BODY_BYTES, DEFAULT_LIMITS, JobLimits
from libs.web.addresses import socket_path

DEFAULT_PORT = 9186


def _openpai(name: str) -> AliasChoices:
    """Our PAI_ variable first, then OpenPAI's own name for the same setting."""
    return AliasChoices(f"PAI_{name}", name)


def rate_limit_storage(uri: str) -> Storage:
    """The async `limits` storage a URI names; ValueError saying what to write or install."""
    # Redis through redis-py (a dependency of the service), not the library's default client.
    options = {"implementation": "redispy"} if uri.startswith(("async+redis", "async+rediss")) else {}
    try:
        storage = storage_from_string(uri, **options)
    except Exception as err:  # ConfigurationError (a driver is missing) or a malformed URI
        raise ValueError(f"cannot use rate-limit storage {uri!r}: {err}") from None
    if not isinstance(storage, Storage):
        raise ValueError(
            f"rate-limit storage {uri!r} is not asynchronous; use async+memory:// or another async+ URI"
        )
    return storage


class RestSettings(BackboneSettings):
    """Settings of the REST service (environment prefix ``PAI_``)."""

    service_name: str = "rest"
    # This replica's name for the projection's lease (services/rest/adapters/leading.py): a replica
    # restarted under the same name takes it back at once.
    instance: str = socket.gethostname()
    # The events gateway (services/events): when set, /api/v2/events and /api/v2/webhooks are
    # passed to it, so the API's one address serves them (the embedded platform, compose).
    # http(s)://host:port, or unix:///path.sock for a gateway on this machine (libs/web/addresses.py).
    events_url: str | None = None
    # The marketplace (services/marketplace): /marketplace/api/... is passed to it when set.
    marketplace_url: str | None = None
    # The orchestrator's exec socket (`pai job exec`, routes/task_exec.py): unix:///path.sock on
    # this machine (`pai up`); none: exec in tasks is not served here.
    orchestrator_url: str | None = None
    # What runs the tasks, as the orchestrator's settings name it (PAI_EXECUTOR): a job is refused
    # what its executor cannot give it (the local one has no ssh server for the ssh plugin).
    executor: str = "local"
    rest_host: str = "127.0.0.1"
    rest_port: int = DEFAULT_PORT
    # A listening socket inherited from the supervisor, served instead of host and port (`pai up`
    # holds the API's port while rest restarts; libs/web/serving.py).
    rest_fd: int | None = None
    # Also serve the API on this Unix socket, for the services beside it on this machine (the
    # portal, the events gateway, the marketplace): `pai up` gives one in a directory of its own.
    rest_socket: Path | None = None
    # None means an embedded SQLite file in the data dir.
    database_url: str | None = None
    # The bus's JetStream store, where it is on this machine (`pai up`: <data dir>/nats): a write
    # the bus did not confirm while that filesystem is full is answered 507, naming the bus. A
    # stream whose write met a full disk does not answer at all, so this is the only sign.
    nats_store_dir: Path | None = None
    admin_user: str = "admin"
    admin_password: str | None = None
    # Login tokens last a week unless the login request asks for less.
    token_ttl_seconds: int = 7 * 24 * 3600
    # How long a log request waits for the orchestrator before answering 503.
    logs_timeout_seconds: float = 5.0
    # How long a successful token check is remembered; writes to accounts on this instance forget
    # it at once, other instances within this time. 0 checks the database on every request.
    auth_cache_seconds: float = 1.0
    # Where the JWT signing secret is kept; None means <data dir>/rest-jwt.secret.
    jwt_secret_file: Path | None = None
    # The key job secrets are sealed with in KV PAI_SECRETS (libs/backbone/sealing.py): the key
    # itself, else its file; None means <data dir>/secrets.key, created at first start.
    secrets_key: SecretStr | None = None
    secrets_key_file: Path | None = None
    # OpenID Connect sign-in (OpenPAI's AAD mode); unset issuer means basic login only.
    # The issuer's discovery document is <issuer>/.well-known/openid-configuration unless given.
    oidc_issuer: str | None = None
    oidc_discovery_url: str | None = None
    oidc_client_id: str | None = None
    oidc_client_secret: str | None = None
    # The callback registered at the issuer; None derives it from the request's own address.
    oidc_redirect_uri: str | None = None
    # Where the browser lands after sign-in (with user, token, admin in the query) and sign-out.
    oidc_portal_url: str = "/"
    oidc_scopes: str = "openid profile email"
    # The id_token claim naming the user; an e-mail-like value keeps its part before "@".
    oidc_username_claim: str = "preferred_username"
    # Signatures accepted on id_tokens: asymmetric ones against the issuer's JWKS, HS256 with
    # the client secret (OpenID Connect Core 10.1).
    oidc_algorithms: tuple[str, ...] = ("RS256", "ES256", "HS256")
    # YAML list of storages (name, share, volumeName, default, type, data, ...) that groups'
    # acls.storageConfigs grant; None means <data dir>/storages.yaml (no storage while absent).
    storages_file: Path | None = None

    # Rate limits, OpenPAI's figures by default; each counts in a fixed window of the given
    # seconds, and 0 turns it off. OpenPAI's own variable names are read too. The counts live
    # in this process unless the storage URI names a shared one (an async+ scheme of `limits`).
    # `N` or `N:MODEL` when the node's GPUs are declared, not real (`pai up --gpus`).
    simulated_gpus: str = ""
    # `enforced: WHY` or `advisory: WHY`: whether GPU shares hold on the device
    # (libs/protocol/gpu_enforcement.py; `pai up` states it).
    gpu_share_enforcement: str = ""

    model_config = SettingsConfigDict(populate_by_name=True)
    rate_limit_api_per_min: int = Field(
        default=600, ge=0, validation_alias=_openpai("RATE_LIMIT_API_PER_MIN")
    )
    rate_limit_api_window_seconds: int = Field(default=60, ge=1)
    rate_limit_list_job_per_min: int = Field(
        default=60, ge=0, validation_alias=_openpai("RATE_LIMIT_LIST_JOB_PER_MIN")
    )
    rate_limit_list_job_window_seconds: int = Field(default=60, ge=1)
    rate_limit_submit_job_per_hour: int = Field(
        default=60, ge=0, validation_alias=_openpai("RATE_LIMIT_SUBMIT_JOB_PER_HOUR")
    )
    rate_limit_submit_job_window_seconds: int = Field(default=3600, ge=1)
    rate_limit_storage_uri: str = "async+memory://"
    # Proxies in front of the service whose X-Forwarded-For hop is believed (1 behind an ingress).
    rate_limit_trusted_proxies: int = Field(default=0, ge=0)

    # Who reads a job's detail, attempts, events, config and logs: false (the default on a new
    # cluster) means its owner and admins only; true is OpenPAI's behaviour (detail, attempts and
    # events for anyone, config and logs for any signed-in user). The job list is for any
    # signed-in user either way, as in OpenPAI.
    job_detail_public: bool = False
    # Job limits (libs/protocol/limits.py says why each default): PAI_LIMIT_TASKS_PER_JOB, ...
    limit_tasks_per_job: int = Field(default=DEFAULT_LIMITS.tasks_per_job, ge=1)
    limit_instances_per_task_role: int = Field(default=DEFAULT_LIMITS.instances_per_task_role, ge=1)
    limit_task_roles_per_job: int = Field(default=DEFAULT_LIMITS.task_roles_per_job, ge=1)
    limit_cpu_per_task: int = Field(default=DEFAULT_LIMITS.cpu_per_task, ge=1)
    limit_memory_mb_per_task: int = Field(default=DEFAULT_LIMITS.memory_mb_per_task, ge=1)
    limit_gpu_per_task: int = Field(default=DEFAULT_LIMITS.gpu_per_task, ge=0)
    limit_shm_mb_per_task: int = Field(default=DEFAULT_LIMITS.shm_mb_per_task, ge=1)
    limit_ports_per_task: int = Field(default=DEFAULT_LIMITS.ports_per_task, ge=0)
    limit_retry_count: int = Field(default=DEFAULT_LIMITS.retry_count, ge=0)
    limit_tags_per_job: int = Field(default=DEFAULT_LIMITS.tags_per_job, ge=0)
    limit_tag_length: int = Field(default=DEFAULT_LIMITS.tag_length, ge=1)
    limit_name_length: int = Field(default=DEFAULT_LIMITS.name_length, ge=1)
    limit_text_length: int = Field(default=DEFAULT_LIMITS.text_length, ge=1)
    # Request bodies: larger is 413 before anything reads it (OpenPAI's job YAMLs are a few KB).
    limit_body_bytes: int = Field(default=DEFAULT_BODY_BYTES, ge=1024)

    @field_validator("events_url", "marketplace_url", "orchestrator_url")
    @classmethod
    def _usable_url(cls, url: str | None) -> str | None:
        if url:
            socket_path(url)  # refused at start, saying which forms there are
        return url

    @field_validator("rate_limit_storage_uri")
    @classmethod
    def _usable_storage(cls, uri: str) -> str:
        rate_limit_storage(uri)  # refused at start, with what to install, rather than at a request
        return uri

    def job_limits(self) -> JobLimits:
        """The limits every submitted job is checked against."""
        return JobLimits(**{name: getattr(self, f"limit_{name}") for name in JobLimits.model_fields})

    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite+aiosqlite:///{self.data_dir.resolve() / 'rest.db'}"

    def resolved_storages_file(self) -> Path:
        return self.storages_file or self.data_dir / "storages.yaml"

    def resolved_jwt_secret_file(self) -> Path:
        return self.jwt_secret_file or self.data_dir / "rest-jwt.secret"
