"""`pai job exec`: a command, or a shell with a terminal, in a running task.

The command runs where the task runs and as it runs (its uid, its sandbox or container, its work
dir, its PAI_* variables, its limits): the API's WebSocket
``GET /api/v2/jobs/{user}~{job}/tasks/{role}/{index}/exec`` (services/rest/routes/task_exec.py)
reaches the orchestrator that runs it. So it works wherever the API answers, the portal's address
included, for the job's owner and admins. Its messages are libs/web/exec_stream.py's.

``-i`` passes standard input on (else the command reads an empty input); ``-t`` asks for a
terminal: on a terminal of ours, it is put in raw mode (the remote one echoes and edits lines)
and its size follows ours. The command's exit code is `pai`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import threading
from typing import Any
from urllib.parse import quote

import typer

from libs.protocol.job_details import JobDetail
from pai.cli.client import ApiError, ClientError, job_path
from pai.cli.common import ServerOption, _client, _error_console, _friendly_errors, _split_job

NO_EXIT_CODE = 255
"""`pai`'s exit code when the connection ended before the command said its own."""


def exec_command(
    job: str = typer.Argument(..., help="USER~JOB, or JOB for the logged-in user"),
    command: list[str] = typer.Argument(..., help="the command and its arguments, after --"),
    role: str | None = typer.Option(None, "--role", help="task role (default: the first)"),
    index: int = typer.Option(0, "--index", min=0, help="task index in the role"),
    interactive: bool = typer.Option(False, "--interactive", "-i", help="pass standard input to the command"),
    tty: bool = typer.Option(False, "--tty", "-t", help="give the command a terminal (for a shell: -it)"),
    server: str | None = ServerOption,
) -> None:
    """Run a command in a running task, as the task runs (`pai job exec JOB -it -- bash`).

    Write the command after `--`. Only the job's owner and admins may. pai exits with its code.
    """
    client, login_ = _client(server)
    user, name = _split_job(job, login_)
    with _friendly_errors(), client:
        if role is None:
            roles = JobDetail.read(client.job(user, name)).role_names
            if not roles:
                raise ClientError(f"job {user}~{name} has no task yet; wait until it runs.")
            role = roles[0]
    assert login_ is not None
    url = f"{client.server}{job_path(user, name)}/tasks/{quote(role, safe='')}/{index}/exec"
    with _friendly_errors():
        code = asyncio.run(_session(url, login_.token, command, interactive=interactive, tty=tty))
    raise typer.Exit(code)


class _Terminal:
    """Our terminal in raw mode while the remote one edits lines, restored afterwards."""

    def __init__(self, fd: int) -> None:
        import termios
        import tty

        self.fd = fd
        self.saved = termios.tcgetattr(fd)
        tty.setraw(fd, termios.TCSADRAIN)  # what was typed ahead is kept, and sent

    def restore(self) -> None:
        import termios

        termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)


def _size() -> tuple[int, int]:
    try:
        size = os.get_terminal_size(sys.stdin.fileno())
    except OSError:
        return 24, 80
    # A terminal nobody sized (a fresh pseudo-terminal) says 0 by 0.
    return size.lines or 24, size.columns or 80


def _read_input(loop: asyncio.AbstractEventLoop, chunks: asyncio.Queue[bytes]) -> None:
    """Standard input, piece by piece, in a thread (a file read never blocks an event loop's
    readiness: it may not be polled); b"" at its end."""
    while True:
        try:
            data = os.read(sys.stdin.fileno(), 65536)
        except OSError:
            data = b""
        loop.call_soon_threadsafe(chunks.put_nowait, data)
        if not data:
            return


def _api_error(status: int, body: bytes) -> ClientError:
    try:
        answer = json.loads(body)
    except ValueError:
        answer = None
    if not isinstance(answer, dict) or "message" not in answer:
        return ClientError(f"the server refused the exec (HTTP {status})")
    hint = answer.get("hint")
    return ApiError(status, str(answer.get("code")), str(answer["message"]), hint=str(hint) if hint else None)


async def _session(url: str, token: str, command: list[str], *, interactive: bool, tty: bool) -> int:
    import aiohttp  # only here: the other commands need no WebSocket

    from libs.web.exec_stream import STDERR, STDIN, STDOUT, control, data_frame, read_control

    rows, cols = _size()
    params = [("command", argument) for argument in command]
    params += [("tty", "true" if tty else "false"), ("rows", str(rows)), ("cols", str(cols))]
    refused: dict[str, bytes] = {}

    async def keep_refusal(_: Any, __: Any, params: aiohttp.TraceRequestEndParams) -> None:
        # An answer that is no upgrade is an error in OpenPAI's shape: its text is the message.
        if params.response.status != 101:
            refused["body"] = await params.response.read()

    tracing = aiohttp.TraceConfig()
    tracing.on_request_end.append(keep_refusal)
    local = _Terminal(sys.stdin.fileno()) if tty and sys.stdin.isatty() else None
    loop = asyncio.get_running_loop()
    try:
        async with aiohttp.ClientSession(trace_configs=[tracing]) as http:
            try:
                ws = await http.ws_connect(
                    url, params=params, headers={"Authorization": f"Bearer {token}"}, heartbeat=30
                )
            except aiohttp.WSServerHandshakeError as exc:
                raise _api_error(exc.status, refused.get("body", b"")) from None
            except aiohttp.ClientError as exc:
                raise ClientError(f"cannot reach the platform ({type(exc).__name__}): {exc}") from None
            async with ws:
                if local is not None:
                    loop.add_signal_handler(
                        signal.SIGWINCH,
                        lambda: asyncio.ensure_future(
                            ws.send_str(control("resize", rows=_size()[0], cols=_size()[1]))
                        ),
                    )
                feeding = asyncio.create_task(_feed(ws, interactive, tty, STDIN, data_frame, control))
                code = NO_EXIT_CODE
                async for message in ws:
                    if message.type == aiohttp.WSMsgType.BINARY and message.data:
                        out = sys.stderr if message.data[0] == STDERR else sys.stdout
                        if message.data[0] in (STDOUT, STDERR):
                            out.buffer.write(message.data[1:])
                            out.buffer.flush()
                    elif message.type == aiohttp.WSMsgType.TEXT:
                        said = read_control(message.data) or {}
                        if said.get("type") == "exit":
                            code = int(said.get("code", NO_EXIT_CODE))
                feeding.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await feeding
    finally:
        if local is not None:
            loop.remove_signal_handler(signal.SIGWINCH)
            local.restore()
    if code == NO_EXIT_CODE:
        _error_console().print("error: the connection ended before the command did.", markup=False)
    return code


async def _feed(ws: Any, interactive: bool, tty: bool, stdin: int, data_frame: Any, control: Any) -> None:
    """Standard input to the command (with -i), then the end of it; a terminal without -i is left
    open, as a terminal nobody types at."""
    if not interactive and tty:
        return
    if interactive:
        chunks: asyncio.Queue[bytes] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        threading.Thread(target=_read_input, args=(loop, chunks), daemon=True).start()
        while data := await chunks.get():
            await ws.send_bytes(data_frame(stdin, data))
    await ws.send_str(control("eof"))
