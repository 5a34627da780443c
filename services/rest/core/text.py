"""Text no name or value of ours can hold, recognised before it reaches a database."""

from __future__ import annotations


def unstorable(text: str) -> bool:
    """NUL and lone surrogates cannot be stored or compared as text by PostgreSQL (or sent back)."""
    return "\x00" in text or any("\ud800" <= ch <= "\udfff" for ch in text)
