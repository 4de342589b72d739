"""The parent's side of the SQL worker (sql_worker.py): send a request, wait at most so long.

A statement that has not answered by its deadline is ended by killing the worker (SIGKILL
cannot be ignored, whatever SQLite is doing), and a fresh worker is started at once; it opens
the database while the caller reads the error, so the next call finds it ready. `interrupt()`
kills the worker too, which is what makes Ctrl-C stop a statement at once.
"""

from __future__ import annotations

import marshal
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

WORKER_SCRIPT = Path(__file__).with_name("sql_worker.py")
START_WAIT_S = 30.0  # starting Python and opening the file: generous, a loaded machine is slow


class WorkerTimeout(Exception):
    """The worker did not answer in time; it was killed and restarted."""


class WorkerInterrupted(Exception):
    """`interrupt()` stopped the request; the worker was restarted."""


class WorkerDied(Exception):
    """The worker ended by itself (out of memory, a crash); it was restarted."""


class StatementRunner:
    """One worker process for one database; requests are serialized by the caller."""

    def __init__(self, uri: str, *, memory_limit_bytes: int) -> None:
        self.uri = uri
        self.memory_limit_bytes = memory_limit_bytes
        self._proc: subprocess.Popen | None = None
        self._open_pending = False
        self._busy = False
        self._interrupted = False
        self._closed = False
        self._start()

    # -- process life ----------------------------------------------------------------------

    def _start(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-E", "-s", "-S", str(WORKER_SCRIPT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            bufsize=0,
            close_fds=True,
        )
        self._send(("open", self.uri, self.memory_limit_bytes))
        self._open_pending = True

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            proc.kill()
        except OSError:
            pass
        for stream in (proc.stdin, proc.stdout):
            if stream is None:  # both are pipes; typed as optional
                continue
            try:
                stream.close()
            except OSError:
                pass
        proc.wait()

    def _restart(self) -> None:
        self._kill()
        if not self._closed:
            self._start()

    def close(self) -> None:
        self._closed = True
        self._kill()

    def interrupt(self) -> None:
        """Stop the running request now (safe from a signal handler or another thread)."""
        self._interrupted = True
        proc = self._proc
        if self._busy and proc is not None:
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except OSError:
                pass

    # -- requests --------------------------------------------------------------------------

    def open_reply(self) -> tuple:
        """The worker's answer to opening the database (waited for once per start)."""
        if self._proc is None:
            self._start()
        self._busy, self._interrupted = True, False
        try:
            reply = self._receive(time.monotonic() + START_WAIT_S)
        except (WorkerTimeout, WorkerDied, WorkerInterrupted):
            self._restart()
            raise
        finally:
            self._busy = False
        self._open_pending = False
        return reply

    def request(self, payload: tuple, wait_s: float) -> tuple:
        """Send one request and return the reply, or raise when it takes longer than `wait_s`."""
        if self._closed:
            raise WorkerDied("closed")
        if self._proc is None or self._open_pending:
            reply = self.open_reply()
            if reply[0] != "ok":
                return reply
        self._busy, self._interrupted = True, False
        try:
            self._send(payload)
            return self._receive(time.monotonic() + wait_s)
        except BrokenPipeError:
            self._restart()
            raise (WorkerInterrupted if self._interrupted else WorkerDied)("worker gone") from None
        except (WorkerTimeout, WorkerDied, WorkerInterrupted):
            self._restart()
            raise
        finally:
            self._busy = False

    def _send(self, payload: tuple) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        data = marshal.dumps(payload)
        data = len(data).to_bytes(4, "little") + data
        fd = self._proc.stdin.fileno()
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]

    def _receive(self, deadline: float) -> tuple:
        header = self._read_exact(4, deadline)
        return marshal.loads(self._read_exact(int.from_bytes(header, "little"), deadline))

    def _read_exact(self, n: int, deadline: float) -> bytes:
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        chunks: list[bytes] = []
        left = n
        while left:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WorkerTimeout("no answer in time")
            if not poller.poll(remaining * 1000):
                continue
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                raise (WorkerInterrupted if self._interrupted else WorkerDied)("worker ended")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
