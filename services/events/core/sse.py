"""The text/event-stream wire format (WHATWG HTML, server-sent events)."""

from __future__ import annotations

KEEP_ALIVE = b": keep-alive\n\n"


def message(event_id: str, event_type: str, data: bytes) -> bytes:
    """One message; ``data`` is compact JSON, a single line (no newline to split)."""
    payload = data.replace(b"\r", b"").replace(b"\n", b"\ndata: ")
    return b"id: " + event_id.encode() + b"\nevent: " + event_type.encode() + b"\ndata: " + payload + b"\n\n"
