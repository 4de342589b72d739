"""Process-wide llama.cpp setup: backend init, log routing, GPU and thread defaults."""

from __future__ import annotations

import os
import re
import threading
from typing import Self

import llama_cpp

from edge_sql.convert.llama_log import route_llama_log

_lock = threading.Lock()
_initialised = False


_BUFFER_LINE = re.compile(r"(\S+)\s+(model|KV|RS|output|compute) buffer size\s*=\s*([0-9.]+) MiB")


def buffer_sizes(log: list[str]) -> dict[str, int]:
    """Bytes llama.cpp allocated per kind, from its log: {"CPU_Mapped model": n, "CPU KV": n, ...}."""
    sizes: dict[str, int] = {}
    for match in _BUFFER_LINE.finditer("".join(log)):
        key = f"{match.group(1)} {match.group(2)}"
        sizes[key] = sizes.get(key, 0) + int(float(match.group(3)) * 1024 * 1024)
    return sizes


def init_backend(*, verbose: bool = False) -> None:
    """Initialise llama.cpp once per process and route its log (silent unless verbose)."""
    global _initialised
    with _lock:
        route_llama_log(verbose=verbose)
        if not _initialised:
            llama_cpp.llama_backend_init()
            _initialised = True


def gpu_backend_name() -> str | None:
    """Name of the GPU backend llama.cpp was built with (CUDA, Metal...), or None for CPU only."""
    if not llama_cpp.llama_supports_gpu_offload():
        return None
    info = llama_cpp.llama_print_system_info().decode("utf-8", errors="replace")
    for name in ("CUDA", "Metal", "Vulkan", "ROCm", "HIP", "SYCL", "OpenCL", "CANN", "MUSA"):
        if name.lower() in info.lower():
            return name
    return "GPU"


def repack_is_safe() -> bool:
    """Whether llama.cpp's extra weight buffers (repacked CPU matrices) are safe to enable.

    Builds with AMX tiles (`AMX_INT8 = 1`, compiled natively on a Xeon with AMX) put
    quantized weights in the AMX buffer, whose kernels in llama-cpp-python 0.3.36 die with
    SIGILL on the first multi-token batch (upstream llama.cpp PR #26954). Without AMX the
    extra buffers are llama.cpp's CPU_REPACK layouts, which are safe and decode faster.
    """
    info = llama_cpp.llama_print_system_info().decode("utf-8", errors="replace")
    return "AMX_INT8 = 1" not in info


def default_threads() -> int:
    """The CPUs this process may run on (llama.cpp's matmuls scale with cores)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


class Closing:
    """`with` support and a last-chance `close()` at garbage collection, for objects that hold
    llama.cpp memory (a session, an MTP drafter's context): subclasses define `close()`, which
    must be safe to call twice."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
