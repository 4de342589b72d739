"""Running a bench task in a child process, and reading the child's peak memory.

Each variant's episodes run in their own process so that its peak resident set size is that
variant's alone and a crash (llama.cpp aborts the process on some failures) is reported
instead of ending the bench.

Peak memory: on Linux a process's `ru_maxrss` (its own, or what `os.wait4` returns for it)
carries over the parent's peak through fork and exec, so it overstates a small child of a big
parent. The worker therefore reports its own `VmHWM` (the high-water mark of its address
space since exec) from /proc when it ends; `wait4`'s figure is kept as an upper bound for a
child that died without reporting.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from edge_sql.interrupts import signals_deferred

WORKER_MODULE = "edge_sql.bench.worker"


@dataclass(frozen=True)
class ChildOutcome:
    """How a child process ended, and `wait4`'s upper bound on its peak memory."""

    returncode: int
    maxrss_upper_bound_bytes: int

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def _maxrss_bytes(ru_maxrss: int) -> int:
    """ru_maxrss is in kilobytes on Linux and in bytes on macOS."""
    return ru_maxrss if sys.platform == "darwin" else ru_maxrss * 1024


def own_peak_rss_bytes() -> int:
    """This process's peak resident set size since exec (VmHWM), or ru_maxrss where /proc lacks it."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return _maxrss_bytes(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def run_worker(task: Mapping[str, object], work_dir: Path) -> ChildOutcome:
    """Run `python -m edge_sql.bench.worker TASK.json`; its stderr (progress) is the parent's."""
    work_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".json", dir=work_dir, delete=False, encoding="utf-8") as handle:
        json.dump(task, handle)
        task_file = Path(handle.name)
    try:
        process = None
        try:
            with signals_deferred():  # a signal inside Popen would leave the child running unseen
                process = subprocess.Popen(
                    [sys.executable, "-m", WORKER_MODULE, str(task_file)], stdin=subprocess.DEVNULL
                )
            _, status, usage = os.wait4(process.pid, 0)
        except BaseException:  # Ctrl-C or SIGTERM here: stop the child too, and let it clean up
            if process is not None:
                process.terminate()
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            raise
        process.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        return ChildOutcome(process.returncode, _maxrss_bytes(usage.ru_maxrss))
    finally:
        task_file.unlink(missing_ok=True)
