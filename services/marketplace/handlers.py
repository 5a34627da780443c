"""The marketplace's routes (openpaimarketplace's), wiring requests to the core and the adapters.

Every route needs a signed-in caller (the REST API's bearer token). An item the caller may not
see answers 404, as if it did not exist; one they may see but not change answers 403.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from libs.protocol.events import (
    MarketplaceItemApproved,
    MarketplaceItemCreated,
    MarketplaceItemDeleted,
    MarketplaceItemRejected,
    MarketplaceItemStarred,
    MarketplaceItemUpdated,
)
from libs.protocol.limits import JobLimits
from libs.web.errors import (
    ApiError,
    conflict,
    forbidden,
    invalid,
    not_found,
    unauthorized,
    unavailable,
)
from libs.web.jsonbody import MAX_DEPTH, json_depth
from services.marketplace.adapters.asking import IdentityUnavailable
from services.marketplace.adapters.storing import Query
from services.marketplace.core.items import (
    ITEM_TYPES,
    STATUSES,
    VISIBILITIES,
    Caller,
    FieldError,
    Item,
    NotAllowed,
    check_groups,
    check_label,
    may_edit,
    may_see,
    new_item,
    read_fields,
    read_moderation,
    update_item,
)
from services.marketplace.core.jobs import job_for
from services.marketplace.keys import ANNOUNCER, REST, STORE

PREFIX = "/marketplace/api"
MAX_LIMIT = 500
routes = web.RouteTableDef()


def now() -> datetime:
    return datetime.now(UTC)


async def authenticate(request: web.Request) -> Caller:
    """The caller as the REST API knows them; 401 without a token REST accepts."""
    header = request.headers.get("Authorization", "").strip()
    if not header:
        raise unauthorized()
    try:
        caller = await request.app[REST].who(header)
    except IdentityUnavailable as exc:
        raise unavailable(f"The REST API did not confirm the token ({exc}); retry shortly.") from None
    if caller is None:
        raise unauthorized("The token is invalid, expired or revoked; log in again.")
    return caller


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        text = await request.text()
        if json_depth(text) > MAX_DEPTH:
            raise invalid(f"The JSON body is nested more than {MAX_DEPTH} levels deep (the limit).")
        body = json.loads(text)
    except (ValueError, UnicodeDecodeError):
        raise invalid("The body must be a JSON object (Content-Type: application/json).") from None
    if not isinstance(body, dict):
        raise invalid("The body must be a JSON object, not a list or a scalar.")
    return body


def _field_error(exc: FieldError) -> ApiError:
    return invalid(exc.message, exc.field, **({"problems": exc.problems} if exc.problems else {}))


async def _limits(request: web.Request) -> JobLimits:
    try:
        return await request.app[REST].limits()
    except IdentityUnavailable as exc:
        raise unavailable(f"The REST API did not say its job limits ({exc}); retry shortly.") from None


async def _check_groups(request: web.Request, caller: Caller, groups: tuple[str, ...]) -> None:
    existing = None
    if caller.admin and groups:
        try:
            existing = await request.app[REST].groups(request.headers["Authorization"])
        except IdentityUnavailable as exc:
            raise unavailable(f"The REST API did not list the groups ({exc}); retry shortly.") from None
    try:
        check_groups(caller, groups, existing)
    except FieldError as exc:
        raise _field_error(exc) from None


async def _visible_item(request: web.Request, caller: Caller, item_id: str | None = None) -> Item:
    item_id = item_id or request.match_info["id"]
    item = await request.app[STORE].get(item_id)
    if item is None or not may_see(caller, item):
        raise not_found(f"No item {item_id} you may see; `GET /marketplace/api/items` lists them.")
    return item


def _text_param(query: Mapping[str, str], name: str, choices: tuple[str, ...] | None = None) -> str | None:
    value = query.get(name, "").strip()
    if not value:
        return None
    if choices is not None and value not in choices:
        raise invalid(f"{name} must be one of {', '.join(choices)}, not {value!r}.", name)
    return value


def _int_param(query: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    text = query.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise invalid(f"{name} must be a whole number, not {text!r}.", name) from None
    if not low <= value <= high:
        raise invalid(f"{name} must be between {low} and {high:,}, not {value}.", name)
    return value


@routes.get("/items")
async def list_items(request: web.Request) -> web.Response:
    """The items the caller may see that match the filters, newest first; X-Total-Count says how many."""
    caller = await authenticate(request)
    q = request.query
    query = Query(
        keyword=_text_param(q, "keyword"),
        type=_text_param(q, "type", ITEM_TYPES),
        category=_text_param(q, "category"),
        tag=_text_param(q, "tag"),
        author=_text_param(q, "author"),
        visibility=_text_param(q, "visibility", VISIBILITIES),
        status=_text_param(q, "status", STATUSES),
        offset=_int_param(q, "offset", 0, 0, 10**9),
        limit=_int_param(q, "limit", 50, 1, MAX_LIMIT),
    )
    found, total = await request.app[STORE].search(caller, query)
    return web.json_response([item.to_json() for item in found], headers={"X-Total-Count": str(total)})


@routes.post("/items")
async def create_item(request: web.Request) -> web.Response:
    """A new item by the caller; a public one waits for an admin's approval (unless an admin's)."""
    caller = await authenticate(request)
    body = await _body(request)
    limits = await _limits(request)
    try:
        changes = read_fields(body)
        item = new_item(uuid.uuid4().hex[:16], caller, changes, now(), limits)
    except FieldError as exc:
        raise _field_error(exc) from None
    await _check_groups(request, caller, item.group_list)
    await request.app[STORE].create(item)
    await request.app[ANNOUNCER].announce(
        MarketplaceItemCreated(
            item_id=item.id,
            name=item.name,
            author=item.author,
            item_type=item.type,
            visibility=item.visibility,
            status=item.status,
        )
    )
    return web.json_response(item.to_json(), status=201)


@routes.get("/items/{id}")
async def get_item(request: web.Request) -> web.Response:
    caller = await authenticate(request)
    return web.json_response((await _visible_item(request, caller)).to_json())


async def _update(
    request: web.Request,
    caller: Caller,
    item: Item,
    changes: Mapping[str, Any],
    moderation: Any = None,
) -> Item:
    limits = await _limits(request)
    try:
        update = update_item(item, caller, changes, moderation, now(), limits)
    except NotAllowed as exc:
        raise forbidden(str(exc)) from None
    except FieldError as exc:
        raise _field_error(exc) from None
    if "groupList" in update.changed:
        await _check_groups(request, caller, update.item.group_list)
    if not update.changed:
        return item
    new = update.item
    await request.app[STORE].save(new)
    announcer = request.app[ANNOUNCER]
    by = caller.username
    fields = tuple(name for name in update.changed if name != "status")
    if fields:
        await announcer.announce(
            MarketplaceItemUpdated(
                item_id=new.id,
                name=new.name,
                author=new.author,
                item_type=new.type,
                by=by,
                changed=fields,
                status=new.status,
            )
        )
    if update.moderated == "approved":
        await announcer.announce(
            MarketplaceItemApproved(
                item_id=new.id, name=new.name, author=new.author, item_type=new.type, by=by
            )
        )
    elif update.moderated == "rejected":
        await announcer.announce(
            MarketplaceItemRejected(
                item_id=new.id,
                name=new.name,
                author=new.author,
                item_type=new.type,
                by=by,
                reason=new.status_reason,
            )
        )
    return new


@routes.put("/items/{id}")
async def put_item(request: web.Request) -> web.Response:
    """The author's (or an admin's) change of some fields; an admin's approval or rejection."""
    caller = await authenticate(request)
    item = await _visible_item(request, caller)
    body = await _body(request)
    try:
        changes = read_fields(body)
        moderation = read_moderation(body)
    except FieldError as exc:
        raise _field_error(exc) from None
    return web.json_response((await _update(request, caller, item, changes, moderation)).to_json())


@routes.delete("/items/{id}")
async def delete_item(request: web.Request) -> web.Response:
    caller = await authenticate(request)
    item = await _visible_item(request, caller)
    if not may_edit(caller, item):
        raise forbidden(f"Only the author ({item.author}) or an admin may delete item {item.id}.")
    await request.app[STORE].delete(item.id)
    await request.app[ANNOUNCER].announce(
        MarketplaceItemDeleted(
            item_id=item.id, name=item.name, author=item.author, item_type=item.type, by=caller.username
        )
    )
    return web.json_response({"message": f"Item {item.id} ({item.name}) deleted."})


def _label_routes(kind: str, singular: str) -> None:
    @routes.get(f"/items/{{id}}/{kind}")
    async def list_labels(request: web.Request) -> web.Response:
        caller = await authenticate(request)
        item = await _visible_item(request, caller)
        return web.json_response(list(getattr(item, kind)))

    async def change(request: web.Request, add: bool) -> web.Response:
        caller = await authenticate(request)
        item = await _visible_item(request, caller)
        try:
            label = check_label(singular, request.match_info["label"])
        except FieldError as exc:
            raise _field_error(exc) from None
        held: tuple[str, ...] = getattr(item, kind)
        if not add and label not in held:
            raise not_found(f"Item {item.id} has no {singular} {label!r}.")
        if add:
            wanted = held if label in held else (*held, label)
        else:
            wanted = tuple(x for x in held if x != label)
        new = await _update(request, caller, item, {kind: wanted})
        return web.json_response(list(getattr(new, kind)))

    @routes.put(f"/items/{{id}}/{kind}/{{label}}")
    async def add_label(request: web.Request) -> web.Response:
        return await change(request, add=True)

    @routes.delete(f"/items/{{id}}/{kind}/{{label}}")
    async def remove_label(request: web.Request) -> web.Response:
        return await change(request, add=False)

    @routes.get(f"/{kind}")
    async def count_labels(request: web.Request) -> web.Response:
        caller = await authenticate(request)
        return web.json_response(await request.app[STORE].label_counts(caller, kind))


_label_routes("tags", "tag")
_label_routes("categories", "category")


@routes.get("/items/{id}/starUsers")
async def star_users(request: web.Request) -> web.Response:
    caller = await authenticate(request)
    item = await _visible_item(request, caller)
    return web.json_response([{"name": name} for name in await request.app[STORE].star_users(item.id)])


@routes.get("/users/{username}/starItems")
async def star_items(request: web.Request) -> web.Response:
    caller = await authenticate(request)
    found = await request.app[STORE].starred_by(caller, request.match_info["username"])
    return web.json_response([item.to_json() for item in found])


@routes.get("/users/{username}/starItems/{id}")
async def star_item(request: web.Request) -> web.Response:
    caller = await authenticate(request)
    item = await _visible_item(request, caller)
    username = request.match_info["username"]
    if not await request.app[STORE].has_starred(item.id, username):
        raise not_found(f"{username} has not starred item {item.id}.")
    return web.json_response(item.to_json())


def _as_self(caller: Caller, username: str) -> None:
    if caller.username != username:
        raise forbidden(f"You star items as yourself: use /users/{caller.username}/starItems/...")


@routes.put("/users/{username}/starItems/{id}")
async def star(request: web.Request) -> web.Response:
    """Star an item once (409 the second time)."""
    caller = await authenticate(request)
    _as_self(caller, request.match_info["username"])
    item = await _visible_item(request, caller)
    number = await request.app[STORE].star(item.id, caller.username, now())
    if number is None:
        raise conflict(f"You starred item {item.id} already; DELETE the star to take it back.")
    await request.app[ANNOUNCER].announce(
        MarketplaceItemStarred(
            item_id=item.id,
            name=item.name,
            author=item.author,
            item_type=item.type,
            user=caller.username,
            star_number=number,
        )
    )
    return web.json_response({"message": f"Item {item.id} starred.", "starNumber": number})


@routes.delete("/users/{username}/starItems/{id}")
async def unstar(request: web.Request) -> web.Response:
    caller = await authenticate(request)
    _as_self(caller, request.match_info["username"])
    item = await _visible_item(request, caller)
    number = await request.app[STORE].unstar(item.id, caller.username)
    if number is None:
        raise not_found(f"You have not starred item {item.id}.")
    return web.json_response({"message": f"Star of item {item.id} taken back.", "starNumber": number})


@routes.get("/items/{id}/job")
async def item_job(request: web.Request) -> web.Response:
    """The job YAML to submit to use the item, with ``extras.submitFrom`` naming it."""
    caller = await authenticate(request)
    item = await _visible_item(request, caller)
    return web.json_response({"protocol": job_for(item)})
