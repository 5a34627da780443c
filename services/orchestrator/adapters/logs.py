"""Serving a piece of a task's log: the answer behind `pai.rpc.orchestrator.logs`.

Logs are not facts, so they are not on a stream: the REST service asks the orchestrator that
owns the task's directory, by request/reply. A request names the task and a byte window; the
reply carries the text, the window's start (`offset`), where the next window starts
(`nextOffset`) and the file's whole size, so a caller follows a growing log by asking again from
`nextOffset`. A window never ends inside a UTF-8 character: the character's first bytes are left
for the next window, so every byte reaches a follower once, whole.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from libs.protocol.subjects import LOGS_RPC, SubjectError, check_id
from services.orchestrator.adapters.specs import LOG_FILES, latest_task_dir

LOGS_SUBJECT = LOGS_RPC
LOGS_QUEUE = "orchestrator"
MAX_LIMIT = 1024 * 1024


class LogRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    job_id: str
    attempt: int = Field(ge=0)
    role: str = Field(pattern=r"^[A-Za-z0-9_]+$")
    index: int = Field(ge=0)
    file: Literal["all", "stdout", "stderr"] = "all"
    offset: int = Field(default=0, description="byte offset; negative counts from the end")
    limit: int = Field(default=64 * 1024, ge=1, le=MAX_LIMIT)


def read_log(data_dir: Path, raw: bytes) -> dict[str, Any]:
    """The reply to one request, as a JSON-ready dict: {content, offset, nextOffset, size} or {error}."""
    try:
        request = LogRequest.model_validate_json(raw)
        check_id(request.job_id, "job_id")
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'request'}: {e['msg']}" for e in exc.errors()
        )
        return {"error": f"invalid log request: {problems}"}
    except SubjectError as exc:
        return {"error": str(exc)}
    directory = latest_task_dir(data_dir, request.job_id, request.attempt, request.role, request.index)
    if directory is None:
        return {
            "error": f"no log for task {request.role}-{request.index} of attempt {request.attempt} "
            f"of job {request.job_id}: it has not started on this orchestrator"
        }
    path = directory / "logs" / LOG_FILES[request.file]
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return {"content": "", "offset": 0, "nextOffset": 0, "size": 0}
    offset = request.offset if request.offset >= 0 else max(0, size + request.offset)
    offset = min(offset, size)
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read(request.limit)
    return window(data, offset, size)


def window(data: bytes, offset: int, size: int) -> dict[str, Any]:
    """The reply for `data` read at `offset` of a file of `size` bytes, ending on a whole character."""
    whole = len(data) - _partial_tail(data)
    if whole == 0 and offset + len(data) >= size and data:
        whole = len(data)  # the file ends inside a character: hand it over rather than wait forever
    return {
        "content": data[:whole].decode("utf-8", errors="replace"),
        "offset": offset,
        "nextOffset": offset + whole,
        "size": size,
    }


def _partial_tail(data: bytes) -> int:
    """How many bytes at the end of `data` begin a UTF-8 character that is not complete (0-3)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # not a continuation byte: the start of the last character
            need = 2 if byte >> 5 == 0b110 else 3 if byte >> 4 == 0b1110 else 4 if byte >> 3 == 0b11110 else 1
            return back if back < need else 0
    return 0
