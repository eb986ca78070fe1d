"""Prints the OpenAPI document Haki serves at /docs/openapi.json, built in-process (no server,
no database): the source of the TypeScript SDK's generated types (sdk/typescript/openapi.json).

    .venv/bin/python scripts/dump_openapi.py > sdk/typescript/openapi.json

`just ts-types` runs this and the type generator in one go.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from service.app import create_app
from service.embedding.embedder import HashEmbedder
from service.settings import Settings


def openapi_document() -> dict[str, Any]:
    # The document depends on the routes and Structs only; the pool and embedder are never used.
    app = create_app(Settings(embed_provider="hash"), pool=object(), embedder=HashEmbedder())
    schema: dict[str, Any] = app.openapi_schema.to_schema()
    # Through JSON and back: the served document is JSON, so compare like with like.
    document: dict[str, Any] = json.loads(json.dumps(schema))
    return document


def render_document(document: dict[str, Any]) -> str:
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"


def main() -> None:
    sys.stdout.write(render_document(openapi_document()))


if __name__ == "__main__":
    main()
