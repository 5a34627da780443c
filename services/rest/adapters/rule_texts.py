"""A rules file kept whole under one key of a KV bucket (the failure rules, the alerting rules):
its text and revision as the API serves them, the bus's failures as 503s naming the store."""

from __future__ import annotations

import nats.errors
from nats.js.errors import KeyDeletedError, KeyNotFoundError
from nats.js.kv import KeyValue

from services.rest.core.errors import unavailable


async def stored_text(kv: KeyValue, key: str, store: str) -> tuple[int, str | None]:
    """The revision and text stored at ``key``; text None when none is stored (or it was deleted).
    ``store`` names the store in the error a user reads ("The rule store")."""
    try:
        entry = await kv.get(key)
    except KeyDeletedError as exc:
        return int(getattr(exc.entry, "revision", 0) or 0), None
    except KeyNotFoundError:
        return 0, None
    except (nats.errors.Error, OSError) as exc:
        raise unavailable(f"{store} did not answer ({type(exc).__name__}); try again.") from None
    if entry.value is None:
        return int(entry.revision or 0), None
    return int(entry.revision or 0), entry.value.decode("utf-8", "replace")
