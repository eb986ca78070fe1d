from typing import Any

from tests.helpers import bearer


async def test_write_then_read_fact(client: Any, key: str) -> None:
    r = await client.post(
        "/v1/facts",
        json={"project_id": "proj-a", "subject_id": "u1", "facts": [{"content": "Alice works at Acme"}]},
        headers=bearer(key),
    )
    assert r.status_code == 201, r.text
    fact_id = r.json()["facts"][0]["fact_id"]
    r = await client.get(f"/v1/facts/{fact_id}", headers=bearer(key))
    assert r.status_code == 200
    assert r.json()["content"] == "Alice works at Acme"
