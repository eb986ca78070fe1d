"""The OpenAPI document says what the bodies' decoding does: a Struct that refuses unknown
fields (`forbid_unknown_fields`, every request Struct) is an object with
`additionalProperties: false`. Litestar 2's schema of a Struct leaves it out, so a body the
document validates could be a 400 `unknown field`."""

from __future__ import annotations

from typing import Any

# Litestar's own schema of a Struct (2.x, not exported): this plugin adds one keyword to it.
from litestar._openapi.schema_generation.plugins.struct import StructSchemaPlugin
from litestar.openapi.spec import Schema


class StrictStructSchemaPlugin(StructSchemaPlugin):
    """Litestar's Struct schema, closed to unknown fields when the Struct refuses them. Given to
    the app's plugins, it is asked before Litestar's own (the first plugin that takes a type)."""

    def to_openapi_schema(self, field_definition: Any, schema_creator: Any) -> Schema:
        schema: Schema = super().to_openapi_schema(field_definition, schema_creator)
        if field_definition.type_.__struct_config__.forbid_unknown_fields:
            schema.additional_properties = False
        return schema
