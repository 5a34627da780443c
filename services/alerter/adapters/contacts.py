"""Users' registered e-mail addresses, followed from KV `PAI_USER_CONTACTS` (written by rest).

`emails` maps a user name to the address they registered; the engine reads it whenever it
labels a job-scoped series, which gains `user_email` when its owner has one, so a receiver can
write `to: "$user_email"`. `run` watches the whole bucket: the current entries come first and
replace what was known in one step (an entry deleted while the watch was down is forgotten),
then each change applies as it comes. A watch that breaks is opened again after `retry_after`
and the addresses in force stay meanwhile. `ready` is set once the first entries are in: the
service waits for it before replaying its history, so replayed alerts carry the labels they
were first fired with. `close` ends `run` by stopping the watcher, as `KeyWatch` does, because
a cancel can be swallowed by the client while a watch is being opened.

An entry whose address is not one plain address (a list, blanks, a `$`) is ignored: a user
may not have notifications of their own jobs sent to others.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue

log = structlog.get_logger(__name__)

_ADDRESS = re.compile(r"[^\s,;$@<>]+@[^\s,;$@<>]+")


def usable_address(text: str) -> str | None:
    """The address itself when ``text`` is one plain address, else None."""
    address = text.strip()
    return address if _ADDRESS.fullmatch(address) else None


def parse_contact(value: bytes) -> tuple[str, str] | None:
    """(user name, address) from a stored entry; None when it holds no usable pair."""
    try:
        data = json.loads(value)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    username, email = data.get("username"), data.get("email")
    if not isinstance(username, str) or not username or not isinstance(email, str):
        return None
    address = usable_address(email)
    return None if address is None else (username, address)


class ContactsWatch:
    def __init__(self, open_bucket: Callable[[], Awaitable[KeyValue]], *, retry_after: float = 1.0) -> None:
        self._open_bucket = open_bucket
        self._retry_after = retry_after
        self.emails: dict[str, str] = {}
        self._owners: dict[str, str] = {}  # key -> user name, to drop a user when their key is deleted
        self.ready = asyncio.Event()
        self._watcher: Any = None
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    async def run(self) -> None:
        while not self._closed:
            try:
                bucket = await self._open_bucket()
                self._watcher = watcher = await bucket.watchall()
                try:
                    if self.closed:
                        break  # closed while the watch was being opened: nothing would stop it later
                    await self._follow(watcher)
                finally:
                    self._watcher = None
                    with contextlib.suppress(Exception):
                        await watcher.stop()  # type: ignore[no-untyped-call]
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the bus went away: try again; the addresses known stay
                log.warning("watching user contacts failed; retrying", error=f"{type(exc).__name__}: {exc}")
            if not self._closed:
                await asyncio.sleep(self._retry_after)

    async def _follow(self, watcher: Any) -> None:
        emails: dict[str, str] = {}
        owners: dict[str, str] = {}
        initial = True
        async for entry in watcher:
            if entry is None:  # the current entries are all in: they replace what was known
                if initial:
                    initial = False
                    self.emails.clear()
                    self.emails.update(emails)
                    self._owners = owners
                    self.ready.set()
                continue
            deleted = entry.operation in (KV_DEL, KV_PURGE) or not entry.value
            if initial:
                _apply(emails, owners, entry.key, None if deleted else entry.value)
            else:
                _apply(self.emails, self._owners, entry.key, None if deleted else entry.value)

    async def close(self) -> None:
        self._closed = True
        watcher = self._watcher
        if watcher is not None:
            with contextlib.suppress(Exception):
                await watcher.stop()


def _apply(emails: dict[str, str], owners: dict[str, str], key: str, value: bytes | None) -> None:
    previous = owners.pop(key, None)
    if previous is not None:
        emails.pop(previous, None)
    if value is None:
        return
    contact = parse_contact(value)
    if contact is None:
        log.warning("user contact without one usable address ignored", key=key)
        return
    username, address = contact
    owners[key] = username
    emails[username] = address
