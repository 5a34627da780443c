"""OpenPAI's REST API v2 reference (swagger.yaml) as JSON Schema validators for our responses.

The reference is OpenAPI 3.0: ``nullable`` is turned into a JSON Schema null type, and the
job protocol's schema (an external URL) is accepted as any value, since the protocol has its
own tests. Schemas are validated in place inside the document, so its ``#/components/...``
references resolve as written.
"""

from __future__ import annotations

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
        """Raise unless ``body`` is an error in OpenPAI's Response shape with one of its codes."""
        schema = {"$ref": f"{URN}#/components/schemas/Response"}
        jsonschema.Draft7Validator(schema, registry=self.registry).validate(body)
        assert "code" in body, body
