"""What every benchmark script says about the machine it ran on, and how it writes its results file.

Why one module: a figure means nothing without its CPU (AMX or not, how many cores, how busy),
and the scripts each had their own `machine()` that said different things. The line and the
detail block here are the same in every results file; `edge_sql.bench.machine` is the product's
own description (the bench's load records), which these build on.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

from edge_sql.bench.machine import cpu_model


def has_amx() -> bool:
    """Whether the CPU has AMX tiles (llama.cpp then refuses repacked weights and runs its AMX kernels)."""
    try:
        return "amx" in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def machine_line() -> str:
    """One line for a report's heading: CPU, AMX, CPUs visible, Python, the load average now."""
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"{cpu_model()} ({'AMX' if has_amx() else 'no AMX'}), {os.cpu_count()} CPUs visible, "
        f"Python {platform.python_version()}, load average at start {load}"
    )


def machine_detail(lscpu_lines: int = 20) -> str:
    """The long form, for a report's Machine section: `lscpu | head`, `free -g`, llama.cpp's build."""

    def run(argv: list[str]) -> str:
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=20).stdout.rstrip()
        except (OSError, subprocess.SubprocessError) as exc:  # a description, never fatal
            return f"({' '.join(argv)}: {exc})"

    import llama_cpp

    lscpu = "\n".join(run(["lscpu"]).splitlines()[:lscpu_lines])
    return "\n".join(
        [
            f"$ lscpu | head -{lscpu_lines}",
            lscpu,
            "",
            "$ free -g",
            run(["free", "-g"]),
            "",
            f"llama-cpp-python {llama_cpp.__version__}, Python {platform.python_version()}, {platform.platform()}",
            "llama.cpp system info: " + llama_cpp.llama_print_system_info().decode(errors="replace").strip(),
            f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        ]
    )


def write_results(path: Path, text: str) -> Path:
    """Write a results file (Markdown or JSON text), its folder made first, and say where it went."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text if text.endswith("\n") else text + "\n", encoding="utf-8")
    print(f"wrote {path}", file=sys.stderr)
    return path
