"""OpenPAI's REST API v2 reference (swagger.yaml) as JSON Schema validators for our responses.

The reference is OpenAPI 3.0: ``nullable`` is turned into a JSON Schema null type, and the
job protocol's schema (an external URL) is accepted as any value, since the protocol has its
own tests. Schemas are validated in place inside the document, so its ``#/components/...``
references resolve as written.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import yaml
from referencing import Registry
from referencing.jsonschema import DRAFT7

from tests.support.anchors import anchor

SWAGGER_PARTS = ("openpai", "rest-api", "swagger.yaml")
SWAGGER = anchor(*SWAGGER_PARTS)
URN = "urn:openpai-swagger"


def _as_json_schema(node: Any) -> Any:
    if isinstance(node, list):
        return [_as_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    if isinstance(node.get("$ref"), str) and not node["$ref"].startswith("#"):
        return {}
    converted = {key: _as_json_schema(value) for key, value in node.items()}
    if converted.pop("nullable", False) is True:
        if isinstance(converted.get("type"), str):
            converted["type"] = [converted["type"], "null"]
        else:
            converted = {"anyOf": [converted, {"type": "null"}]}
    return converted


def _escape(part: str) -> str:
    return part.replace("~", "~0").replace("/", "~1")


class Swagger:
    """The loaded reference: its operations and a validator per documented response."""

    def __init__(self, path: Path = SWAGGER) -> None:
        self.doc: dict[str, Any] = _as_json_schema(yaml.safe_load(path.read_text()))
        self.registry: Registry[Any] = Registry().with_resource(URN, DRAFT7.create_resource(self.doc))

    def operations(self) -> Iterator[tuple[str, str, dict[str, Any]]]:
        for path, item in self.doc["paths"].items():
            for method, operation in item.items():
                if method != "parameters":
                    yield method.upper(), path, operation

    def _pointer(self, method: str, path: str, status: int) -> tuple[str, dict[str, Any]] | None:
        pointer = f"/paths/{_escape(path)}/{method.lower()}/responses/{status}"
        response = self.doc["paths"][path][method.lower()]["responses"].get(str(status))
        if response is None:
            return None
        if "$ref" in response:
            pointer = response["$ref"][1:]
            response = self.doc
            for part in pointer.strip("/").split("/"):
                response = response[part.replace("~1", "/").replace("~0", "~")]
        return pointer, response

    def documents(self, method: str, path: str, status: int) -> bool:
        return self._pointer(method, path, status) is not None

    def validate(self, method: str, path: str, status: int, content_type: str, body: Any) -> None:
        """Raise if ``status`` is undocumented or ``body`` breaks the documented schema."""
        found = self._pointer(method, path, status)
        if found is None:
            raise AssertionError(f"{method} {path}: status {status} is not documented")
        pointer, response = found
        content = response.get("content") or {}
        if content_type not in content:
            if content:
                raise AssertionError(f"{method} {path}: {content_type} is not one of {sorted(content)}")
            return
        if "schema" not in content[content_type]:
            return
        schema = {"$ref": f"{URN}#{pointer}/content/{_escape(content_type)}/schema"}
        jsonschema.Draft7Validator(schema, registry=self.registry).validate(body)

    def validate_error(self, body: Any) -> None:
        """Raise unless ``body`` is an error in OpenPAI's Response shape with one of its codes.

        The codes are the Response schema's list and those the swagger's own error responses
        use (it documents NoStorageError, NoTagError, NoTaskError, NoTaskLogError as answers
        but leaves them out of that list).
        """
        schema = {"$ref": f"{URN}#/components/schemas/Response"}
        documented = {example["code"] for example in self.component_errors(0)}
        validator = jsonschema.Draft7Validator(schema, registry=self.registry)
        for error in validator.iter_errors(body):
            if list(error.path) == ["code"] and error.validator == "enum" and body["code"] in documented:
                continue
            raise error
        assert "code" in body, body

    def _response(self, method: str, path: str, status: int) -> dict[str, Any] | None:
        found = self._pointer(method, path, status)
        return found[1] if found is not None else None

    def examples(self, method: str, path: str, status: int) -> list[Any]:
        """The documented examples of one response (``example`` or each of ``examples``)."""
        response = self._response(method, path, status)
        if response is None:
            return []
        found = []
        for content in (response.get("content") or {}).values():
            if "example" in content:
                found.append(content["example"])
            for example in (content.get("examples") or {}).values():
                found.append(self._resolve(example).get("value"))
        return found

    def _resolve(self, node: dict[str, Any]) -> dict[str, Any]:
        while isinstance(node, dict) and "$ref" in node:
            target: Any = self.doc
            for part in node["$ref"][2:].split("/"):
                target = target[part.replace("~1", "/").replace("~0", "~")]
            node = target
        return node

    def component_errors(self, status: int) -> list[dict[str, str]]:
        """Every error example the swagger's shared responses give (for a status documented bare)."""
        del status  # the shared responses are named by code, not by status
        found = []
        for response in self.doc["components"]["responses"].values():
            for content in (response.get("content") or {}).values():
                for example in (content.get("examples") or {}).values():
                    value = self._resolve(example).get("value")
                    if isinstance(value, dict) and "code" in value:
                        found.append(value)
        return found

    def error_examples(self, method: str, path: str, status: int) -> list[dict[str, str]]:
        """The {code, message} examples documented for an error status of an operation."""
        return [e for e in self.examples(method, path, status) if isinstance(e, dict) and "code" in e]


# Misspelled fields in the swagger's examples; the schema (and we) spell them right (launchedTime).
EXAMPLE_TYPOS = frozenset({"launchedTIme"})
# Objects keyed by names (a task role, a port label), not by field names: their values compare.
KEYED_BY_NAME = frozenset({"taskRoles", "containerPorts", "usedGpusByUser", "guaranteedGpusBySkuType"})


def like_example(example: Any, body: Any, where: str = "") -> list[str]:
    """Where ``body`` differs from a documented example in field names or JSON types.

    Every field of the example must be in the body with a value of the same JSON type (null
    stands for any type on either side, integers and numbers are alike); lists compare their
    first items, objects keyed by names their first values. Fields the body adds are allowed:
    clients ignore what they do not read.
    """
    if example is None or body is None:
        return []
    if isinstance(example, dict) and where.rpartition(".")[2] in KEYED_BY_NAME:
        if not isinstance(body, dict):
            return [f"{where}: an object in the example, {type(body).__name__} here"]
        if example and body:
            return like_example(next(iter(example.values())), next(iter(body.values())), where + ".*")
        return []
    if isinstance(example, dict):
        if not isinstance(body, dict):
            return [f"{where or '.'}: an object in the example, {type(body).__name__} here"]
        problems = []
        for key, value in example.items():
            if key in EXAMPLE_TYPOS:
                continue
            if key not in body:
                problems.append(f"{where}.{key}: missing")
            else:
                problems.extend(like_example(value, body[key], f"{where}.{key}"))
        return problems
    if isinstance(example, list):
        if not isinstance(body, list):
            return [f"{where}: a list in the example, {type(body).__name__} here"]
        return like_example(example[0], body[0], f"{where}[0]") if example and body else []
    kinds = {bool: "boolean", int: "number", float: "number", str: "string"}
    if kinds.get(type(example)) != kinds.get(type(body)):
        return [f"{where}: {kinds.get(type(example))} in the example, {kinds.get(type(body))} here"]
    return []


def matches_template(template: str, message: str) -> bool:
    """Whether ``message`` is ``template`` with each ``{name}`` or ``$name`` filled in."""
    pattern = re.escape(template)
    pattern = re.sub(r"\\\{\w+\\\}|\\\$\w+", ".+", pattern)
    return re.fullmatch(pattern, message, flags=re.DOTALL) is not None
