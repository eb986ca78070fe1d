"""The API docs pages, /docs and /docs/swagger, served with nothing from another host.

Litestar's render plugins load their UI from CDNs (jsdelivr, unpkg, Google Fonts), so the pages
rendered blank offline. Here Swagger UI's assets come from the PyPI package
`swagger-ui-py` (pinned in pyproject.toml; Swagger UI 5.24.2, which reads OpenAPI 3.1) and the
service serves them itself under /docs/assets/. The page's own script is one of those assets too,
so the page's Content-Security-Policy allows scripts, styles, images and fetches from the service
only: a browser refuses anything else even if an asset asked for it.
"""

from __future__ import annotations

from html import escape
from importlib import resources
from typing import Any, Final

from litestar import Request, Response, Router, get
from litestar.exceptions import NotFoundException
from litestar.openapi.plugins import OpenAPIRenderPlugin

DOCS_PATH: Final = "/docs"
ASSETS_PATH: Final = f"{DOCS_PATH}/assets"
# Swagger UI's own files, from the installed package, served as they are.
_SWAGGER_UI: Final = resources.files("swagger_ui") / "static"
_VENDORED: Final = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "favicon-32x32.png": "image/png",
}
# Starts Swagger UI on the document named by the container's data-url. A file, not an inline
# script, so the CSP needs no 'unsafe-inline' for scripts. The key typed into "Authorize" stays
# in the page: persistAuthorization off keeps it out of localStorage.
_INIT_JS: Final = b"""\
"use strict";
window.addEventListener("DOMContentLoaded", function () {
  var root = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: root.dataset.url,
    domNode: root,
    deepLinking: true,
    validatorUrl: null,
    persistAuthorization: false,
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
  });
});
"""
_ASSETS: Final = {
    **{name: ((_SWAGGER_UI / name).read_bytes(), media) for name, media in _VENDORED.items()},
    "haki-swagger-init.js": (_INIT_JS, "text/javascript"),
}
# Swagger UI styles its elements inline and draws icons as data: SVGs; the spec is fetched from
# the service. Nothing may come from elsewhere.
DOCS_CSP: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "connect-src 'self'; font-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)
_DOCS_HEADERS: Final = {
    "Content-Security-Policy": DOCS_CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


class OfflineSwaggerRenderPlugin(OpenAPIRenderPlugin):
    """Swagger UI on the service's own copy of its assets (see the module docstring)."""

    def __init__(self, path: str | list[str] = "/swagger") -> None:
        favicon = f"<link rel='icon' type='image/png' href='{ASSETS_PATH}/favicon-32x32.png'>"
        super().__init__(path=path, favicon=favicon)

    def render(self, request: Request[Any, Any, Any], openapi_schema: dict[str, Any]) -> bytes:
        title = escape(str(openapi_schema.get("info", {}).get("title", "API")))
        spec_url = escape(self.get_openapi_json_route(request), quote=True)
        return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} API</title>
{self.favicon}
<link rel="stylesheet" href="{ASSETS_PATH}/swagger-ui.css">
<script src="{ASSETS_PATH}/swagger-ui-bundle.js"></script>
<script src="{ASSETS_PATH}/haki-swagger-init.js"></script>
</head>
<body>
<div id="swagger-ui" data-url="{spec_url}"></div>
</body>
</html>
""".encode()


@get("/assets/{name:str}", include_in_schema=False, sync_to_thread=False)
def docs_asset(name: str) -> Response[bytes]:
    """One of the docs UI's files; anything else is a 404 (no path reaches the disk)."""
    asset = _ASSETS.get(name)
    if asset is None:
        raise NotFoundException(f"no docs asset {name!r}")
    body, media_type = asset
    return Response(
        body,
        media_type=media_type,
        headers={"Cache-Control": "public, max-age=3600"},
    )


def docs_router() -> Router:
    """The router under /docs: Litestar adds the docs pages and /docs/openapi.json to it
    (OpenAPIConfig.openapi_router); it brings the assets, and the CSP on every answer."""
    return Router(
        DOCS_PATH,
        route_handlers=[docs_asset],
        response_headers=_DOCS_HEADERS,
        include_in_schema=False,
    )
