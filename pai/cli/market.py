"""`pai market`: browse, use, publish and star the marketplace's job templates and data sets.

Items are named by id or by their unique name. `use` asks the marketplace for the job that uses
an item (its protocol with ``extras.submitFrom`` set, so the item's use count follows) and writes
it (``-o FILE``), submits it (``--submit``, with ``--wait`` as `pai job submit --wait`), or
prints it. Errors end in one line on stderr, as every `pai` command does.
"""

from __future__ import annotations

import json
import re
import secrets
from pathlib import Path
from typing import Any
from urllib.parse import quote

import typer
from rich.table import Table

from pai.cli.client import ApiError, PaiClient
from pai.cli.common import ServerOption, _client, _console, _error_console, _friendly_errors, read_job_file

market_app = typer.Typer(no_args_is_help=True, help="Share and reuse job templates and data sets.")

TYPES = ("template", "data")
VISIBILITIES = ("private", "group", "public")
DATA_TYPES = ("storage", "url")
# The job's own name: the first top-level `name:` line (indented ones belong to task roles etc.).
_JOB_NAME = re.compile(r"^name:[ \t]*(.*?)[ \t]*$", re.MULTILINE)


def _fail(message: str) -> typer.Exit:
    _error_console().print(f"error: {message}", markup=False)
    return typer.Exit(1)


def visibility(item: dict[str, Any]) -> str:
    """Who may see an item, in words."""
    if item.get("isPrivate"):
        return "private"
    if item.get("isPublic"):
        return "public"
    return "group " + ",".join(item.get("groupList") or [])


def find_item(client: PaiClient, ref: str) -> dict[str, Any]:
    """The item whose id is ``ref``, else the one visible item named exactly ``ref``."""
    try:
        found: dict[str, Any] = client.marketplace("GET", f"/items/{quote(ref, safe='')}").json()
        return found
    except ApiError as exc:
        if exc.status != 404:
            raise
    named: list[dict[str, Any]] = []
    offset = 0
    while True:  # keyword matching is wider than the name: keep the exact matches, page by page
        page = client.marketplace(
            "GET", "/items", params={"keyword": ref, "offset": offset, "limit": 100}
        ).json()
        named += [item for item in page if item.get("name") == ref]
        offset += len(page)
        if len(page) < 100:
            break
    if not named:
        raise _fail(f"no marketplace item has the id or name {ref!r}; `pai market list` shows them.")
    if len(named) > 1:
        ids = ", ".join(f"{item['id']} (by {item['author']})" for item in named)
        raise _fail(f"{len(named)} items are named {ref!r}: {ids}. Name one by its id.")
    return named[0]


def rename_job(protocol: str, name: str) -> str:
    """The job text with its top-level name replaced, the rest untouched."""
    if not _JOB_NAME.search(protocol):
        raise _fail("the item's job has no top-level `name:`; write it to a file with -o and edit it.")
    return _JOB_NAME.sub(lambda _m: f"name: {name}", protocol, count=1)


def _job_name(protocol: str) -> str:
    match = _JOB_NAME.search(protocol)
    return match.group(1).strip("'\"") if match else "job"


def list_items(
    keyword: str = typer.Option("", "--keyword", "-k", help="text in the name, summary or description"),
    item_type: str = typer.Option("", "--type", help="template or data"),
    tag: str = typer.Option("", "--tag", help="only items with this tag"),
    category: str = typer.Option("", "--category", help="only items in this category"),
    author: str = typer.Option("", "--author", help="only this user's items"),
    visible_to: str = typer.Option("", "--visibility", help="private, group or public"),
    status: str = typer.Option("", "--status", help="approved, pending (the review queue) or rejected"),
    limit: int = typer.Option(50, "--limit", min=1, max=1000, help="at most this many items"),
    offset: int = typer.Option(0, "--offset", min=0, help="skip this many items"),
    as_json: bool = typer.Option(False, "--json", help="print the items as JSON"),
    server: str | None = ServerOption,
) -> None:
    """List the marketplace items you may see."""
    if item_type and item_type not in TYPES:
        raise _fail(f"--type {item_type!r} is not one of: {', '.join(TYPES)}.")
    if visible_to and visible_to not in VISIBILITIES:
        raise _fail(f"--visibility {visible_to!r} is not one of: {', '.join(VISIBILITIES)}.")
    params = {
        "keyword": keyword,
        "type": item_type,
        "tag": tag,
        "category": category,
        "author": author,
        "visibility": visible_to,
        "status": status,
    }
    client, _ = _client(server)
    with _friendly_errors(), client:
        response = client.marketplace(
            "GET",
            "/items",
            params={**{k: v for k, v in params.items() if v}, "offset": offset, "limit": limit},
        )
    items: list[dict[str, Any]] = response.json()
    if as_json:
        typer.echo(json.dumps(items, indent=2))
        return
    table = Table("ID", "NAME", "TYPE", "AUTHOR", "VISIBILITY", "STATUS", "STARS", "USES", "TAGS")
    for item in items:
        table.add_row(
            str(item["id"]),
            str(item["name"]),
            str(item["type"]),
            str(item["author"]),
            visibility(item),
            str(item.get("status", "")),
            str(item.get("starNumber", 0)),
            str(item.get("useNumber", 0)),
            ",".join(item.get("tags") or []),
        )
    _console().print(table)
    total = response.headers.get("X-Total-Count")
    if total is not None and int(total) > len(items):
        _console().print(f"{len(items)} of {total} items; page with --offset and --limit", markup=False)


def show(
    item_ref: str = typer.Argument(..., metavar="ITEM", help="the item's id or unique name"),
    as_json: bool = typer.Option(False, "--json", help="print the item as JSON"),
    server: str | None = ServerOption,
) -> None:
    """Show an item: who may see it, stars, uses, its description and its job."""
    client, _ = _client(server)
    with _friendly_errors(), client:
        item = find_item(client, item_ref)
    if as_json:
        typer.echo(json.dumps(item, indent=2))
        return
    out = _console()
    lines = [
        ("item", f"{item['name']} (id {item['id']})"),
        ("type", str(item["type"])),
        ("author", str(item["author"])),
        ("visible to", visibility(item)),
        (
            "status",
            str(item.get("status", "")) + (f": {item['statusReason']}" if item.get("statusReason") else ""),
        ),
        ("stars", str(item.get("starNumber", 0))),
        ("uses", str(item.get("useNumber", 0))),
        ("tags", ", ".join(item.get("tags") or []) or "-"),
        ("categories", ", ".join(item.get("categories") or []) or "-"),
        ("updated", str(item.get("updatedAt", ""))),
        ("summary", str(item.get("summary") or "-")),
    ]
    if item["type"] == "data":
        lines.append(("data", f"{item.get('dataType')}: {item.get('dataUrl')}"))
    for label, value in lines:
        out.print(f"{label:<11}{value}", markup=False)
    if item.get("description"):
        out.print("\n" + str(item["description"]).rstrip(), markup=False)
    if item.get("protocol"):
        out.print("\n--- job ---\n" + str(item["protocol"]).rstrip(), markup=False)


def use(
    item_ref: str = typer.Argument(..., metavar="ITEM", help="the item's id or unique name"),
    output: Path | None = typer.Option(None, "--output", "-o", help="write the job YAML to this file"),
    submit: bool = typer.Option(False, "--submit", help="submit the job"),
    wait: bool = typer.Option(False, "--wait", help="with --submit: follow the job until it ends"),
    name: str | None = typer.Option(
        None,
        "--name",
        help="the job's name [default: the item's, with a random suffix when submitted]",
    ),
    server: str | None = ServerOption,
) -> None:
    """Get the job that uses an item: write it (-o), submit it (--submit), or print it."""
    if wait and not submit:
        raise _fail("--wait follows a submitted job: add --submit.")
    client, _ = _client(server)
    with _friendly_errors(), client:
        item = find_item(client, item_ref)
        protocol = str(
            client.marketplace("GET", f"/items/{quote(item['id'], safe='')}/job").json()["protocol"]
        )
        if name is not None or submit:
            protocol = rename_job(protocol, name or f"{_job_name(protocol)}-{secrets.token_hex(3)}")
        if output is not None:
            output.write_text(protocol, encoding="utf-8")
            _error_console().print(f"wrote the job of {item['name']} to {output}", markup=False)
        if not submit:
            if output is None:
                typer.echo(protocol, nl=not protocol.endswith("\n"))
            return
        answer = client.submit(protocol)
    _console().print(
        f"submitted {answer['username']}~{answer['name']} (id {answer['jobId']}) from {item['name']}",
        markup=False,
    )
    if wait:
        from pai.cli.watching import _watch  # watching imports jobs, as this module does

        raise typer.Exit(_watch(server, str(answer["username"]), str(answer["name"])))


def _read_text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise _fail(f"cannot read {what} {path}: {exc}") from None


def publish(
    file: Path | None = typer.Argument(
        None, dir_okay=False, help="the job YAML of a template (not for --type data)"
    ),
    item_type: str = typer.Option("template", "--type", help="template or data"),
    name: str | None = typer.Option(None, "--name", help="the item's name [default: the job's name]"),
    summary: str = typer.Option("", "--summary", help="one line saying what it is"),
    description: Path | None = typer.Option(
        None, "--description", dir_okay=False, help="a Markdown file describing it"
    ),
    tags: list[str] = typer.Option([], "--tag", help="a tag (repeatable)"),
    categories: list[str] = typer.Option([], "--category", help="a category (repeatable)"),
    private: bool = typer.Option(False, "--private", help="only you see it (the default)"),
    groups: list[str] = typer.Option([], "--group", help="members of this group see it (repeatable)"),
    public: bool = typer.Option(False, "--public", help="everyone sees it once an admin approves it"),
    data_type: str = typer.Option("", "--data-type", help="data items: storage or url"),
    data_url: str = typer.Option(
        "", "--data-url", help="data items: STORAGE/PATH (storage) or https://... (url)"
    ),
    server: str | None = ServerOption,
) -> None:
    """Publish a job template (FILE) or a data set (--type data) to the marketplace."""
    if item_type not in TYPES:
        raise _fail(f"--type {item_type!r} is not one of: {', '.join(TYPES)}.")
    if sum((private, bool(groups), public)) > 1:
        raise _fail("choose one of --private, --group and --public.")
    body: dict[str, Any] = {
        "type": item_type,
        "summary": summary,
        "tags": tags,
        "categories": categories,
        "isPrivate": not (groups or public),
        "isPublic": public,
        "groupList": groups,
    }
    if item_type == "template":
        if file is None:
            raise _fail("a template needs its job YAML: pai market publish FILE.")
        if data_type or data_url:
            raise _fail("--data-type and --data-url are for --type data.")
        body["protocol"] = read_job_file(file)
        body["name"] = name or _job_name(body["protocol"])
    else:
        if file is not None:
            raise _fail("a data item has no job file: give --data-type and --data-url instead.")
        if data_type not in DATA_TYPES or not data_url:
            raise _fail("a data item needs --data-type storage|url and --data-url.")
        if not name:
            raise _fail("a data item needs --name.")
        body.update(name=name, dataType=data_type, dataUrl=data_url)
    if description is not None:
        body["description"] = _read_text(description, "the description")
    client, _ = _client(server)
    with _friendly_errors(), client:
        item = client.marketplace("POST", "/items", json=body).json()
    pending = " (pending until an admin approves it)" if item.get("status") == "pending" else ""
    _console().print(
        f"published {item['name']} (id {item['id']}), visible to {visibility(item)}{pending}", markup=False
    )


def star(
    item_ref: str = typer.Argument(..., metavar="ITEM", help="the item's id or unique name"),
    undo: bool = typer.Option(False, "--undo", help="take your star back"),
    server: str | None = ServerOption,
) -> None:
    """Star an item (once per user), or take the star back with --undo."""
    client, login = _client(server)
    assert login is not None  # _client insists on a login
    with _friendly_errors(), client:
        item = find_item(client, item_ref)
        path = f"/users/{quote(login.user, safe='')}/starItems/{quote(item['id'], safe='')}"
        try:
            client.marketplace("DELETE" if undo else "PUT", path)
        except ApiError as exc:
            if exc.status == 409 and not undo:
                raise _fail(f"you have already starred {item['name']}.") from None
            if exc.status == 404 and undo:
                raise _fail(f"you have not starred {item['name']}.") from None
            raise
        stars = client.marketplace("GET", f"/items/{quote(item['id'], safe='')}").json().get("starNumber")
    verb = "unstarred" if undo else "starred"
    _console().print(f"{verb} {item['name']} (id {item['id']}); it has {stars} stars", markup=False)


market_app.command(name="list")(list_items)
market_app.command(name="show")(show)
market_app.command(name="use")(use)
market_app.command(name="publish")(publish)
market_app.command(name="star")(star)
