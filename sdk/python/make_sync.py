"""Writes `haki_client/_sync.py`, the blocking client `Haki`, from `haki_client/_async.py`.

`AsyncHaki` is the one hand-written client; `Haki` is the same code without `async` and `await`,
as unasync does it: the source is read token by token (strings and comments are left alone), the
`async` and `await` keywords are dropped, and the names below are swapped for their blocking
counterparts (`httpx.AsyncClient` -> `httpx.Client`, `asyncio.sleep` -> `time.sleep`, ...).
`tests/test_sdk.py` fails when `_sync.py` is not what this makes of `_async.py`.

    .venv/bin/python sdk/python/make_sync.py          # rewrite haki_client/_sync.py
    .venv/bin/python sdk/python/make_sync.py --check  # exit 1 when it is stale
"""

from __future__ import annotations

import argparse
import io
import sys
import tokenize
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent / "haki_client"
SOURCE = PACKAGE / "_async.py"
TARGET = PACKAGE / "_sync.py"

# asyncio name -> blocking name, wherever the name stands as code (not in strings or comments).
RENAMES = {
    "AsyncHaki": "Haki",
    "AsyncClient": "Client",
    "AsyncBaseTransport": "BaseTransport",
    "AsyncIterator": "Iterator",
    "AsyncGenerator": "Generator",  # Generator[Y, None]: its return type defaults to None
    "aclose": "close",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "aread": "read",
    "aiter_bytes": "iter_bytes",
    "asyncio": "time",  # `import asyncio` and `asyncio.sleep`
}
DROPPED = frozenset({"async", "await"})
# Prose that names the asyncio side: each must stand exactly once in _async.py.
PROSE = {
    '"""`AsyncHaki`: the asyncio client, method for method the same as `Haki`."""': (
        '"""`Haki`: the blocking client, method for method the same as `AsyncHaki`."""'
    ),
    "asyncio client of one Haki server.": "Blocking client of one Haki server.",
}
HEADER = (
    "# Generated from _async.py by sdk/python/make_sync.py: edit _async.py, then run it.\n"
    "# An async generator cannot `yield from`: its `for ...: yield` loops stay as they are.\n"
    "# ruff: noqa: UP028\n"
    "# fmt: off\n"  # as generated, not reflowed: `ruff format` would make it stale
)


def _offsets(source: str) -> list[int]:
    """Offset of the start of each line (1-based, as tokenize counts them)."""
    starts = [0, 0]
    for line in io.StringIO(source).readlines():
        starts.append(starts[-1] + len(line))
    return starts


def _tokens(source: str) -> list[tokenize.TokenInfo]:
    return list(tokenize.generate_tokens(io.StringIO(source).readline))


def render(source: str) -> str:
    """The blocking module for the asyncio module `source`."""
    for old in PROSE:
        if source.count(old) != 1:
            raise ValueError(f"make_sync: expected exactly one {old!r} in {SOURCE.name}")
    lines = _offsets(source)
    edits: list[tuple[int, int, str]] = []  # (start, end, replacement), in source order
    for token in _tokens(source):
        start = lines[token.start[0]] + token.start[1]
        end = lines[token.end[0]] + token.end[1]
        if token.type == tokenize.NAME and token.string in DROPPED:
            while source[end] == " ":  # the keyword and the space after it
                end += 1
            edits.append((start, end, ""))
        elif token.type == tokenize.NAME and token.string in RENAMES:
            edits.append((start, end, RENAMES[token.string]))
        elif token.type == tokenize.COMMENT and token.string.startswith("# noqa: ASYNC"):
            while start > 0 and source[start - 1] == " ":  # asyncio lint rules do not apply
                start -= 1
            edits.append((start, end, ""))
    out: list[str] = []
    done = 0
    for start, end, replacement in edits:
        out.append(source[done:start])
        out.append(replacement)
        done = end
    out.append(source[done:])
    result = "".join(out)
    for old, new in PROSE.items():
        result = result.replace(old, new)
    left = sorted(
        {t.string for t in _tokens(result) if t.type == tokenize.NAME and "async" in t.string.lower()}
    )
    if left:
        raise ValueError(f"make_sync: no blocking name for {', '.join(left)}: add it to RENAMES")
    return HEADER + result


def main() -> int:
    parser = argparse.ArgumentParser(description="Write haki_client/_sync.py from haki_client/_async.py.")
    parser.add_argument("--check", action="store_true", help="exit 1 when _sync.py is stale")
    args = parser.parse_args()
    expected = render(SOURCE.read_text(encoding="utf-8"))
    if args.check:
        if TARGET.read_text(encoding="utf-8") != expected:
            print(f"{TARGET} is stale: run sdk/python/make_sync.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(expected, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
