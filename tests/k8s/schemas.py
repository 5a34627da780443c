"""Offline checks of Kubernetes objects against the schemas the official client is generated from.

The kubernetes package carries one model class per schema (V1Deployment, V1Container, ...), with
each field's JSON name and type. Walking an object through those classes finds unknown fields
(a typo, a field at the wrong level) and wrong types; deserialising it finds missing required
fields. kubernetes-validate, where installed, adds the full JSON Schema check on top.
"""

from __future__ import annotations

import json
import re
from typing import Any

from kubernetes import client

_LIST = re.compile(r"^[Ll]ist\[(.+)\]$")
_DICT = re.compile(r"^(?:dict\(str, (.+)\)|Dict\[str, (.+)\])$")
_SCALARS: dict[str, tuple[type, ...]] = {
    "str": (str,),
    "int": (int,),
    "bool": (bool,),
    "float": (int, float),
    "object": (object,),
    "datetime": (str,),
    "date": (str,),
}


def model_name(obj: dict[str, Any]) -> str:
    version = str(obj["apiVersion"]).rsplit("/", 1)[-1]
    return f"{version[0].upper()}{version[1:]}{obj['kind']}"


def problems(data: Any, type_name: str, path: str = "") -> list[str]:
    """Every field of `data` the schema `type_name` does not have, or has with another type."""
    if (m := _LIST.match(type_name)) is not None:
        if not isinstance(data, list):
            return [f"{path}: expected a list"]
        return [p for i, item in enumerate(data) for p in problems(item, m.group(1), f"{path}[{i}]")]
    if (m := _DICT.match(type_name)) is not None:
        if not isinstance(data, dict):
            return [f"{path}: expected a map"]
        inner = m.group(1) or m.group(2)
        return [p for k, v in data.items() for p in problems(v, inner, f"{path}.{k}")]
    if type_name in _SCALARS:
        ok = isinstance(data, _SCALARS[type_name]) and not (type_name == "int" and isinstance(data, bool))
        return [] if ok else [f"{path}: expected {type_name}, got {type(data).__name__} {data!r}"]
    cls = getattr(client, type_name)
    if not isinstance(data, dict):
        return [f"{path}: expected a {type_name} map"]
    by_json = {json_name: attr for attr, json_name in cls.attribute_map.items()}
    found: list[str] = []
    for key, value in data.items():
        if key not in by_json:
            found.append(f"{path}.{key}: no such field in {type_name}")
        elif value is not None:
            found += problems(value, cls.openapi_types[by_json[key]], f"{path}.{key}")
    return found


def check(obj: dict[str, Any]) -> list[str]:
    """Unknown or mistyped fields, and missing required ones, of a whole object."""
    name = model_name(obj)
    found = problems(obj, name, f"{obj['kind']}/{obj.get('metadata', {}).get('name')}")
    try:
        client.ApiClient().deserialize(json.dumps(obj), name, "application/json")
    except ValueError as exc:
        found.append(f"{obj['kind']}: {exc}")
    return found
