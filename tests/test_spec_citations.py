"""The spec the code follows is in the repository (docs/spec/): every citation of it resolves.

Applied migrations are left as they were: their sha256 is recorded, so their comments keep the
paths of the day they were written.
"""

from __future__ import annotations

import re

from tests.helpers.server import REPO

CITED = re.compile(r"docs/spec/([\w.-]+\.md)")
# A spec path without its folder: what a clone cannot open.
BARE = re.compile(r"(?<![/\w])spec/[\w.-]+\.md")
FOLDERS = ("service", "queries", "tests", "benchmarks", "scripts", "sdk/python")
# Code and SQL; not the extraction prompts (model input, versioned as they stand).
SUFFIXES = {".py", ".sql", ".ts"}


def sources() -> list[tuple[str, str]]:
    found = []
    for folder in FOLDERS:
        for path in sorted((REPO / folder).rglob("*")):
            if path.suffix in SUFFIXES and path.is_file() and "node_modules" not in path.parts:
                text = path.read_text(encoding="utf-8", errors="replace")
                found.append((str(path.relative_to(REPO)), text))
    return found


def test_every_spec_citation_names_a_page_of_docs_spec() -> None:
    pages = {p.name for p in (REPO / "docs" / "spec").glob("*.md")}
    assert {"api.md", "context-assembler.md", "context-profiles.md"} <= pages
    missing = [(name, page) for name, text in sources() for page in CITED.findall(text) if page not in pages]
    assert not missing, missing


def test_no_citation_points_outside_the_repository() -> None:
    bare = [(name, m.group(0)) for name, text in sources() for m in BARE.finditer(text)]
    assert not bare, bare
