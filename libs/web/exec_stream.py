"""The messages of an exec's WebSocket (`pai job exec`): client to REST to orchestrator, and back.

REST authorizes the caller and passes each message on unchanged between the client and the
orchestrator that runs the task; only the orchestrator reads them. Binary frames carry bytes,
their first byte naming the stream, as Kubernetes' channel protocol does: ``STDIN`` from the
client, ``STDOUT`` and ``STDERR`` to it (with a terminal, everything is output). Text frames carry
one JSON object with a ``type``:

- client to task: ``{"type": "resize", "rows": R, "cols": C}`` (the terminal's new size) and
  ``{"type": "eof"}`` (no more input);
- task to client: ``{"type": "started"}`` first, once the command runs; ``{"type": "exit",
  "code": N}`` last. Instead of ``started``, the orchestrator may say ``{"type": "error", "status":
  S, "message": M}``: REST waits for the first message before it answers the client's upgrade, so
  a task that cannot be entered is an HTTP error (409 when it does not run), never a stream.

The query of the upgrade names the command and the terminal: ``command`` once per argument,
``tty=true``, ``rows`` and ``cols`` (the terminal's size at the start). ``relay`` passes the
messages between two sockets, as REST and the portal do.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import aiohttp
from aiohttp import web

STDIN = 0
STDOUT = 1
STDERR = 2
MAX_ARGUMENTS = 1024
MAX_COMMAND_BYTES = 64 * 1024


def data_frame(channel: int, data: bytes) -> bytes:
    """A binary frame: the channel's byte, then the data."""
    return bytes([channel]) + data


def control(kind: str, **fields: Any) -> str:
    """A text frame of ``kind``."""
    return json.dumps({"type": kind, **fields})


def read_control(text: str) -> dict[str, Any] | None:
    """A text frame's object, or None when it is not one."""
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) and isinstance(value.get("type"), str) else None


def command_problem(command: list[str]) -> str | None:
    """Why ``command`` cannot be run (empty, too long, a NUL in an argument); None when it can."""
    if not command:
        return "name the command to run (command=PROGRAM, once per argument)"
    if len(command) > MAX_ARGUMENTS or sum(len(a.encode()) for a in command) > MAX_COMMAND_BYTES:
        return f"the command is longer than {MAX_ARGUMENTS} arguments or {MAX_COMMAND_BYTES} bytes"
    if any("\0" in argument for argument in command):
        return "an argument of the command holds a NUL character"
    return None


async def relay(client: web.WebSocketResponse, upstream: aiohttp.ClientWebSocketResponse) -> None:
    """Every message from either socket to the other, unchanged, until one side closes; then both."""

    async def down() -> None:
        async for message in upstream:
            if message.type == aiohttp.WSMsgType.BINARY:
                await client.send_bytes(message.data)
            elif message.type == aiohttp.WSMsgType.TEXT:
                await client.send_str(message.data)

    async def up() -> None:
        async for message in client:
            if message.type == aiohttp.WSMsgType.BINARY:
                await upstream.send_bytes(message.data)
            elif message.type == aiohttp.WSMsgType.TEXT:
                await upstream.send_str(message.data)

    tasks = [asyncio.create_task(down()), asyncio.create_task(up())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        with contextlib.suppress(ConnectionError, RuntimeError):
            await upstream.close()
        with contextlib.suppress(ConnectionError, RuntimeError):
            await client.close()
