"""What machine a benchmark ran on, for the reports (docs/performance.md, docs/quality.md)."""

from __future__ import annotations

import contextlib
import os
import platform
from pathlib import Path


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, else what `platform` knows."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def cores_and_ram() -> str:
    """'<model>, N cores, M GiB RAM' (RAM left out where /proc/meminfo is missing)."""
    mem = ""
    with contextlib.suppress(OSError):
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kb / 2**20:.0f} GiB RAM"
    return f"{cpu_model()}, {os.cpu_count()} cores{mem}"
