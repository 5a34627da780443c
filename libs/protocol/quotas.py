"""A virtual cluster's CPU and memory quota as JSON writes it, and what `pai vc set` asks for.

The scheduler keeps quotas beside a VC's cells (`cpu`, `memoryMB` in its virtualClusters entry,
services/scheduler/core/vc_quotas.py) and the CLI sends them in the body of PUT
/api/v2/virtual-clusters/<name>: both read and write them through these models, so the JSON
names are spelled here once.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, PlainValidator
from pydantic_core import PydanticCustomError


def _amount(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0 or value != int(value):
        raise PydanticCustomError(
            "amount", "must be a whole number, 0 or more, got {value}", {"value": repr(value)}
        )
    return int(value)


Amount = Annotated[int, PlainValidator(_amount)]


class QuotaFields(BaseModel):
    """The quota fields of a virtualClusters entry; other keys (its cells) are the scheduler's.

    A field written as null is an error, not an absent quota: `model_fields_set` tells them apart."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")

    cpu: Amount | None = None
    memory_mb: Amount | None = Field(None, alias="memoryMB")

    def document(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True)


class VcAsk(BaseModel):
    """The body of `pai vc set`: what one VC is to get; fields left out stay as they are."""

    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")

    gpus: int | None = None
    model: str | None = None
    cells: dict[str, int] | None = None
    cpu: int | None = None
    memory_mb: int | None = Field(None, alias="memoryMB")

    def body(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True)
