"""Every route resolves its dependencies one at a time.

Litestar groups a route's dependencies by depth and resolves a group of two or more in an anyio
task group: a task each, about 50 us a request for the four trivial ones every JSON route used
to start with (the connection, the settings, the standby bookkeeping, the embedder). A group of
one is awaited in place. So the settings, the bookkeeping and the embedder are read from the
app's state by the dependency that needs them (service/api/deps.py `provide_deps`), and a
route's dependencies form a chain. A dependency added beside another fails here, naming both.
"""

from __future__ import annotations

from litestar.routes import HTTPRoute

from service.app import create_app
from service.embedding.embedder import HashEmbedder
from service.settings import Settings


def test_no_route_resolves_two_dependencies_at_once() -> None:
    app = create_app(Settings(embed_provider="hash"), pool=object(), embedder=HashEmbedder())
    chains: dict[str, list[list[str]]] = {}
    for route in app.routes:
        if not isinstance(route, HTTPRoute):
            continue
        for method, (_, kwargs_model) in route.route_handler_map.items():
            batches = [sorted(d.key for d in batch) for batch in kwargs_model.dependency_batches]
            chains[f"{method} {route.path}"] = batches
    side_by_side = {route: batches for route, batches in chains.items() if any(len(b) > 1 for b in batches)}
    assert not side_by_side, side_by_side
    # The check sees the routes that matter: the context call's chain, from the connection to `deps`.
    assert chains["POST /v1/context"] == [["conn"], ["key"], ["principal"], ["deps"]]
    assert chains["GET /v1/facts"] == [["conn"], ["key"], ["principal"], ["deps"], ["project_id"]]
