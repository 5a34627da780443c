"""The job YAML an item's "use" answers (``GET /items/{id}/job``): a template's protocol marked
with the item's id, or a small job that mounts or fetches a data item."""

from __future__ import annotations

from typing import Any

import yaml

from services.marketplace.core.items import Item
from services.marketplace.core.jobs import job_for

DATA_ROLE = {
    "instances": 1,
    "dockerImage": "image",
    "resourcePerInstance": {"cpu": 1, "memoryMB": 512, "gpu": 0},
}


def data_job(name: str, commands: list[str], extras: dict[str, Any]) -> dict[str, Any]:
    return {
        "protocolVersion": 2,
        "name": name,
        "type": "job",
        "prerequisites": [{"name": "image", "type": "dockerimage", "uri": "ubuntu:22.04"}],
        "taskRoles": {"main": {**DATA_ROLE, "commands": commands}},
        "extras": extras,
    }


def data_item(item_id: str, name: str, data_type: str, url: str) -> Item:
    return Item(id=item_id, name=name, author="alice", type="data", data_type=data_type, data_url=url)


def test_a_storage_data_item_becomes_a_job_mounting_its_storage() -> None:
    text = job_for(data_item("d1", " My Data! set ", "storage", "nfs/some dir/x"))
    assert yaml.safe_load(text) == data_job(
        "my-data-set-data",
        ["ls -la '/mnt/data/some dir/x' 2>/dev/null || ls -la './mnt/data/some dir/x'"],
        {
            "submitFrom": "d1",
            "com.microsoft.pai.runtimeplugin": [
                {
                    "plugin": "teamwise_storage",
                    "parameters": {"storages": [{"name": "nfs", "mountPath": "/mnt/data"}]},
                }
            ],
        },
    )
    whole = yaml.safe_load(job_for(data_item("d3", "x", "storage", "nfs")))
    assert whole["taskRoles"]["main"]["commands"] == ["ls -la /mnt/data 2>/dev/null || ls -la ./mnt/data"]


def test_a_url_data_item_becomes_a_job_fetching_it_and_the_yaml_keeps_the_protocol_s_order() -> None:
    text = job_for(data_item("d2", "!!!", "http", "https://e.x/a b"))
    fetch = "'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], '\"'\"'data'\"'\"')'"
    commands = [f"python3 -c {fetch} 'https://e.x/a b'", "ls -la data"]
    assert yaml.safe_load(text) == data_job("item-data", commands, {"submitFrom": "d2"})
    assert text.startswith("protocolVersion: 2\nname: item-data\ntype: job\n")


def test_a_data_job_s_name_is_cut_to_200_characters_before_its_suffix() -> None:
    doc = yaml.safe_load(job_for(data_item("d4", "A" * 300, "http", "https://e.x/")))
    assert doc["name"] == "a" * 200 + "-data"


def test_a_template_is_its_protocol_marked_with_the_item_s_id() -> None:
    protocol = "protocolVersion: 2\nname: 训练\nextras: {a: 1, submitFrom: old}\n"
    text = job_for(Item(id="t1", name="t", author="alice", type="template", protocol=protocol))
    assert yaml.safe_load(text) == {
        "protocolVersion": 2,
        "name": "训练",
        "extras": {"a": 1, "submitFrom": "t1"},
    }
    assert "name: 训练\n" in text  # written as the author wrote it, not escaped
    for odd in ("name: t\nextras: [1]\n", "- 1\n"):
        doc = yaml.safe_load(job_for(Item(id="t2", name="t", author="alice", type="template", protocol=odd)))
        assert doc["extras"] == {"submitFrom": "t2"}


def test_names_and_paths_ending_in_an_x_keep_it() -> None:
    doc = yaml.safe_load(job_for(data_item("d5", "BOX", "storage", "nfs/X")))
    assert doc["name"] == "box-data"
    assert doc["taskRoles"]["main"]["commands"] == ["ls -la /mnt/data/X 2>/dev/null || ls -la ./mnt/data/X"]
