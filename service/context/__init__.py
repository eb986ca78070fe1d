"""The Context Assembler: POST /v1/context, GET /v1/inspect/{trace_id}, GET /v1/stats/overview."""
