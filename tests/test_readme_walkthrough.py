"""The README's walk-through, pasted into a shell as it stands, runs through
against a real `haki serve`; its SDK quick start runs too, and the JSON it shows decodes as the
contract's Structs."""

from __future__ import annotations

import re
import shutil
import subprocess

import msgspec
import pytest

from service.structs import ContextPacket, Inspection
from tests.helpers.server import REPO, Server

README = REPO / "README.md"
FENCE = re.compile(r"^```(?P<lang>\w*)\n(?P<body>.*?)^```", re.MULTILINE | re.DOTALL)


def section(title: str) -> str:
    text = README.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def blocks(text: str, lang: str) -> list[str]:
    return [m.group("body") for m in FENCE.finditer(text) if m.group("lang") == lang]


def on_server(text: str, server: Server) -> str:
    return text.replace("localhost:8000", server.url.removeprefix("http://")).replace(
        "http://127.0.0.1:8000", server.url
    )


def test_walkthrough_has_no_placeholders_and_shows_the_resolve_body() -> None:
    shell = "\n".join(blocks(section("Walk-through with curl"), "bash"))
    assert not re.search(r"<\w+>", shell), "a placeholder cannot be pasted"
    assert "/resolve" in shell and '\\"keep\\"' in shell
    assert "midwife" in shell  # the second employer fact has its command
    assert '{"keep": [' in section("Walk-through with curl")


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("curl") is None, reason="the walk-through uses curl")
def test_walkthrough_runs_through_against_a_real_server(server: Server) -> None:
    shell = "\n".join(blocks(section("Walk-through with curl"), "bash"))
    # Every request must succeed: a 4xx (a body the Structs refuse) fails the run.
    script = 'set -euo pipefail\ncurl() { command curl --fail-with-body "$@"; }\n' + on_server(shell, server)
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=REPO,
        env=server.env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert '"status":"degraded"' in out and "open_conflict: 2 fact(s) hidden" in out
    assert '"decision":"blocked","reason_code":"conflict_open"' in out
    assert '"status":"resolved"' in out
    # curl prints no newline after a body: the last packet is the last object from "trace_id".
    last_packet = msgspec.json.decode(out[out.rindex('{"trace_id"') :].strip(), type=ContextPacket)
    assert [f.content for f in last_packet.facts if "works as" in f.content] == [
        "Maya works as a midwife at Croix-Rousse hospital."
    ]


def test_walkthrough_json_decodes_as_the_contract_shapes() -> None:
    shown = blocks(section("Walk-through with curl"), "json")
    assert len(shown) == 2
    packet = msgspec.json.decode(shown[0], type=ContextPacket)
    inspection = msgspec.json.decode(shown[1], type=Inspection)
    assert packet.status == "ok" and inspection.status == "degraded"


@pytest.mark.integration
def test_sdk_quick_start_runs_as_written(server: Server) -> None:
    sdk = section("Python SDK")
    (console,) = blocks(sdk, "console")
    for line in console.splitlines():
        command = line.removeprefix("$ ").split("#")[0].strip()
        # Every program the quick start names exists after scripts/setup.sh, at the path given.
        program = re.sub(r"^export \w+=\$\(", "", command).split()[0]
        assert (REPO / program).is_file(), f"{program} (from {line!r}) is not there after set-up"
    api_key = server.create_key("demo")
    (quick_start, *_) = blocks(sdk, "python")
    done = subprocess.run(
        [str(REPO / ".venv/bin/python"), "-c", on_server(quick_start, server)],
        cwd=REPO,
        env={**server.env, "HAKI_API_KEY": api_key, "HAKI_BASE_URL": server.url},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0] == "<haki_memory>" and lines[-1] == "</haki_memory>"
    assert "- Alice is allergic to peanuts." in lines
