"""An admin adds storages through the API (PUT /api/v2/storages/{name}) and grants them to groups
with patch semantics; what the CLI sends for `pai storage grant|revoke` keeps the rest of a
group's extension."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp.test_utils import TestClient

from pai.cli.storages import granted_extension, granting_groups
from services.rest.core.storages import StorageConfigError, parse_storages, put_storage
from services.rest.settings import RestSettings
from tests.rest.test_users_groups import create_user

Client = TestClient[Any, Any]
HOME = {"name": "home", "type": "nfs", "data": {"server": "10.0.0.9", "path": "/home"}}


@pytest.fixture
def rest_settings(rest_settings: RestSettings, tmp_path: Path) -> RestSettings:
    path = tmp_path / "storages.yaml"
    path.write_text(yaml.safe_dump([HOME]))
    return rest_settings.model_copy(update={"storages_file": path})


def test_a_storage_is_added_or_replaced_by_name_and_the_others_kept() -> None:
    entries, new = put_storage([HOME], "team", {"data": {"path": "/srv/team"}})
    assert new
    assert entries == [HOME, {"name": "team", "type": "local", "data": {"path": "/srv/team"}}]
    entries, new = put_storage(
        entries, "team", {"type": "local", "data": {"path": "/srv/t2"}, "default": True}
    )
    assert not new
    assert [s.name for s in parse_storages(entries)] == ["home", "team"]
    assert parse_storages(entries)[1].data == {"path": "/srv/t2"}
    assert put_storage(None, "team", {"data": {"path": "/srv/team"}})[1]


@pytest.mark.parametrize(
    ("name", "body", "problem"),
    [
        ("bad name", {"data": {"path": "/srv/x"}}, "name 'bad name' must be"),
        ("team", {"data": {"path": "srv/x"}}, "data.path must be an absolute path"),
        ("team", {"data": {"path": "/etc"}}, "data.path /etc is in the system tree /etc"),
        ("team", {"data": {"path": "/srv"}}, "name a directory of its own below it"),
        ("team", {"data": {}}, "data needs path"),
        ("team", {"data": {"path": "/srv/x", "mountPath": "mnt/x"}}, "data.mountPath must be an absolute"),
        ("team", {"data": {"path": "/srv/x"}, "colour": "red"}, "colour: not a storage field"),
        ("team", {"name": "other", "data": {"path": "/srv/x"}}, "differs from the path's 'team'"),
        ("team", {"type": "floppy", "data": {"path": "/srv/x"}}, "type must be one of"),
        ("team", {"data": {"path": "/srv/x"}, "default": "yes"}, "default must be of type bool"),
    ],
)
def test_a_bad_storage_is_refused_naming_the_field_and_the_fix(
    name: str, body: dict[str, Any], problem: str
) -> None:
    with pytest.raises(StorageConfigError) as caught:
        put_storage([HOME], name, body)
    assert problem in str(caught.value), caught.value


async def test_an_admin_adds_a_storage_to_the_file_and_others_are_refused(
    api: Client, admin_headers: dict[str, str], rest_settings: RestSettings
) -> None:
    body = {"type": "local", "data": {"path": "/srv/team", "mountPath": "/mnt/team"}}
    added = await api.put("/api/v2/storages/team", json=body, headers=admin_headers)
    assert added.status == 201, await added.text()
    assert (await added.json())["message"] == "storage team is added"
    assert rest_settings.storages_file is not None
    written = yaml.safe_load(rest_settings.storages_file.read_text())
    assert written == [HOME, {"name": "team", **body}]
    again = await api.put("/api/v2/storages/team", json=body, headers=admin_headers)
    assert (again.status, (await again.json())["message"]) == (200, "storage team is updated")
    detail = await (await api.get("/api/v2/storages/team", headers=admin_headers)).json()
    assert detail["data"] == body["data"]

    bad = await api.put("/api/v2/storages/team", json={"data": {"path": "/etc/x"}}, headers=admin_headers)
    assert bad.status == 400
    answer = await bad.json()
    assert answer["code"] == "InvalidParametersError"
    assert "system tree /etc" in answer["message"], answer

    bob = await create_user(api, admin_headers, "bob")
    refused = await api.put("/api/v2/storages/mine", json=body, headers=bob)
    assert refused.status == 403
    assert (await refused.json())["message"] == "Non-admin is not allow to do this operation."
    assert [s["name"] for s in yaml.safe_load(rest_settings.storages_file.read_text())] == ["home", "team"]


async def test_a_group_is_granted_a_storage_with_patch_and_keeps_its_other_rights(
    api: Client, admin_headers: dict[str, str]
) -> None:
    acls = {"admin": False, "virtualClusters": ["default"], "storageConfigs": []}
    group = {"groupname": "team", "description": "the team", "extension": {"acls": acls, "note": "kept"}}
    assert (await api.post("/api/v2/groups", json=group, headers=admin_headers)).status == 201
    found = await (await api.get("/api/v2/groups/team", headers=admin_headers)).json()
    extension, changed = granted_extension(found, "home", True)
    assert changed
    data = {"groupname": "team", "extension": extension}
    put = await api.put("/api/v2/groups", json={"data": data, "patch": True}, headers=admin_headers)
    assert put.status == 201, await put.text()
    groups = await (await api.get("/api/v2/groups", headers=admin_headers)).json()
    assert granting_groups(groups) == {"home": ["team"]}
    now = await (await api.get("/api/v2/groups/team", headers=admin_headers)).json()
    assert now["description"] == "the team"
    assert now["extension"] == {"acls": {**acls, "storageConfigs": ["home"]}, "note": "kept"}
    assert granted_extension(now, "home", True)[1] is False
    revoked, changed = granted_extension(now, "home", False)
    assert changed
    assert revoked == {"acls": acls, "note": "kept"}


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["add", "team"], "--path is required"),
        (["add", "team", "--path", "srv/team"], "--path must be an absolute path, e.g. /srv/team"),
        (["add", "team", "--path", "/srv/team", "--mount", "mnt"], "--mount must be an absolute path"),
        (["grant", "team"], "--group is required"),
        (["revoke", "team"], "--group is required"),
    ],
)
def test_the_cli_refuses_bad_input_naming_the_option_and_the_fix(
    args: list[str], problem: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from typer.testing import CliRunner

    from pai.cli.storages import storage_app

    monkeypatch.setenv("PAI_CONFIG_DIR", str(tmp_path))  # no login: nothing reaches a server
    result = CliRunner().invoke(storage_app, args)
    assert result.exit_code == 2, result.output
    assert problem in result.output, result.output
