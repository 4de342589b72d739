"""`run`'s live status line: round, tokens, tok/s and elapsed time on one line of stderr.

A long generation (a small model thinking to the end of its budget takes minutes) must show
that it is alive. The line is drawn only when stderr is a terminal, redrawn in place (carriage
return, erase line), kept under what is printed above it, and erased before the answer prints,
so a pipe or a file never sees it and `--json` keeps stdout clean. The rate shows once enough
tokens were timed for it to mean something, and keys typed meanwhile are not echoed into the
line (they wait in the terminal's input for the next prompt).
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

ERASE = "\r\x1b[2K"  # carriage return, then erase the whole line
TICK_S = 1.0  # the elapsed time is redrawn this often while no event comes
RATE_AFTER_TOKENS = 16  # the first tokens are timed over a decode or two: "1 token, 1080.8 tok/s" means nothing


class StatusLine:
    """One line on `stream`, drawn only when it is a terminal. Thread-safe: episode events and
    a ticker (elapsed time during prompt evaluation and tool calls) both draw it."""

    def __init__(self, stream: TextIO | None = None, *, what: str = "working") -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = _is_terminal(self.stream)
        self.what = what
        self.round: int | None = None
        self.tokens = 0
        self.tok_s = 0.0
        self._started = time.monotonic()
        self._shown = False
        self._lock = threading.RLock()  # erase + print + redraw hold it together (`above`)
        self._done = threading.Event()
        self._ticker: threading.Thread | None = None
        self._echo: _EchoOff | None = None

    def __enter__(self) -> StatusLine:
        if self.enabled:
            self._echo = _EchoOff.start()
            self._draw()
            self._ticker = threading.Thread(target=self._tick, name="status-line", daemon=True)
            self._ticker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        if self._ticker is not None:
            self._ticker.join()
        self.erase()
        if self._echo is not None:
            self._echo.restore()

    def update(self, *, round: int | None = None, tokens: int | None = None, tok_s: float | None = None) -> None:
        """New figures from an episode event; the line is redrawn at once."""
        with self._lock:
            if round is not None:
                self.round = round
            if tokens is not None:
                self.tokens = tokens
            if tok_s is not None:
                self.tok_s = tok_s
        self._draw()

    def text(self) -> str:
        """`round 2: 340 tokens, 12.1 tok/s, 28 s` (`round 1: 3 tokens, 2 s` before the rate means
        something); before the first round (the prompt being read, or a vote, whose episodes send
        no events): `reading the question, 3 s`."""
        elapsed = time.monotonic() - self._started
        if self.round is None:
            return f"{self.what}, {elapsed:.0f} s"
        tokens = f"{self.tokens} token{'' if self.tokens == 1 else 's'}"
        rate = f", {self.tok_s:.1f} tok/s" if self.tokens >= RATE_AFTER_TOKENS and self.tok_s > 0 else ""
        return f"round {self.round}: {tokens}{rate}, {elapsed:.0f} s"

    @contextmanager
    def above(self) -> Iterator[None]:
        """Print a line above the status line: erased first, and the ticker waits until the
        caller has printed, so the two never share a line."""
        with self._lock:
            self.erase()
            yield

    def erase(self) -> None:
        """Remove the line (before anything else is printed)."""
        with self._lock:
            if self._shown:
                self.stream.write(ERASE)
                self.stream.flush()
                self._shown = False

    def _draw(self) -> None:
        if not self.enabled or self._done.is_set():
            return
        with self._lock:
            width = max(20, shutil.get_terminal_size().columns - 1)
            self.stream.write(ERASE + self.text()[:width])
            self.stream.flush()
            self._shown = True

    def _tick(self) -> None:
        while not self._done.wait(TICK_S):
            self._draw()


class _EchoOff:
    """The terminal on stdin stops echoing keys until `restore` (POSIX; elsewhere nothing
    changes): typed text would land inside the status line and be erased with it."""

    def __init__(self, fd: int, saved: list[Any]) -> None:  # Any: termios
        self.fd, self.saved = fd, saved

    @classmethod
    def start(cls) -> _EchoOff | None:
        try:
            import termios
        except ImportError:  # not POSIX
            return None
        try:
            fd = sys.stdin.fileno()
            if not os.isatty(fd):
                return None
            saved = termios.tcgetattr(fd)
            quiet = list(saved)
            quiet[3] &= ~termios.ECHO  # lflag; ICANON and ISIG stay: Ctrl-C still stops
            termios.tcsetattr(fd, termios.TCSANOW, quiet)
        except (OSError, ValueError, AttributeError, termios.error):  # no stdin, or not a terminal after all
            return None
        return cls(fd, saved)

    def restore(self) -> None:
        import termios

        try:
            termios.tcsetattr(self.fd, termios.TCSANOW, self.saved)
        except (OSError, termios.error):
            pass  # the terminal is gone


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or unusual stream
        return False
