"""What the GPU check's machine is: nvidia-smi's card and memory, the CPU, llama.cpp's backend.

Shared by benchmarks/gpu/check.py (the run's header and the speed rows' memory) and
benchmarks/gpu/parallel.py (the peak memory of several episodes at once); a module of its own so
that neither imports the other's measurements. Every description is best-effort: a missing
nvidia-smi or lscpu gives None, never an error.
"""

from __future__ import annotations

import os
import platform
import subprocess


def sh(cmd: list[str], timeout: float = 30) -> str | None:
    """A command's stdout, or None when it is missing or fails (a description is never fatal)."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def gpu_memory_mib(pid: int | None = None) -> float | None:
    """GPU memory held by process `pid` (nvidia-smi's compute apps), or used on the whole card
    when `pid` is None; None without nvidia-smi."""
    if pid is None:
        out = sh(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"])
        return float(out.splitlines()[0]) if out else None
    out = sh(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"])
    if out is None:
        return None
    for line in out.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 2 and fields[0] == str(pid):
            return float(fields[1])
    return 0.0


def machine_description() -> dict:
    """The card (name, driver, memory, compute capability), the CPU beside it, Python and nvcc."""
    gpu = sh(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap", "--format=csv,noheader"])
    cpu = next(
        (line.split(":", 1)[1].strip() for line in (sh(["lscpu"]) or "").splitlines() if line.startswith("Model name")),
        platform.processor(),
    )
    return {
        "gpu": gpu,
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "nvcc": (sh(["nvcc", "--version"]) or "").splitlines()[-1:] or None,
        "gpu_memory_used_before_mib": gpu_memory_mib(),
    }


def child_machine(_cfg: dict) -> dict:
    """llama.cpp's view of the machine (run in a child: loading the backend may crash)."""
    import llama_cpp

    from edge_sql.runtime.llama.backend import gpu_backend_name, init_backend

    init_backend()
    return {
        "gpu_backend": gpu_backend_name(),
        "supports_gpu_offload": bool(llama_cpp.llama_supports_gpu_offload()),
        "llama_system_info": llama_cpp.llama_print_system_info().decode(errors="replace").strip(),
        "llama_cpp_python": llama_cpp.__version__,
    }
