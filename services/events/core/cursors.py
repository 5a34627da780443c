"""Stream positions as the SSE ``id`` a client sends back to resume.

A subscription follows one to four streams (jobs, nodes, alerts, marketplace; the marketplace
only when its types are asked for). Following only PAI_JOBS (any subscription about jobs, or
asking only for job and task types) its cursor is that stream's sequence, a plain integer.
Following several, it is their sequences joined by ``-`` in the order jobs, nodes, alerts,
marketplace (``120-4-7``). ``0`` means each followed stream's beginning;
any other single number is refused there (it names a position in one stream only).
"""

from __future__ import annotations

from dataclasses import dataclass

from services.events.core.filters import FilterError


@dataclass(frozen=True)
class Cursor:
    """The last sequence delivered per followed stream."""

    positions: tuple[tuple[str, int], ...]

    def get(self, stream: str) -> int:
        return dict(self.positions).get(stream, 0)

    def advanced(self, stream: str, sequence: int) -> Cursor:
        return Cursor(tuple((s, sequence if s == stream else n) for s, n in self.positions))

    def text(self) -> str:
        return "-".join(str(n) for _, n in self.positions)


def parse_cursor(text: str, streams: tuple[str, ...], field_name: str) -> Cursor:
    """A cursor for ``streams`` from its text; a bare integer applies to every followed stream."""
    parts = text.strip().split("-")
    try:
        numbers = [int(part) for part in parts]
    except ValueError:
        numbers = []
    if not numbers or any(n < 0 for n in numbers) or len(numbers) not in (1, len(streams)):
        shape = "an integer" if len(streams) == 1 else f"an integer or {len(streams)} integers joined by '-'"
        raise FilterError(field_name, f"{field_name} must be {shape} (an event's id), got {text!r}.")
    if len(numbers) == 1 and len(streams) > 1 and numbers[0] != 0:
        # One number cannot say where to resume in several streams: each has its own sequences,
        # and applying it to all would silently skip (or repeat) events of the others.
        raise FilterError(
            field_name,
            f"{field_name} {text!r} is one number, but this subscription follows "
            f"{len(streams)} streams ({', '.join(streams)}): resume from an event's id, "
            f"{len(streams)} numbers joined by '-' ({'-'.join(['N'] * len(streams))}, e.g. "
            f"{'-'.join(str(n) for n in (120, 4, 7)[: len(streams)])}), or 0 for the beginning.",
        )
    if len(numbers) == 1:
        numbers = numbers * len(streams)
    return Cursor(tuple(zip(streams, numbers, strict=True)))
