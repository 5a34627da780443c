"""The submit page's editor: the API's own validator on its YAML, and the form's job as YAML."""

from __future__ import annotations

import json
from typing import Any

import yaml
from aiohttp import web

from libs.protocol import JobProtocolError, parse_job
from libs.protocol.advice import advise
from libs.protocol.yamlsource import YamlTooLargeError, safe_load_bounded
from libs.web.jsonbody import MAX_DEPTH, json_depth
from services.portal.context import require_csrf, session_of
from services.portal.core.problems import line_of
from services.portal.core.security import CSRF_HEADER

# What the portal's own routes read (the editor's YAML, the form's JSON): REST's default body limit.
BODY_BYTES = 1024 * 1024


async def _bounded_text(request: web.Request) -> str:
    """The body as text, at most BODY_BYTES (413 past it, as REST answers)."""
    if (request.content_length or 0) > BODY_BYTES:
        raise web.HTTPRequestEntityTooLarge(max_size=BODY_BYTES, actual_size=request.content_length or 0)
    body = await request.content.read(BODY_BYTES + 1)
    if len(body) > BODY_BYTES:
        raise web.HTTPRequestEntityTooLarge(max_size=BODY_BYTES, actual_size=len(body))
    try:
        return body.decode(request.charset or "utf-8")
    except (UnicodeDecodeError, LookupError):
        raise web.HTTPBadRequest(text="The body is not text in its charset.") from None


async def validate(request: web.Request) -> web.Response:
    """The API's own validator (libs.protocol.parse_job) on the editor's YAML, before submitting."""
    if session_of(request) is None:
        raise web.HTTPUnauthorized()
    require_csrf(request, request.headers.get(CSRF_HEADER))
    text = await _bounded_text(request)
    config: Any = None
    try:
        # The limits REST's parsers keep: depth, and aliases counted as expanded.
        config = safe_load_bounded(text)
    except YamlTooLargeError as exc:
        problem = {"path": "", "message": str(exc), "hint": "flatten the YAML; no job needs so much"}
        return web.json_response({"valid": False, "problems": [problem], "config": None}, status=400)
    except (yaml.YAMLError, RecursionError):
        pass  # a syntax error: parse_job names its line below
    # A valid job's warnings too: what it asks that the platform will not do (libs.protocol.advice),
    # as `pai job validate` and a dry run say them.
    warnings: list[dict[str, str]] = []
    try:
        warnings = [warning.as_dict() for warning in advise(parse_job(text))]
        problems: list[dict[str, Any]] = []
    except JobProtocolError as exc:
        problems = [{**problem.model_dump(), "line": line_of(problem.message)} for problem in exc.problems]
    answer = {"valid": not problems, "problems": problems, "warnings": warnings, "config": config}
    return web.json_response(answer, dumps=lambda value: json.dumps(value, default=str))


async def render(request: web.Request) -> web.Response:
    """The form's job as YAML for the editor."""
    if session_of(request) is None:
        raise web.HTTPUnauthorized()
    require_csrf(request, request.headers.get(CSRF_HEADER))
    text = await _bounded_text(request)
    if json_depth(text) > MAX_DEPTH:
        raise web.HTTPBadRequest(text=f"The JSON is nested more than {MAX_DEPTH} levels deep (the limit).")
    try:
        config = json.loads(text)
    except ValueError:
        raise web.HTTPBadRequest(text="The body is not JSON.") from None
    text = yaml.safe_dump(config, sort_keys=False, allow_unicode=True, default_flow_style=False)
    return web.Response(text=text, content_type="text/yaml")
