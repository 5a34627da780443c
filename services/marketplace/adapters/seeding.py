"""Seeding the starter templates at start: each folder of ``starters/`` becomes an item once.

A starter is added when no item of its name by ``pai`` exists, so a restart adds nothing twice
(an admin who deletes a starter sees it again at the next start: retire one by removing its
folder). Its id is its folder's name where that is a valid id (``hello-world``), so replicas
starting together insert it once. A starter that does not validate is logged and skipped: the
service starts anyway.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from datetime import UTC, datetime
from pathlib import Path

import structlog
from sqlalchemy.exc import IntegrityError

from services.marketplace.adapters.storing import Store
from services.marketplace.core.items import STARTER_AUTHOR, FieldError, Item
from services.marketplace.core.starters import starter_item

log = structlog.get_logger(__name__)

STARTERS = Path(__file__).resolve().parent.parent / "starters"
FILES = ("item.yaml", "job.yaml", "README.md")
SLUG_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}$")


def read_starter(folder: Path) -> Item:
    """The item of one starter folder; FieldError (or OSError) when it is incomplete or invalid."""
    item_yaml, job_yaml, readme = ((folder / name).read_text(encoding="utf-8") for name in FILES)
    item_id = folder.name if SLUG_ID.fullmatch(folder.name) else uuid.uuid4().hex[:16]
    return starter_item(item_id, item_yaml, job_yaml, readme, datetime.now(UTC))


def read_starters(folder: Path) -> list[Item]:
    """Every valid starter under ``folder``, in name order; each invalid one is logged and skipped."""
    found: list[Item] = []
    if not folder.is_dir():
        return found
    for starter in sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
        try:
            found.append(read_starter(starter))
        except FieldError as exc:
            log.error("starter template skipped", starter=starter.name, field=exc.field, problem=exc.message)
        except (OSError, UnicodeDecodeError) as exc:
            log.error("starter template skipped", starter=starter.name, problem=str(exc))
    return found


async def seed(store: Store, folder: Path = STARTERS) -> list[str]:
    """Add every valid starter not there yet; the names added."""
    added: list[str] = []
    for item in await asyncio.to_thread(read_starters, folder):
        if await store.starter_exists(STARTER_AUTHOR, item.name):
            continue
        try:
            await store.create(item)
        except IntegrityError:
            continue  # another replica seeded it a moment ago
        added.append(item.name)
    if added:
        log.info("starter templates added", names=added)
    return added
