"""A scope id (project id, subject id, a fact's key) is 1..200 characters without NUL, a rule
written once, in service/scope_id.py (docs/spec/api.md, limits)."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest

from service.constants import MAX_SCOPE_CHARS
from service.scope_id import ScopeId, scope_id_problem

SERVICE = Path(__file__).resolve().parents[1] / "service"
HOME = {SERVICE / "scope_id.py"}

# Ways the rule used to be spelled out again: the constant itself, the NUL pattern, and a length
# compared with 200.
RESPELLINGS = {
    "MAX_SCOPE_CHARS": re.compile(r"\bMAX_SCOPE_CHARS\b"),
    "the NUL pattern": re.compile(r"\[\^\\x00\]"),
    "a length against 200": re.compile(r"len\([^()]*\)\s*[<>]=?\s*200\b|\b200\s*[<>]=?\s*len\("),
}


def test_no_other_module_spells_the_rule_out() -> None:
    found = [
        f"{path.relative_to(SERVICE.parent)}:{n}: {what}: {line.strip()}"
        for path in sorted(SERVICE.rglob("*.py"))
        if path not in HOME
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for what, pattern in RESPELLINGS.items()
        if pattern.search(line)
        # constants.py names the number; every rule that uses it lives in scope_id.py.
        and not (path.name == "constants.py" and what == "MAX_SCOPE_CHARS")
    ]
    assert not found, "use service.scope_id (ScopeId, scope_id_problem) instead:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("", False),
        ("a", True),
        ("s" * MAX_SCOPE_CHARS, True),
        ("s" * (MAX_SCOPE_CHARS + 1), False),
        ("a\x00b", False),
        ("\x00", False),
        ("ü/ a b", True),
    ],
)
def test_the_plain_check_agrees_with_the_type(value: str, ok: bool) -> None:
    try:
        msgspec.convert(value, ScopeId)
        decoded = True
    except msgspec.ValidationError:
        decoded = False
    assert decoded is ok
    assert scope_id_problem(value) == (None if ok else "must be 1..200 characters without NUL")
