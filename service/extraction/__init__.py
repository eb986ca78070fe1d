"""POST /v1/extract: chat messages to keyed facts, through an OpenAI-compatible chat model."""
