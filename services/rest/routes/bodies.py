"""Every request body passes here: its size and encoding are checked before any parser sees it.

One middleware reads the body of every request once, within the admin's limit
(`PAI_LIMIT_BODY_BYTES`, 1 MiB by default): larger is 413 in OpenPAI's JSON error shape naming
the limit, text that is not valid in its charset (UTF-8 unless the request names another) is 400
naming the byte offset. Routes then parse the checked bytes: `read_json` refuses JSON nested
deeper than `MAX_DEPTH` before the decoder recurses; YAML goes through libs.protocol's bounded
loaders (yamlsource.py), which check depth and alias expansion the same way.
"""

from __future__ import annotations

import codecs
import json
import math
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from libs.web.jsonbody import MAX_DEPTH, json_depth
from services.rest.core.errors import REQUEST_TOO_LARGE, ApiError, invalid_parameters
from services.rest.keys import SETTINGS

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def too_large(limit: int) -> ApiError:
    return REQUEST_TOO_LARGE(
        reason=f"The request body is larger than the limit of {limit:,} bytes (PAI_LIMIT_BODY_BYTES); "
        "send less, or ask the admin to raise the limit.",
        limit=limit,
    )


def _charset(request: web.Request) -> str:
    declared = request.charset or "utf-8"
    try:
        return codecs.lookup(declared).name
    except LookupError:
        raise invalid_parameters(
            f"The request names charset {declared!r}, which is unknown; send UTF-8."
        ) from None


@web.middleware
async def body_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Read and check the body once; routes then read the checked bytes aiohttp keeps."""
    if request.body_exists:
        limit = request.app[SETTINGS].limit_body_bytes
        if request.content_length is not None and request.content_length > limit:
            raise too_large(limit)
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise too_large(limit) from None
        charset = _charset(request)
        try:
            raw.decode(charset)
        except UnicodeDecodeError as exc:
            raise invalid_parameters(
                f"The request body is not valid {charset.upper()} text: byte {exc.start} "
                f"(0x{raw[exc.start]:02x}) {exc.reason}. Save and send the body as UTF-8.",
                offset=exc.start,
            ) from None
    return await handler(request)


async def read_json(request: web.Request, example: str) -> Any:
    """The body as JSON, within the depth limit; 400 naming the problem and an example."""
    text = await request.text()
    if json_depth(text) > MAX_DEPTH:
        raise invalid_parameters(
            f"The JSON body is nested more than {MAX_DEPTH} levels deep (the limit); "
            f"send for example {example}."
        )
    try:
        return json.loads(text, parse_float=_finite, parse_constant=_no_constant)
    except _NotFinite as exc:
        raise invalid_parameters(
            f"The JSON body holds the number {exc}, which no field can store; use a finite number."
        ) from None
    except ValueError:
        raise invalid_parameters(f"The body must be JSON such as {example}.") from None


class _NotFinite(ValueError):
    pass


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999: JSON columns (PostgreSQL's above all) cannot hold it
        raise _NotFinite(text)
    return value


def _no_constant(text: str) -> Any:
    raise _NotFinite(text)  # NaN, Infinity: not JSON at all, though Python's decoder reads them
