"""Users' registered e-mail addresses, followed from KV `PAI_USER_CONTACTS` (written by rest).

`emails` maps a user name to the address they registered; the engine reads it whenever it
labels a job-scoped series, which gains `user_email` when its owner has one, so a receiver can
write `to: "$user_email"`. `run` watches the whole bucket: the current entries come first and
replace what was known in one step (an entry deleted while the watch was down is forgotten),
then each change applies as it comes. A watch that breaks is opened again after `retry_after`
and the addresses in force stay meanwhile. `ready` is set once the first entries are in: the
service waits for it before replaying its history, so replayed alerts carry the labels they
were first fired with. The watching itself is `KeyWatch`'s (libs/backbone/kv.py).

An entry whose address is not one plain address (a list, blanks, a `$`) is ignored: a user
may not have notifications of their own jobs sent to others.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable

import structlog
from nats.js.kv import KeyValue

from libs.backbone.kv import KeyWatch

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
        self.emails: dict[str, str] = {}
        self._owners: dict[str, str] = {}  # key -> user name, to drop a user when their key is deleted
        self.ready = asyncio.Event()
        # While a watch opens, its current entries gather here and then replace what was known.
        self._gathering: tuple[dict[str, str], dict[str, str]] | None = None
        self._watch = KeyWatch(
            open_bucket,
            ">",
            self._entry,
            what="user contacts",
            on_open=self._opened,
            on_current=self._current,
            retry_after=retry_after,
        )

    @property
    def closed(self) -> bool:
        return self._watch.closed

    async def run(self) -> None:
        await self._watch.run()

    async def close(self) -> None:
        await self._watch.close()

    def _opened(self) -> None:
        self._gathering = ({}, {})

    def _entry(self, key: str, revision: int, value: bytes | None) -> None:
        emails, owners = self._gathering if self._gathering is not None else (self.emails, self._owners)
        _apply(emails, owners, key, value)

    def _current(self) -> None:
        if self._gathering is None:
            return
        emails, self._owners = self._gathering
        self._gathering = None
        self.emails.clear()  # the same dict the engine holds: replaced in place
        self.emails.update(emails)
        self.ready.set()


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
