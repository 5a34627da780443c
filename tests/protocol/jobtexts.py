"""Small job YAMLs shared by the protocol tests."""

from __future__ import annotations

import copy
from typing import Any

import yaml

BASE_JOB: dict[str, Any] = {
    "protocolVersion": 2,
    "name": "mnist_train",
    "type": "job",
    "prerequisites": [
        {"name": "image", "type": "dockerimage", "uri": "pytorch/pytorch:2.0"},
        {"name": "mnist", "type": "data", "uri": ["https://example.com/mnist.tgz"]},
    ],
    "taskRoles": {
        "worker": {
            "instances": 2,
            "dockerImage": "image",
            "data": "mnist",
            "resourcePerInstance": {"cpu": 4, "memoryMB": 8192, "gpu": 1},
            "commands": ["python train.py"],
        }
    },
}


def job(**changes: Any) -> dict[str, Any]:
    """A copy of the base job with top-level keys replaced (None deletes the key)."""
    result = copy.deepcopy(BASE_JOB)
    for key, value in changes.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = value
    return result


def to_yaml(data: object) -> str:
    return yaml.safe_dump(data, sort_keys=False)
