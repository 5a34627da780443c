"""Which storages a job may mount, resolved at submission from the user's granted storages."""

from __future__ import annotations

import pytest

from services.rest.core.storages import (
    StorageRefusedError,
    granted,
    job_storages,
    mount_path,
    node_path,
    parse_storages,
)

STORAGES = parse_storages(
    [
        {"name": "home", "type": "local", "default": True, "data": {"path": "/srv/home"}},
        {
            "name": "data",
            "type": "nfs",
            "data": {"server": "nas", "path": "/export/data", "mountPath": "/data"},
        },
        {"name": "private", "type": "local", "data": {"path": "/srv/private"}},
    ]
)
USABLE = granted(STORAGES, admin=False, names=["home", "data"])


def names(plugins: list[tuple[str, dict[str, object]]]) -> list[str]:
    return [storage.name for storage in job_storages(plugins, USABLE)]


def test_a_storage_plugin_gets_the_storages_it_names_or_else_the_defaults() -> None:
    assert names([("teamwise_storage", {"storages": [{"name": "data", "mountPath": "/d"}]})]) == ["data"]
    assert names([("storage", {"storageConfigNames": ["home", "data"]})]) == ["home", "data"]
    assert names([("teamwise_storage", {})]) == ["home"]
    assert names([("ssh", {"storages": [{"name": "private"}]})]) == []  # not a storage plugin
    assert names([]) == []


def test_a_storage_the_user_may_not_use_is_refused_naming_it_and_the_usable_ones() -> None:
    with pytest.raises(StorageRefusedError) as refused:
        names([("teamwise_storage", {"storageConfigNames": ["private", "home", "nowhere"]})])
    assert refused.value.refused == ["nowhere", "private"]
    assert refused.value.usable == ["data", "home"]


def test_a_storage_is_carried_with_its_node_path_and_mount_path() -> None:
    home, data, _ = STORAGES
    assert (node_path(home), mount_path(home)) == ("/srv/home", "/mnt/home")
    assert (node_path(data), mount_path(data)) == ("/export/data", "/data")
