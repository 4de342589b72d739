"""Which machine ran a piece of bench work: its name and its hardware, as reports show them.

Every "load" record carries the description of the node that loaded the variant, so a report
made on several machines can give each node's figures separately instead of averaging them.
"""

from __future__ import annotations

import os
import platform
import socket
import sys

from edge_sql.bench.records import MachineDescription


def node_name() -> str:
    """This machine's host name (what the report calls a node)."""
    return socket.gethostname() or platform.node() or "localhost"


def cpu_model() -> str:
    """The CPU's marketing name (Linux: /proc/cpuinfo's "model name"), else what `platform` says."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            for line in info:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_description() -> MachineDescription:
    """Platform, CPU, core count, memory and the llama.cpp binding's version of this machine."""
    import llama_cpp

    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        memory = None
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_bytes": memory,
        "python": sys.version.split()[0],
        "llama_cpp_python": llama_cpp.__version__,
    }
