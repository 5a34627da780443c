"""Failure-rule routes: operators read, replace and reset the platform's failure rules at run time.

    GET    /api/v2/failure-rules   the rule file in force (text/yaml), any logged-in user
    PUT    /api/v2/failure-rules   replace it (body text/yaml), admins only
    DELETE /api/v2/failure-rules   go back to the packaged defaults, admins only

The text is stored in KV bucket PAI_FAILURE_RULES under key ``current`` only after it loads
without a problem, so a stored value is always usable; a refused file answers 400 with every
problem (rule index, code, field, message, hint). The orchestrator watches the key: the next
task that starts, and the next platform-level failure, use the new rules without a restart.
The KV revision is the rules' version, in responses and in the ``X-Failure-Rules-Version``
header of a GET (0 while the packaged defaults apply).
"""

from __future__ import annotations

from typing import Any

import nats.errors
from aiohttp import web
from nats.js.kv import KeyValue

from libs.backbone.topology import FAILURE_RULES
from libs.failures import RuleError, check_rules, default_rules, default_rules_text, load_rules
from services.rest.adapters.auth import Principal, require_interactive, require_user
from services.rest.adapters.rule_texts import stored_text
from services.rest.core.errors import NON_ADMIN, invalid_parameters, unavailable
from services.rest.routes.availability import connected_bus

RULES_KEY = "current"
VERSION_HEADER = "X-Failure-Rules-Version"
SOURCE_HEADER = "X-Failure-Rules-Source"
YAML_TYPE = "text/yaml"

routes = web.RouteTableDef()


def _require_admin(request: web.Request, action: str) -> Principal:
    principal = require_interactive(request)  # an application token serves job operations only
    if not principal.admin:
        raise NON_ADMIN(f"Only an administrator may {action} the failure rules; ask one to do it.")
    return principal


async def _bucket(request: web.Request) -> KeyValue:
    try:
        return await connected_bus(request, "The failure rules store").bus.js.key_value(FAILURE_RULES.bucket)
    except (nats.errors.Error, OSError) as exc:
        raise unavailable(f"The rule store is not reachable ({type(exc).__name__}); try again.") from None


async def _stored(kv: KeyValue) -> tuple[int, str | None]:
    """The revision and text of the stored rules; text None when none is stored."""
    return await stored_text(kv, RULES_KEY, "The rule store")


@routes.get("/v2/failure-rules")
async def get_rules(request: web.Request) -> web.Response:
    require_user(request)
    revision, text = await _stored(await _bucket(request))
    source = "stored" if text is not None else "default"
    return web.Response(
        text=text if text is not None else default_rules_text(),
        content_type=YAML_TYPE,
        headers={VERSION_HEADER: str(revision if text is not None else 0), SOURCE_HEADER: source},
    )


@routes.put("/v2/failure-rules")
async def put_rules(request: web.Request) -> web.Response:
    _require_admin(request, "change")
    text = await request.text()
    if not text.strip():
        raise invalid_parameters(
            "The request body is empty; send the rule file with Content-Type: text/yaml "
            "(check it first with `pai failure-rules check FILE`)."
        )
    try:
        rules = load_rules(text)
    except RuleError as exc:
        problems = [problem.model_dump() for problem in exc.problems]
        summary = "; ".join(str(problem) for problem in exc.problems)
        raise invalid_parameters(
            f"The failure rules are invalid ({len(problems)} problem(s)): {summary}", problems=problems
        ) from None
    kv = await _bucket(request)
    try:
        revision = await kv.put(RULES_KEY, text.encode("utf-8"))
    except (nats.errors.Error, OSError) as exc:
        why = type(exc).__name__
        raise unavailable(f"The rule store did not confirm the change ({why}); try again.") from None
    body: dict[str, Any] = {
        "version": int(revision),
        "rules": len(rules.rules),
        "fileVersion": rules.version,
        "warnings": [str(warning) for warning in check_rules(rules)],
    }
    return web.json_response(body)


@routes.delete("/v2/failure-rules")
async def reset_rules(request: web.Request) -> web.Response:
    _require_admin(request, "reset")
    kv = await _bucket(request)
    try:
        await kv.delete(RULES_KEY)
    except (nats.errors.Error, OSError) as exc:
        why = type(exc).__name__
        raise unavailable(f"The rule store did not confirm the reset ({why}); try again.") from None
    revision, _ = await _stored(kv)
    return web.json_response({"version": revision, "rules": len(default_rules().rules), "source": "default"})
