"""Users' registered e-mail addresses, copied to KV `PAI_USER_CONTACTS` for the alerter.

The users table is the truth; the bucket is the copy other services follow without SQL. A key
holds ``{"username", "email"}`` while the user exists with an address, and is deleted when the
user goes or the address is cleared. `share_contact` copies one user's current row (the user
routes call it after every write), `sync_contacts` copies every user (at start), so a crash
between a SQL write and its copy, or a bus that was away, is repaired at the next start.

Each write is conditional on the revision read before the row was read. When two replicas copy
the same user at once, the one whose row is older finds the revision moved, reads both again
and writes what the table holds now: the bucket never ends behind the table, whatever order
the writes land in.

Keys: a name of letters, digits, '_', '-' and inner single dots is its own key, so an operator
can read an entry by name; any other name is '=' and its UTF-8 in hex. User names never hold
'=', so the two forms cannot meet.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass

import nats.errors
import structlog
from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue
from sqlalchemy import select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from libs.backbone.errors import TRANSIENT_ERRORS
from libs.backbone.kv import current_entries
from libs.backbone.topology import USER_CONTACTS
from services.rest.adapters.tables import users

log = structlog.get_logger(__name__)

# What a sync waits out and tries again after: the bus or the database away.
_SYNC_ERRORS: tuple[type[Exception], ...] = (*TRANSIENT_ERRORS, DBAPIError)

_PLAIN = re.compile(r"[-_a-zA-Z0-9]+(\.[-_a-zA-Z0-9]+)*")
# Rounds of read-and-write for one user before giving up (each lost round means someone else
# wrote that very key in between, so this is never reached in practice).
ATTEMPTS = 10


def contact_key(username: str) -> str:
    """The user's key in the bucket (the name itself when KV allows it, else '=' and hex)."""
    if _PLAIN.fullmatch(username):
        return username
    return "=" + username.encode("utf-8", "surrogatepass").hex()


def contact_value(username: str, email: str | None) -> bytes | None:
    """What the key should hold for this address; None: no entry (no address)."""
    address = (email or "").strip()
    if not address:
        return None
    return json.dumps({"username": username, "email": address}, sort_keys=True).encode()


@dataclass(frozen=True)
class _Held:
    """A live entry of the bucket: its revision and bytes."""

    revision: int
    value: bytes


@dataclass
class SyncCounts:
    written: int = 0
    removed: int = 0
    unchanged: int = 0


async def _held(kv: KeyValue, key: str) -> _Held | None:
    try:
        entry = await kv.get(key)  # a deleted key raises KeyDeletedError, a KeyNotFoundError
    except KeyNotFoundError:
        return None
    return _Held(entry.revision or 0, entry.value or b"") if entry.value else None


async def _all_held(kv: KeyValue) -> dict[str, _Held]:
    """Every live entry of the bucket, read in one pass."""
    return {
        key: _Held(entry.revision or 0, entry.value) for key, entry in (await current_entries(kv)).items()
    }


async def _emails(engine: AsyncEngine, username: str | None = None) -> dict[str, str]:
    query = select(users.c.username, users.c.email)
    if username is not None:
        query = query.where(users.c.username == username)
    async with engine.connect() as conn:
        return {str(row.username): str(row.email or "") for row in await conn.execute(query)}


async def _write(kv: KeyValue, key: str, wanted: bytes | None, held: _Held | None) -> str | None:
    """Make the key hold ``wanted`` if it still holds ``held``: "written", "removed", "unchanged",
    or None when another writer changed it first."""
    try:
        if wanted is None:
            if held is None:
                return "unchanged"
            await kv.delete(key, last=held.revision)
            return "removed"
        if held is not None and held.value == wanted:
            return "unchanged"
        if held is None:
            await kv.create(key, wanted)
        else:
            await kv.update(key, wanted, last=held.revision)
        return "written"
    except KeyWrongLastSequenceError:
        return None


async def _copy_one(engine: AsyncEngine, kv: KeyValue, username: str) -> str:
    key = contact_key(username)
    for _ in range(ATTEMPTS):
        held = await _held(kv, key)  # before the row: see the module docstring
        email = (await _emails(engine, username)).get(username)
        outcome = await _write(kv, key, contact_value(username, email), held)
        if outcome is not None:
            return outcome
    raise TimeoutError(f"the contact of {username} kept changing while being copied")


async def share_contact(engine: AsyncEngine, js: JetStreamContext, username: str) -> bool:
    """Copy ``username``'s address (or its absence) to the bucket; False if the bus failed.

    The SQL write it follows stands either way; the next start's sync copies what was missed.
    """
    try:
        kv = await js.key_value(USER_CONTACTS.bucket)
        outcome = await _copy_one(engine, kv, username)
    except (nats.errors.Error, TimeoutError) as exc:
        log.warning(
            "user contact not shared; the next start copies it",
            user=username,
            error=f"{type(exc).__name__}: {exc}",
        )
        return False
    if outcome != "unchanged":
        log.info("user contact shared", user=username, outcome=outcome)
    return True


def _owner(held: _Held) -> str | None:
    try:
        name = json.loads(held.value).get("username")
    except (ValueError, AttributeError):
        return None
    return name if isinstance(name, str) else None


async def sync_contacts(engine: AsyncEngine, js: JetStreamContext) -> SyncCounts:
    """Make the bucket hold exactly the users table's addresses (idempotent)."""
    kv = await js.key_value(USER_CONTACTS.bucket)
    held = await _all_held(kv)  # before the rows: see the module docstring
    wanted = {
        contact_key(name): (name, contact_value(name, email))
        for name, email in (await _emails(engine)).items()
    }
    counts = SyncCounts()
    for key in sorted(held.keys() | wanted.keys()):
        username, value = wanted.get(key, (None, None))
        outcome = await _write(kv, key, value, held.get(key))
        if outcome is None:  # changed meanwhile: copy that user again from fresh reads
            username = username or _owner(held[key])
            if username is None or contact_key(username) != key:
                outcome = await _write(kv, key, None, await _held(kv, key)) or "unchanged"
            else:
                outcome = await _copy_one(engine, kv, username)
        setattr(counts, outcome, getattr(counts, outcome) + 1)
    return counts


async def sync_until_done(engine: AsyncEngine, js: JetStreamContext, *, retry_after: float = 5.0) -> None:
    """`sync_contacts`, tried again while the bus or the database fails (run it as a task)."""
    while True:
        try:
            counts = await sync_contacts(engine, js)
        except _SYNC_ERRORS as exc:
            log.warning("user contacts not synced yet; retrying", error=f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(retry_after)
            continue
        log.info(
            "user contacts synced", written=counts.written, removed=counts.removed, kept=counts.unchanged
        )
        return
