"""Awaiting the end of a process on its pidfd: the orchestrator's children and the MPS daemon."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

from libs.backbone.running import process_ended


async def test_a_process_is_awaited_until_it_ends_and_not_before() -> None:
    read, write = os.pipe()
    # The child lives until its stdin closes: the test decides when it ends.
    proc = await asyncio.to_thread(
        subprocess.Popen, [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=read
    )
    os.close(read)
    try:
        waiting = asyncio.ensure_future(process_ended(proc.pid))
        done, _ = await asyncio.wait({waiting}, timeout=0.3)
        assert not done, "the wait ended while the process still ran"
        os.close(write)
        write = -1
        assert await asyncio.wait_for(waiting, timeout=10) is True
        assert await asyncio.to_thread(proc.wait, 5) == 0
    finally:
        if write >= 0:
            os.close(write)
        proc.kill()
        await asyncio.to_thread(proc.wait)


async def test_a_process_already_gone_is_ended() -> None:
    proc = await asyncio.to_thread(subprocess.Popen, [sys.executable, "-c", "pass"])
    await asyncio.to_thread(proc.wait)  # reaped: its pid names nothing now
    assert await asyncio.wait_for(process_ended(proc.pid), timeout=5) is True
