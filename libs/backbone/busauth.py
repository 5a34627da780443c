"""Who may use the bus, and for what: per-service NATS users and their permissions.

The bus is private to the platform. Every service connects as its own NATS user with a
password, and each user may publish and subscribe only to what that service uses: the event
subjects it announces, the request/reply subjects it serves or asks, its heartbeat, JetStream's
API and KV subjects, and its own inbox replies. The job secrets bucket (``PAI_SECRETS``) is
reachable only by the two services that handle secrets (rest writes them, the orchestrator
hands them to tasks). An ``admin`` user has every right, for operators' tools on the bus itself
(the ``nats`` CLI, the chaos bench); ``pai`` goes through REST. A client without a user and
password is refused by the server.

Every service provisions the platform's streams and buckets at start (``ensure_topology``), so
each may create and read stream metadata; what keeps a service from a bucket it has no business
with is the deny list on that bucket's KV and JetStream API subjects.

The embedded platform generates the passwords at its first start (``credentials_file``, 0600
in the data dir) and reuses them after; ``pai deploy`` generates the same for Kubernetes.
A service name the table does not know (a new service) gets every right except the secrets.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from libs.protocol.subjects import ROOT

SECRETS_BUCKET = "PAI_SECRETS"
# Services that never connect to the bus get no user at all (the portal is a client of the
# public API only).
OFF_THE_BUS = frozenset({"portal"})
ADMIN_USER = "admin"
CREDENTIALS_FILE = "nats-credentials.json"


@dataclass(frozen=True)
class Grant:
    """What one service does on the bus beyond what every service does."""

    publish: tuple[str, ...] = ()
    subscribe: tuple[str, ...] = ()
    secrets: bool = False


# What each service really uses (see docs/architecture.md, "Services and what each owns").
GRANTS: Mapping[str, Grant] = {
    "rest": Grant(publish=(f"{ROOT}.job.>", f"{ROOT}.rpc.>"), secrets=True),
    "scheduler": Grant(publish=(f"{ROOT}.job.>",), subscribe=(f"{ROOT}.rpc.scheduler.>",)),
    "orchestrator": Grant(
        # node.* from the Kubernetes executor's node inventory
        publish=(f"{ROOT}.job.>", f"{ROOT}.node.>"),
        subscribe=(f"{ROOT}.rpc.orchestrator.>",),
        secrets=True,
    ),
    # every node's samples make the metrics history it serves on its rpc subject
    "monitor": Grant(
        publish=(f"{ROOT}.node.>", f"{ROOT}.metrics.*"),
        subscribe=(f"{ROOT}.health.*", f"{ROOT}.metrics.*", f"{ROOT}.rpc.monitor.>"),
    ),
    "alerter": Grant(
        # alerts, and its actions: job.stop_requested, job.tagged, node.cordoned
        publish=(f"{ROOT}.alert.>", f"{ROOT}.job.>", f"{ROOT}.node.>"),
        subscribe=(f"{ROOT}.health.*", f"{ROOT}.metrics.*", f"{ROOT}.rpc.alerter.>"),
    ),
    # the events gateway reads the streams through its consumers (inbox deliveries) and keeps its
    # own buckets; it announces a failing webhook subscription as an alert
    "events": Grant(publish=(f"{ROOT}.alert.>",)),
    # the marketplace reads job.submitted through its durable consumer (inbox deliveries) and
    # announces its items' changes on its own subjects; nothing else
    "marketplace": Grant(publish=(f"{ROOT}.marketplace.>",)),
}

# Every service: JetStream's API (provisioning, consumers, direct gets), acks and flow control
# of its consumers, KV operations, and replies through its inbox.
_COMMON_PUBLISH = ("$JS.API.>", "$JS.ACK.>", "$JS.FC.>", "$KV.>", "_INBOX.>")
_COMMON_SUBSCRIBE = ("_INBOX.>",)

# The secrets bucket's KV subjects and every JetStream API call naming its stream
# ($JS.API.STREAM.INFO.KV_PAI_SECRETS, $JS.API.CONSUMER.CREATE.KV_PAI_SECRETS.x.y,
# $JS.API.DIRECT.GET.KV_PAI_SECRETS.$KV..., $JS.API.CONSUMER.DURABLE.CREATE.KV_PAI_SECRETS.x, ...).
_SECRETS_STREAM = f"KV_{SECRETS_BUCKET}"
SECRETS_PUBLISH_DENY = (
    f"$KV.{SECRETS_BUCKET}.>",
    f"$JS.API.*.*.{_SECRETS_STREAM}",
    f"$JS.API.*.*.{_SECRETS_STREAM}.>",
    f"$JS.API.*.*.*.{_SECRETS_STREAM}",
    f"$JS.API.*.*.*.{_SECRETS_STREAM}.>",
)
SECRETS_SUBSCRIBE_DENY = (f"$KV.{SECRETS_BUCKET}.>",)


def permissions(service: str) -> dict[str, Any]:
    """The NATS permissions block of one user."""
    if service == ADMIN_USER:
        return {"publish": {"allow": [">"]}, "subscribe": {"allow": [">"]}}
    grant = GRANTS.get(service)
    if grant is None:
        publish: dict[str, list[str]] = {"allow": [">"]}
        subscribe: dict[str, list[str]] = {"allow": [">"]}
    else:
        publish = {"allow": [*_COMMON_PUBLISH, f"{ROOT}.health.{service}", *grant.publish]}
        subscribe = {"allow": [*_COMMON_SUBSCRIBE, *grant.subscribe]}
    if grant is None or not grant.secrets:
        publish["deny"] = list(SECRETS_PUBLISH_DENY)
        subscribe["deny"] = list(SECRETS_SUBSCRIBE_DENY)
    return {"publish": publish, "subscribe": subscribe}


def new_password() -> str:
    # A letter first: nats-server reads a variable's value like a bare token, so one made of
    # digits would become a number.
    return "pai-" + secrets.token_urlsafe(32)


def password_variable(user: str) -> str:
    """The environment variable nats-server reads a user's password from (on Kubernetes)."""
    return "PAI_NATS_PASSWORD_" + user.upper().replace("-", "_")


def secret_key(user: str) -> str:
    """The key of a user's password in the platform's credentials Secret (on Kubernetes)."""
    return f"nats-{user}-password"


def write_private(path: Path, text: str) -> None:
    """Write a file only its owner may read (0600), replacing it atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    os.chmod(tmp, 0o600)  # an existing file keeps its old mode through O_CREAT
    os.replace(tmp, path)


def load_credentials(path: Path, users: Iterable[str]) -> dict[str, str]:
    """Each user's password from ``path``; users without one get a new one, written back (0600).

    Passwords once written are kept, so services restarted later, and tasks adopted by a
    restarted orchestrator, find the same bus.
    """
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        stored = {}
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read the bus credentials {path}: {exc}; fix or remove the file") from exc
    if not isinstance(stored, dict) or not all(isinstance(v, str) for v in stored.values()):
        raise ValueError(f"the bus credentials {path} are not a JSON object of passwords; remove the file")
    credentials: dict[str, str] = dict(stored)
    wanted = [ADMIN_USER, *users]
    for user in wanted:
        credentials.setdefault(user, new_password())
    if credentials != stored:
        write_private(path, json.dumps(credentials, indent=2, sort_keys=True))
    elif path.stat().st_mode & 0o077:
        os.chmod(path, 0o600)
    return credentials


def authorization_config(credentials: Mapping[str, str]) -> str:
    """The nats-server configuration block naming every user, its password and permissions.

    NATS' configuration format reads JSON, so the block is JSON (strings quoted, which also keeps
    ``$JS...`` from being read as a variable).
    """
    users = [
        {"user": user, "password": password, "permissions": permissions(user)}
        for user, password in sorted(credentials.items())
    ]
    return "authorization: " + json.dumps({"users": users}, indent=2) + "\n"


def authorization_config_from_env(users: Iterable[str]) -> str:
    """The same block with each password read from the server's environment (``$PAI_NATS_PASSWORD_X``,
    unquoted: a variable), so a configuration file without secrets can be published as a ConfigMap.
    """
    names = sorted({ADMIN_USER, *users})
    text = authorization_config({user: f"@@{password_variable(user)}@@" for user in names})
    for user in names:
        text = text.replace(f'"@@{password_variable(user)}@@"', f"${password_variable(user)}")
    return text
