"""An executor that spawns nothing, for the handler's own cost and its state (tests and bench)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class InstantExecutor:
    """Spawns nothing: every task 'starts' at once with a made-up pid; `started` lists their keys."""

    def __init__(self) -> None:
        self.started: list[Any] = []

    @property
    def spawned(self) -> int:
        return len(self.started)

    async def start(self, framework: Any, key: Any) -> tuple[int, Path]:
        self.started.append(key)
        return 100_000 + len(self.started), Path("/nonexistent")

    def adopt(self, *args: Any) -> None:
        return None

    def probe(self, *args: Any) -> Any:
        raise NotImplementedError

    async def stop(self, *args: Any, **kwargs: Any) -> None:
        return None

    async def report(self, *args: Any) -> None:
        return None

    def release(self, *args: Any) -> None:
        return None

    async def close(self) -> None:
        return None
