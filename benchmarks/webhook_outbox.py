"""What the webhook outbox costs a write (docs/performance.md, "Webhook outbox").

    .venv/bin/python -m benchmarks.webhook_outbox [--writes 200] [--batch 10]

On one scratch embedded server, three projects take the same writes through the write path
(service/memory/writes.py, hash embedder): batches of facts that each supersede the previous
batch's facts, so every fact of a batch is one change (fact.superseded). Project `none` has no
webhook, `ids` one subscribed to fact.superseded, `content` one that also asks for content. The
projects' writes alternate, batch by batch; each write is timed, and the outbox rows per change
counted.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import aiosql

from service.api.auth import Principal
from service.db import connect, init_connection
from service.db.embedded import embedded_server, embedded_url
from service.db.migrations import migrate
from service.embedding.embedder import HashEmbedder
from service.memory import writes
from service.repository import webhooks as webhooks_repo
from service.settings import Settings
from service.structs import FactIn, WriteFactsRequest

SQL = aiosql.from_path(Path(__file__).resolve().parent / "sql" / "webhook_outbox.sql", "asyncpg")
MODES = {"none": None, "ids": False, "content": True}


async def run(n_writes: int, batch: int) -> None:
    data_dir = Path(tempfile.mkdtemp(prefix="haki-outbox-"))
    settings = Settings(data_dir=data_dir, embed_provider="hash", database_url=embedded_url(data_dir))
    embedder = HashEmbedder()
    conn = await connect(settings)
    try:
        await migrate(conn)
        await init_connection(conn)
        for mode, content in MODES.items():
            if content is not None:
                await webhooks_repo.insert_webhook(
                    conn, mode, uuid.uuid4(), "http://93.184.215.14/", ["fact.superseded"], content, "s", 20
                )
        previous: dict[str, list[uuid.UUID | None]] = {mode: [None] * batch for mode in MODES}
        times: dict[str, list[float]] = {mode: [] for mode in MODES}
        for i in range(n_writes + 10):
            for mode in MODES:
                principal = Principal(project_id=mode, key_id=uuid.uuid4())
                facts = [
                    FactIn(content=f"{mode} fact {i}.{j} about the subject", supersedes=previous[mode][j])
                    for j in range(batch)
                ]
                req = WriteFactsRequest(project_id=mode, subject_id="s", facts=facts)
                prepared = await writes.prepare_facts(embedder, settings, principal, req)
                start = time.perf_counter()
                done = await writes.store_facts(conn, prepared)
                if i >= 10:  # the first writes warm the caches
                    times[mode].append((time.perf_counter() - start) * 1000)
                previous[mode] = [f.fact_id for f in done.facts]
        changes = (n_writes + 10 - 1) * batch  # the first batch supersedes nothing
        base = statistics.median(times["none"])
        print(f"{n_writes} writes of {batch} superseding facts each, per project:")
        for mode in MODES:
            rows = await SQL.bench_count_outbox_rows(conn, project_id=mode)
            p50 = statistics.median(times[mode])
            p95 = statistics.quantiles(times[mode], n=20)[18]
            print(
                f"{mode:<8} write p50 {p50:6.2f} ms  p95 {p95:6.2f} ms  ({p50 / base:4.2f}x)  "
                f"outbox rows per change {rows / changes:.2f}"
            )
    finally:
        await conn.close()
        embedded_server(data_dir).cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=200)
    parser.add_argument("--batch", type=int, default=10)
    args = parser.parse_args()
    asyncio.run(run(args.writes, args.batch))


if __name__ == "__main__":
    main()
