"""The storages file as an admin writes it and the storages a job mounts, as a user meets them:
each refused entry with its place and whole message, every field read, who may use what, where a
storage is on the node and in the task, and which storages a job's plugins get."""

from __future__ import annotations

from typing import Any

import pytest

from services.rest.core.storages import (
    Storage,
    StorageConfigError,
    StorageRefusedError,
    granted,
    job_storages,
    mount_path,
    node_path,
    parse_storages,
)


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"name": "x"}, "The storages file must be a YAML list of storages."),
        ("text", "The storages file must be a YAML list of storages."),
        (["x"], "[0] must be a mapping with name, volumeName, type and data."),
        ([{"name": "a"}, 3], "[1] must be a mapping with name, volumeName, type and data."),
        ([{"type": "nfs"}], "[0].name is required."),
        ([{"name": None}], "[0].name is required."),
        ([{"name": 5}], "[0].name must be of type str, got 5."),
        (
            [{"name": "x", "type": "ceph"}],
            "[0].type must be one of nfs, samba, azureFile, azureBlob, other, unknown, local, got 'ceph'.",
        ),
        ([{"name": "x", "type": 1}], "[0].type must be of type str, got 1."),
        ([{"name": "x", "data": []}], "[0].data must be of type dict, got []."),
        (
            [{"name": "x", "type": "nfs", "data": {"server": "s"}}],
            "[0].data needs path (strings) for type nfs.",
        ),
        (
            [{"name": "x", "type": "nfs", "data": {"path": 1}}],
            "[0].data needs server, path (strings) for type nfs.",
        ),
        ([{"name": "x", "type": "samba", "data": {}}], "[0].data needs address (strings) for type samba."),
        ([{"name": "x", "type": "azureFile"}], "[0].data needs shareName (strings) for type azureFile."),
        ([{"name": "x", "type": "azureBlob"}], "[0].data needs containerName (strings) for type azureBlob."),
        ([{"name": "x", "type": "local"}], "[0].data needs path (strings) for type local."),
        ([{"name": "x", "share": "yes"}], "[0].share must be of type bool, got 'yes'."),
        ([{"name": "x", "default": 1}], "[0].default must be of type bool, got 1."),
        ([{"name": "x", "volumeName": True}], "[0].volumeName must be of type str, got True."),
        ([{"name": "x", "readOnly": "no"}], "[0].readOnly must be of type bool, got 'no'."),
        ([{"name": "x", "secretName": 3}], "[0].secretName must be of type str, got 3."),
        ([{"name": "x", "mountOptions": "ro"}], "[0].mountOptions must be of type list, got 'ro'."),
        ([{"name": "x"}, {"name": "y"}, {"name": "x"}], "[2].name 'x' is listed twice."),
    ],
)
def test_a_bad_storages_file_names_the_entry_the_field_and_the_fix(document: Any, message: str) -> None:
    with pytest.raises(StorageConfigError) as caught:
        parse_storages(document)
    assert str(caught.value) == message


def test_every_field_of_an_entry_is_read() -> None:
    (storage,) = parse_storages(
        [
            {
                "name": "team",
                "share": False,
                "volumeName": "team-vol",
                "default": True,
                "type": "nfs",
                "data": {"server": "10.0.0.1", "path": "/exports/team"},
                "readOnly": True,
                "secretName": "team-secret",
                "mountOptions": ["vers=4", 1],
            }
        ]
    )
    assert storage == Storage(
        name="team",
        share=False,
        volume_name="team-vol",
        default=True,
        type="nfs",
        data={"server": "10.0.0.1", "path": "/exports/team"},
        read_only=True,
        secret_name="team-secret",
        mount_options=("vers=4", "1"),
    )
    assert storage.summary() == {"name": "team", "share": False, "volumeName": "team-vol", "default": True}
    assert storage.detail() == {
        "name": "team",
        "share": False,
        "volumeName": "team-vol",
        "default": True,
        "type": "nfs",
        "data": {"server": "10.0.0.1", "path": "/exports/team"},
        "readOnly": True,
        "secretName": "team-secret",
        "mountOptions": ["vers=4", "1"],
    }


def test_an_entry_left_short_takes_the_defaults_and_nulls_count_as_missing() -> None:
    (storage,) = parse_storages(
        [{"name": "plain", "share": None, "type": None, "data": None, "readOnly": None}]
    )
    assert storage == Storage("plain", True, "plain", False, "other", {})
    assert storage.detail() == {
        "name": "plain",
        "share": True,
        "volumeName": "plain",
        "default": False,
        "type": "other",
        "data": {},
    }
    assert storage.detail()["data"] is not storage.data
    assert parse_storages(None) == []
    assert parse_storages([]) == []
    (unknown,) = parse_storages([{"name": "u", "type": "unknown", "readOnly": False, "mountOptions": []}])
    assert unknown.detail()["readOnly"] is False
    assert unknown.detail()["mountOptions"] == []


def test_storages_keep_the_files_order() -> None:
    assert [s.name for s in parse_storages([{"name": "b"}, {"name": "a"}, {"name": "c"}])] == ["b", "a", "c"]


STORAGES = parse_storages(
    [
        {"name": "home", "default": True, "type": "local", "data": {"path": "/srv/home"}},
        {"name": "team", "type": "nfs", "data": {"server": "s", "path": "/exports/team"}},
        {"name": "blob", "default": True, "type": "azureBlob", "data": {"containerName": "c"}},
        {
            "name": "mounted",
            "type": "samba",
            "data": {"address": "a", "localPath": "/mnt/smb", "mountPath": "/data"},
        },
    ]
)
HOME, TEAM, BLOB, MOUNTED = STORAGES


def test_a_user_may_use_what_their_groups_grant_an_admin_everything() -> None:
    assert granted(STORAGES, False, ["team", "nothing", "blob"]) == [TEAM, BLOB]
    assert granted(STORAGES, False, []) == []
    assert granted(STORAGES, True, []) == STORAGES


def test_where_a_storage_is_on_the_node_and_in_the_task() -> None:
    assert (node_path(HOME), node_path(TEAM), node_path(BLOB), node_path(MOUNTED)) == (
        "/srv/home",
        "/exports/team",
        "",
        "/mnt/smb",
    )
    assert (mount_path(HOME), mount_path(MOUNTED)) == ("/mnt/home", "/data")
    odd = Storage("odd", True, "odd", False, "nfs", {"path": "/p", "localPath": "", "mountPath": 5})
    assert (node_path(odd), mount_path(odd)) == ("/p", "/mnt/odd")


def test_a_storage_plugin_naming_none_mounts_the_users_defaults() -> None:
    assert job_storages([("storage", {})], STORAGES) == [HOME, BLOB]
    assert job_storages([("teamwise_storage", {"storageConfigNames": []})], STORAGES) == [HOME, BLOB]
    assert job_storages([("ssh", {"storages": [{"name": "team"}]})], STORAGES) == []
    assert job_storages([], STORAGES) == []


def test_a_storage_plugin_naming_storages_mounts_those() -> None:
    assert job_storages([("storage", {"storages": [{"name": "team"}, "x", {"name": 3}]})], STORAGES) == [TEAM]
    assert job_storages([("teamwise_storage", {"storageConfigNames": ["mounted", 7, "team"]})], STORAGES) == [
        MOUNTED,
        TEAM,
    ]
    assert job_storages([("storage", {"storages": []})], STORAGES) == []
    assert job_storages(
        [("storage", {"storages": [{"name": "team"}]}), ("teamwise_storage", {})], STORAGES
    ) == [TEAM, HOME, BLOB]


def test_storages_a_user_may_not_use_are_named_with_those_they_may() -> None:
    plugins = [
        ("storage", {"storages": [{"name": "zeta"}, {"name": "team"}, {"name": "alpha"}, {"name": "zeta"}]})
    ]
    with pytest.raises(StorageRefusedError) as caught:
        job_storages(plugins, [TEAM, HOME])
    assert caught.value.refused == ["alpha", "zeta"]
    assert caught.value.usable == ["home", "team"]
    assert (
        str(caught.value) == "storages ['alpha', 'zeta'] are not usable; usable storages are ['home', 'team']"
    )
    with pytest.raises(StorageRefusedError) as caught:
        job_storages([("storage", {"storageConfigNames": ["team"]})], [])
    assert str(caught.value) == "storages ['team'] are not usable; usable storages are none"
