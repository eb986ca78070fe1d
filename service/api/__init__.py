"""The HTTP surface: handlers (validated Struct in, one service call, Struct out), deps, body checks,
authentication, rate limits, the docs and memory-browser pages, and MCP."""
