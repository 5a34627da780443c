"""The event catalog: the JSON Schema of every event, the document external subscribers read.

`python -m libs.protocol.catalog` rewrites events.schema.json beside this file; a test fails
when the committed file and the models drift apart.
"""

from __future__ import annotations

import json
from pathlib import Path

from libs.protocol.events import EVENT_ADAPTER

CATALOG_PATH = Path(__file__).with_name("events.schema.json")


def catalog_schema() -> dict[str, object]:
    schema = EVENT_ADAPTER.json_schema(mode="serialization")
    schema["title"] = "pai lifecycle events"
    schema["description"] = (
        "Every event published under pai.job.<job id>.<type>, pai.node.<node id>.<type>, "
        "pai.alert.<alert id>.<type> and pai.marketplace.<item id>.<type>. Decode by the `type` "
        "field; `version` changes only when a field is removed or changes meaning."
    )
    return schema


def render_catalog() -> str:
    return json.dumps(catalog_schema(), indent=2, sort_keys=True) + "\n"
