"""Storages come from the admin's file and reach a user only through their groups' acls."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp.test_utils import TestClient

from services.rest.core.storages import StorageConfigError, parse_storages
from services.rest.settings import RestSettings
from tests.rest.test_users_groups import create_user

Client = TestClient[Any, Any]
STORAGES = [
    {
        "name": "home",
        "volumeName": "home-pv",
        "default": True,
        "type": "nfs",
        "data": {"server": "10.0.0.9", "path": "/home"},
    },
    {
        "name": "datasets",
        "share": True,
        "volumeName": "datasets-pv",
        "type": "azureBlob",
        "data": {"containerName": "d"},
        "readOnly": True,
    },
    {"name": "scratch", "volumeName": "scratch-pv", "type": "samba", "data": {"address": "//fs/scratch"}},
]


@pytest.fixture
def rest_settings(rest_settings: RestSettings, tmp_path: Path) -> RestSettings:
    path = tmp_path / "storages.yaml"
    path.write_text(yaml.safe_dump(STORAGES))
    return rest_settings.model_copy(update={"storages_file": path})


async def test_a_user_sees_only_the_storages_their_groups_grant(
    api: Client, admin_headers: dict[str, str]
) -> None:
    group = {"groupname": "readers", "extension": {"acls": {"storageConfigs": ["home", "datasets"]}}}
    assert (await api.post("/api/v2/groups", json=group, headers=admin_headers)).status == 201
    bob = await create_user(api, admin_headers, "bob")
    carol = await create_user(api, admin_headers, "carol")
    joined = await api.put("/api/v2/users/bob/group", json={"groupname": "readers"}, headers=admin_headers)
    assert joined.status == 201

    async def names(headers: dict[str, str], query: str = "") -> list[str]:
        response = await api.get("/api/v2/storages" + query, headers=headers)
        assert response.status == 200, await response.text()
        return [storage["name"] for storage in (await response.json())["storages"]]

    assert await names(admin_headers) == ["home", "datasets", "scratch"]
    assert await names(bob) == ["home", "datasets"]
    assert await names(bob, "?default=true") == ["home"]
    assert await names(carol) == []

    detail = await (await api.get("/api/v2/storages/datasets", headers=bob)).json()
    assert detail == {
        "name": "datasets",
        "share": True,
        "volumeName": "datasets-pv",
        "default": False,
        "type": "azureBlob",
        "data": {"containerName": "d"},
        "readOnly": True,
    }
    forbidden = await api.get("/api/v2/storages/scratch", headers=bob)
    assert forbidden.status == 403
    assert (await forbidden.json())["message"].startswith("User bob is not allowed to access scratch")
    missing = await api.get("/api/v2/storages/nowhere", headers=bob)
    assert missing.status == 404
    assert await missing.json() == {"code": "NoStorageError", "message": "Storage nowhere is not found."}
    assert (await api.get("/api/v2/storages")).status == 401
    bad = await api.get("/api/v2/storages?default=maybe", headers=bob)
    assert bad.status == 400
    assert (await bad.json())["code"] == "InvalidParametersError"


async def test_an_invalid_storages_file_is_a_clear_503_naming_the_entry(
    api: Client, admin_headers: dict[str, str], rest_settings: RestSettings
) -> None:
    assert rest_settings.storages_file is not None
    rest_settings.storages_file.write_text(
        yaml.safe_dump([{"name": "x", "type": "nfs", "data": {"server": "s"}}])
    )
    response = await api.get("/api/v2/storages", headers=admin_headers)
    assert response.status == 503
    body = await response.json()
    assert body["code"] == "UnknownError"
    assert "[0].data needs path" in body["message"]


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ({"name": "x"}, "must be a YAML list"),
        (["x"], "[0] must be a mapping"),
        ([{"type": "nfs"}], "[0].name is required"),
        ([{"name": "x", "type": "ceph"}], "[0].type must be one of nfs"),
        ([{"name": "x", "type": "samba", "data": {}}], "[0].data needs address"),
        ([{"name": "x", "share": "yes"}], "[0].share must be of type bool"),
        ([{"name": "x"}, {"name": "x"}], "[1].name 'x' is listed twice"),
    ],
    ids=["not a list", "not a mapping", "no name", "unknown type", "missing data", "wrong type", "twice"],
)
def test_a_bad_storages_file_names_the_entry_and_the_fix(document: Any, problem: str) -> None:
    with pytest.raises(StorageConfigError) as raised:
        parse_storages(document)
    assert problem in str(raised.value)


def test_storage_defaults_fill_what_an_entry_leaves_out() -> None:
    (storage,) = parse_storages([{"name": "plain"}])
    assert storage.detail() == {
        "name": "plain",
        "share": True,
        "volumeName": "plain",
        "default": False,
        "type": "other",
        "data": {},
    }
    assert parse_storages(None) == []
