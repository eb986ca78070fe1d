"""scripts/setup.sh says which torch build it is about to download, before it
downloads it (scripts/install_plan.py reads pip's dry-run report)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from tests.helpers.server import REPO

PLAN = REPO / "scripts" / "install_plan.py"


def item(name: str, version: str, url: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "version": version}, "download_info": {"url": url}}


def plan(report: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(PLAN)], input=json.dumps(report), capture_output=True, text=True, check=False
    )


@pytest.mark.integration
def test_the_cuda_build_from_pypi_is_announced_with_its_size_and_the_alternative() -> None:
    pypi = "https://files.pythonhosted.org/packages/xx/"
    done = plan(
        {
            "install": [
                item("torch", "2.13.0", pypi + "torch-2.13.0-cp311-cp311-manylinux_2_28_x86_64.whl"),
                item("nvidia-cublas", "13.1.1.3", pypi + "nvidia_cublas.whl"),
                item("triton", "3.7.1", pypi + "triton.whl"),
                item("numpy", "2.3.0", pypi + "numpy.whl"),
            ]
        }
    )
    assert done.returncode == 0, done.stderr
    assert "torch 2.13.0: the CUDA build, from files.pythonhosted.org" in done.stderr
    assert "nvidia-cublas, triton" in done.stderr and "2.7 GB" in done.stderr
    assert "TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu bash scripts/setup.sh" in done.stderr


@pytest.mark.integration
def test_a_cpu_build_or_an_installed_torch_is_said_to_be_small() -> None:
    done = plan({"install": [item("torch", "2.13.0+cpu", "file:///opt/wheels/torch-2.13.0+cpu.whl")]})
    assert "torch 2.13.0+cpu: the CPU build, from a local file" in done.stderr
    assert "GB" not in done.stderr
    done = plan({"install": [item("haki", "0.1.0", "file:///work/haki")]})
    assert "torch: already installed" in done.stderr


def test_setup_prints_the_plan_before_installing() -> None:
    script = (REPO / "scripts" / "setup.sh").read_text()
    dry_run = script.index("--dry-run --report -")
    assert "scripts/install_plan.py" in script[dry_run : dry_run + 200]
    assert dry_run < script.index("pip install --quiet -e '.[dev]'")
    assert "TORCH_INDEX_URL" in script
