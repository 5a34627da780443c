"""The webhook routes: subscribe, list, read, delete, see recent deliveries, redeliver one.

A user manages their own subscriptions; an admin sees and deletes everyone's. A subscription
receives what its owner may see (the same rights as ``GET /api/v2/events``), filtered by its
``types``, ``job``, ``username`` and ``vc``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from libs.web.errors import forbidden, invalid, not_found
from libs.web.jsonbody import MAX_DEPTH, json_depth
from services.events.adapters.delivering import AddressRefused, check_target
from services.events.adapters.streaming import authenticate
from services.events.core.filters import Caller, FilterError, refused_filter
from services.events.core.webhooks import Webhook, check_body
from services.events.keys import DELIVERIES

routes = web.RouteTableDef()


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        text = await request.text()
        # Measured before decoding: the decoder recurses per level (a RecursionError is a 500).
        if json_depth(text) > MAX_DEPTH:
            raise invalid(f"The JSON body is nested more than {MAX_DEPTH} levels deep (the limit).")
        body = json.loads(text)
    except (ValueError, UnicodeDecodeError):
        raise invalid("The body must be a JSON object (Content-Type: application/json).") from None
    if not isinstance(body, dict):
        raise invalid("The body must be a JSON object, not a list or a scalar.")
    return body


def _visible(caller: Caller, hook: Webhook) -> bool:
    return caller.admin or hook.owner == caller.username


async def _hook(request: web.Request, caller: Caller) -> Webhook:
    hook_id = request.match_info["id"]
    hook = request.app[DELIVERIES].webhooks.get(hook_id)
    if hook is None or not _visible(caller, hook):
        raise not_found(f"No webhook {hook_id} of yours; `GET /api/v2/webhooks` lists them.")
    return hook


@routes.post("/v2/webhooks")
async def create_webhook(request: web.Request) -> web.Response:
    """Subscribe an HTTP receiver to the events you may see."""
    caller = await authenticate(request)
    deliveries = request.app[DELIVERIES]
    try:
        url, secret, flt = check_body(await _body(request))
    except FilterError as exc:
        raise invalid(exc.message) from None
    refusal = refused_filter(caller, flt)
    if refusal is not None:
        raise forbidden(refusal)
    try:
        await check_target(url, deliveries.resolver)
    except AddressRefused as exc:
        raise invalid(str(exc)) from None
    query = flt.to_query()
    hook = await deliveries.create(
        Webhook(
            id="new",
            owner=caller.username,
            admin=caller.admin,
            url=url,
            secret=secret,
            job=query.get("job"),
            username=flt.username,
            vc=flt.vc,
            types=tuple(sorted(flt.types)),
            created_at=datetime.now(UTC),
        )
    )
    return web.json_response(hook.view(), status=201)


@routes.get("/v2/webhooks")
async def list_webhooks(request: web.Request) -> web.Response:
    """Your webhooks (an admin: everyone's)."""
    caller = await authenticate(request)
    hooks = sorted(request.app[DELIVERIES].webhooks.values(), key=lambda h: h.created_at)
    return web.json_response([hook.view() for hook in hooks if _visible(caller, hook)])


@routes.get("/v2/webhooks/{id}")
async def get_webhook(request: web.Request) -> web.Response:
    """One webhook, with its state (active or failing)."""
    return web.json_response((await _hook(request, await authenticate(request))).view())


@routes.delete("/v2/webhooks/{id}")
async def delete_webhook(request: web.Request) -> web.Response:
    """Stop a webhook and forget its deliveries."""
    hook = await _hook(request, await authenticate(request))
    await request.app[DELIVERIES].delete(hook.id)
    return web.json_response({"message": f"Webhook {hook.id} is deleted."})


@routes.get("/v2/webhooks/{id}/deliveries")
async def list_deliveries(request: web.Request) -> web.Response:
    """The recent delivery attempts, oldest first: status, latency, error."""
    hook = await _hook(request, await authenticate(request))
    attempts = await request.app[DELIVERIES].recent(hook.id)
    return web.json_response([attempt.view() for attempt in attempts])


@routes.post("/v2/webhooks/{id}/deliveries/{delivery}/redeliver")
async def redeliver(request: web.Request) -> web.Response:
    """Send one recorded delivery again, now; a success takes a failing webhook back."""
    hook = await _hook(request, await authenticate(request))
    delivery = request.match_info["delivery"]
    record = await request.app[DELIVERIES].redeliver(hook, delivery)
    if record is None:
        raise not_found(f"No recent delivery {delivery} of webhook {hook.id}; see its deliveries.")
    return web.json_response(record.view(), status=202)
