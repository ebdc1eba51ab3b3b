"""The arguments of ``db_query`` as the model sends them (names fixed by DESIGN.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, NonNegativeInt, WithJsonSchema

Doc = dict[str, Any]
Direction = Literal[1, -1]


class IndexOptions(BaseModel):
    unique: bool | None = None
    expireAfterSeconds: NonNegativeInt | None = None  # MongoDB's spelling
    name: str | None = None


class IndexSpec(BaseModel):
    keys: dict[str, Direction]
    options: IndexOptions | None = None


# Lean JSON schemas: the field types below are validated by pydantic, but the schema the
# model sees only says "object"/"array", which keeps every request's tool list small.
_OBJECT = WithJsonSchema({"type": "object"})
_INTEGER = WithJsonSchema({"type": "integer"})
_OBJECTS = WithJsonSchema({"type": "array", "items": {"type": "object"}})
_OBJECT_OR_OBJECTS = WithJsonSchema(
    {"anyOf": [{"type": "object"}, {"type": "array", "items": {"type": "object"}}]}
)


class DbOperation(BaseModel):
    # Arguments of db_query; the names are fixed by DESIGN.md (no docstring: it would
    # become part of the schema sent with every request).

    operation: str  # the tool's description lists them with the fields each takes
    collection: str = ""
    filter: Annotated[Doc | None, _OBJECT] = None
    data: Annotated[Doc | list[Doc] | None, _OBJECT_OR_OBJECTS] = None
    update: Annotated[Doc | list[Doc] | None, _OBJECT_OR_OBJECTS] = Field(
        None, description="update operators, or a pipeline"
    )
    pipeline: Annotated[list[Doc] | None, _OBJECTS] = None
    sort: Annotated[dict[str, Direction] | None, _OBJECT] = None
    limit: Annotated[NonNegativeInt | None, _INTEGER] = Field(
        None, description="default 50, max 200"
    )
    skip: Annotated[NonNegativeInt | None, _INTEGER] = None
    projection: Annotated[Doc | None, _OBJECT] = None
    upsert: bool | None = None
    index: Annotated[IndexSpec | None, _OBJECT] = Field(
        None,
        description='{"keys": {field: 1 or -1}, "options": {unique, expireAfterSeconds}}',
    )
