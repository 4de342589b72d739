"""Who runs what: a fast fingerprint of a model file, the llama.cpp build and the CPU.

These key the caches that are only valid for one file on one machine with one build: the
calibrated settings (`tuning`) and the saved prompt-prefix states (`prefix_state`).
"""

from __future__ import annotations

import hashlib
import os
import platform
from functools import lru_cache
from pathlib import Path

import llama_cpp

_SAMPLE_BYTES = 1 << 20
_SAMPLES = 4


def file_fingerprint(path: str | Path) -> str:
    """size + mtime + SHA-256 of four 1 MiB blocks (start, two inner points, end).

    Why not a full hash: hashing a 4 GB BF16 file costs tens of seconds on every `run`. The
    first block holds the GGUF header, metadata and tensor table, so any re-conversion or
    re-quantization changes it or the size; an in-place rewrite changes the mtime; the
    sampled inner blocks catch edits that keep both (tested: a one-byte change at the end).
    """
    path = Path(path)
    stat = path.stat()
    digest = hashlib.sha256(f"{stat.st_size}:{stat.st_mtime_ns}".encode())
    with path.open("rb") as handle:
        for i in range(_SAMPLES):
            offset = max(0, (stat.st_size - _SAMPLE_BYTES) * i // (_SAMPLES - 1))
            handle.seek(offset)
            digest.update(handle.read(_SAMPLE_BYTES))
    return digest.hexdigest()[:32]


@lru_cache(maxsize=1)
def llama_build() -> str:
    """The llama.cpp build: llama-cpp-python's version plus the CPU features it was compiled for."""
    info = llama_cpp.llama_print_system_info().decode("utf-8", errors="replace")
    return f"llama-cpp-python {llama_cpp.__version__} [{hashlib.sha256(info.encode()).hexdigest()[:12]}]"


@lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU's model name (`/proc/cpuinfo` on Linux), with the number of usable CPUs."""
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:
        n = os.cpu_count() or 1
    return f"{name} x{n}"


def physical_cores() -> int:
    """Usable CPUs counted once per physical core (SMT siblings share one), Linux sysfs; else all."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:
        return max(1, os.cpu_count() or 1)
    cores = set()
    for cpu in cpus:
        topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            cores.add(
                ((topology / "physical_package_id").read_text().strip(), (topology / "core_id").read_text().strip())
            )
        except OSError:
            return len(cpus)
    return max(1, len(cores))
