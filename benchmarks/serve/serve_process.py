"""Start `edge-sql serve` as a child process for a benchmark and read its port from its log.

The benchmarks that time serve (bench_serve.py, bench_serve_soak.py) start it the way a user
does, on port 0, and wait for the `listening on` line that names the port it got.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

LISTENING = re.compile(r"listening on http://\S+?:(\d+) ")
SERVE = [sys.executable, "-c", "from edge_sql.cli import main; main()", "serve"]


def start_serve(options: list[str], log_path: Path, *, timeout_s: float = 600) -> tuple[subprocess.Popen[bytes], int]:
    """`edge-sql serve OPTIONS` with stderr in `log_path`; the process and its port once it
    listens. RuntimeError with the log when it exits or does not listen within `timeout_s`."""
    log = log_path.open("w")
    process = subprocess.Popen([*SERVE, *options], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        match = LISTENING.search(log_path.read_text())
        if match:
            return process, int(match.group(1))
        if process.poll() is not None:
            break
        time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"the server did not start:\n{log_path.read_text()}")
