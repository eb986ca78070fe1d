"""POST /v1/extract: chat messages in, events and keyed facts written (service/extraction)."""

from __future__ import annotations

from collections.abc import Awaitable

from litestar import Controller, Response
from litestar.openapi.datastructures import ResponseSpec

from service.api.deps import ERRORS, Deps, RouteDeps, in_key_project
from service.api.memory import IdempotencyKey, batch_response, batch_write, run_batch
from service.errors import error_code, response_spec
from service.extraction import extractor
from service.memory.idempotency import Outcome
from service.structs import ExtractRequest, ExtractResponse


def _spec(*codes: tuple[int, str], prefix: str = "") -> ResponseSpec:
    return response_spec([error_code(status, code) for status, code in codes], prefix)


EXTRACT_ERRORS = {
    **ERRORS,
    200: ResponseSpec(
        data_container=ExtractResponse,
        generate_examples=False,
        description="A dry run (`write: false`): what would be written; nothing was.",
    ),
    502: _spec((502, "extractor_error")),
    503: _spec(
        (503, "unavailable"),
        prefix="unavailable: extraction not configured (`details.setting` names the missing "
        "HAKI_EXTRACT_* setting); ",
    ),
    504: _spec((504, "extractor_timeout")),
}


class ExtractController(Controller):
    path = "/v1/extract"
    tags = ["extract"]

    @batch_write(
        "Turn chat messages into events and keyed facts",
        "Stores each message as an event (`role: content`) and asks the chat model at "
        "HAKI_EXTRACT_BASE_URL (HAKI_EXTRACT_MODEL) which durable facts the messages state, given "
        "the scope's active facts and their keys (keyed first, then the newest, at most 100). The "
        "answer is checked, then written like POST /v1/facts: keys open conflicts, `supersedes` "
        "replaces, each fact's `source_event_id` is its message's event. Proposals Haki refuses "
        "are listed in `refused` with their reason. Events and facts are written in one "
        "transaction. `write: false` is a dry run (200): nothing is written. The quality of the "
        "facts depends on the model. Idempotency-Key works as on POST /v1/facts when writing.",
        EXTRACT_ERRORS,
    )
    async def extract(
        self, data: ExtractRequest, deps: Deps, idempotency_key: IdempotencyKey = None
    ) -> Response[ExtractResponse]:
        return batch_response(await post_extract(deps, data, idempotency_key))


async def post_extract(
    deps: RouteDeps, data: ExtractRequest, idempotency_key: str | None = None
) -> Outcome[ExtractResponse]:
    """The route's work, for the route and the `remember_messages` MCP tool: a dry run answers
    200 and writes nothing; a write runs like POST /v1/facts."""
    data = in_key_project(data, deps.principal)

    def prepare() -> Awaitable[extractor.Plan]:
        return extractor.prepare(deps.lease, deps.embedder, deps.settings, deps.principal, data)

    if not data.write:
        plan = await prepare()  # before deps.conn is read: the model's wait lends another one
        return Outcome(body=await extractor.dry_run(deps.conn, plan), status_code=200, replayed=False)
    return await run_batch(
        deps,
        data,
        idempotency_key,
        route="POST /v1/extract",
        response_type=ExtractResponse,
        prepare=prepare,
        write=lambda plan: extractor.store(deps.conn, plan),
    )
