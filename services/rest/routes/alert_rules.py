"""Alerting-configuration routes: admins read and replace the alerter's rules, routes and receivers.

    GET /api/v2/alert-rules   the configuration in force (text/yaml), admins only
    PUT /api/v2/alert-rules   replace it (body text/yaml), admins only

Both are admins only, reading too: receivers name people's addresses, SMTP relays and webhook
URLs, which often carry a token. The text is stored in KV bucket PAI_ALERT_RULES under key
``config`` (the key the alerter watches) only after it loads without a problem, so a stored
value is always usable; a refused file answers 400 with every problem (its YAML path and what
to write). The alerter applies a new value at its next evaluation, without a restart. The KV
revision is the configuration's version, in the answer to a PUT and in the
``X-Alert-Rules-Version`` header of a GET (0 while the built-in configuration applies, which a
GET then returns, with ``X-Alert-Rules-Source: built-in``).

`pai alert-rules show` and `set` call these, so the CLI reaches the platform it is logged in
to, through REST, and never a NATS server of its own choosing.
"""

from __future__ import annotations

import re
from typing import Any

import nats.errors
from aiohttp import web
from nats.js.errors import BucketNotFoundError
from nats.js.kv import KeyValue

from libs.alerting import ConfigError, default_text, load_config
from libs.backbone.provisioning import ensure_kv
from libs.backbone.topology import ALERT_RULES
from services.rest.adapters.auth import require_interactive
from services.rest.adapters.rule_texts import stored_text
from services.rest.core.errors import NON_ADMIN, invalid_parameters, unavailable
from services.rest.routes.availability import connected_bus

RULES_KEY = "config"
VERSION_HEADER = "X-Alert-Rules-Version"
SOURCE_HEADER = "X-Alert-Rules-Source"
YAML_TYPE = "text/yaml"
# "rules[0].for: write a duration ..." names its place; "not valid YAML: ..." names none.
_LOCATED = re.compile(r"^(?P<path>[A-Za-z_][\w.\[\]]*): (?P<message>.*)$", re.DOTALL)

routes = web.RouteTableDef()


def _require_admin(request: web.Request, action: str) -> None:
    principal = require_interactive(request)  # an application token serves job operations only
    if not principal.admin:
        raise NON_ADMIN(f"Only an administrator may {action} the alerting rules; ask one to do it.")


async def _bucket(request: web.Request) -> KeyValue:
    js = connected_bus(request, "The alerting rules store").bus.js
    try:
        try:
            return await js.key_value(ALERT_RULES.bucket)
        except BucketNotFoundError:  # a bus provisioned by a version without it
            return await ensure_kv(js, ALERT_RULES)
    except (nats.errors.Error, OSError) as exc:
        why = type(exc).__name__
        raise unavailable(f"The alerting rules store is not reachable ({why}); try again.") from None


async def _stored(kv: KeyValue) -> tuple[int, str | None]:
    """The revision and text of the stored configuration; text None when none is stored."""
    return await stored_text(kv, RULES_KEY, "The alerting rules store")


def _problem(text: str) -> dict[str, str]:
    located = _LOCATED.match(text)
    if located is None:
        return {"path": "", "message": text}
    return {"path": located["path"], "message": located["message"]}


@routes.get("/v2/alert-rules")
async def get_alert_rules(request: web.Request) -> web.Response:
    """The alerting configuration in force, as YAML (admin only)."""
    _require_admin(request, "read")
    revision, text = await _stored(await _bucket(request))
    if text is None:
        return web.Response(
            text=default_text(),
            content_type=YAML_TYPE,
            headers={VERSION_HEADER: "0", SOURCE_HEADER: "built-in"},
        )
    return web.Response(
        text=text, content_type=YAML_TYPE, headers={VERSION_HEADER: str(revision), SOURCE_HEADER: "stored"}
    )


@routes.put("/v2/alert-rules")
async def put_alert_rules(request: web.Request) -> web.Response:
    """Replace the alerting configuration (admin only); the alerter applies it at its next evaluation."""
    _require_admin(request, "change")
    text = await request.text()
    if not text.strip():
        raise invalid_parameters(
            "The request body is empty; send the alerting configuration with Content-Type: text/yaml "
            "(check it first with `pai alert-rules check FILE`)."
        )
    try:
        config = load_config(text)
    except ConfigError as exc:
        summary = "; ".join(exc.problems)
        raise invalid_parameters(
            f"The alerting configuration is invalid ({len(exc.problems)} problem(s)): {summary}",
            problems=[_problem(problem) for problem in exc.problems],
        ) from None
    kv = await _bucket(request)
    try:
        revision = await kv.put(RULES_KEY, text.encode("utf-8"))
    except (nats.errors.Error, OSError) as exc:
        why = type(exc).__name__
        raise unavailable(f"The alerting rules store did not confirm the change ({why}); retry.") from None
    body: dict[str, Any] = {
        "version": int(revision),
        "rules": len(config.rules),
        "receivers": len(config.receivers),
        "inhibitRules": len(config.inhibit_rules),
        "source": "stored",
    }
    return web.json_response(body)
