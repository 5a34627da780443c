"""What to submit to use an item: the job YAML ``GET /items/{id}/job`` answers.

A template's protocol with ``extras.submitFrom`` set to the item's id, so the platform's
``job.submitted`` tells the marketplace which item was used; a data item becomes a small job
that mounts the data through the storage plugin (or fetches the URL), marked the same way.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

import yaml

from libs.protocol.yamlsource import load_yaml
from services.marketplace.core.items import Item

DATA_IMAGE = "ubuntu:22.04"
DATA_MOUNT = "/mnt/data"


def _job_name(item: Item) -> str:
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", item.name).strip("-").lower()
    return (slug or "item")[:200]


def _data_job(item: Item) -> dict[str, Any]:
    name = f"{_job_name(item)}-data"
    plugins: list[dict[str, Any]] = []
    if item.data_type == "storage":
        config, _, path = item.data_url.partition("/")
        where = f"{DATA_MOUNT}/{path}".rstrip("/")
        # A local storage appears under the task's work dir (runtime/storage.py), a pod's at the path.
        commands = [
            f"ls -la {shlex.quote(where)} 2>/dev/null || ls -la {shlex.quote('.' + where)}",
        ]
        plugins.append(
            {
                "plugin": "teamwise_storage",
                "parameters": {"storages": [{"name": config, "mountPath": DATA_MOUNT}]},
            }
        )
    else:
        fetch = "import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], 'data')"
        commands = [f"python3 -c {shlex.quote(fetch)} {shlex.quote(item.data_url)}", "ls -la data"]
    extras: dict[str, Any] = {"submitFrom": item.id}
    if plugins:
        extras["com.microsoft.pai.runtimeplugin"] = plugins
    return {
        "protocolVersion": 2,
        "name": name,
        "type": "job",
        "prerequisites": [{"name": "image", "type": "dockerimage", "uri": DATA_IMAGE}],
        "taskRoles": {
            "main": {
                "instances": 1,
                "dockerImage": "image",
                "resourcePerInstance": {"cpu": 1, "memoryMB": 512, "gpu": 0},
                "commands": commands,
            }
        },
        "extras": extras,
    }


def job_for(item: Item) -> str:
    """The job YAML that uses ``item`` (its protocol was validated when it was written)."""
    if item.type == "data":
        doc = _data_job(item)
    else:
        loaded = load_yaml(item.protocol).data  # read as a submission reads it
        doc = dict(loaded) if isinstance(loaded, dict) else {}
        extras = doc.get("extras")
        doc["extras"] = {**(extras if isinstance(extras, dict) else {}), "submitFrom": item.id}
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)
