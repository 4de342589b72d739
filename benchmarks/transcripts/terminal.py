"""A command in a real pseudo-terminal, and what its screen shows (the REPL tests and
record_transcripts.py both drive `edge-sql run` with it).

The process gets a pty as stdin, stdout and stderr, as in a terminal window, so readline, the
kernel's `^C` echo and `isatty()` behave as they do for a user. `screen()` replays the output
the way a terminal draws it (carriage return, backspace, cursor moves, erase to the end of the
line), so a test asserts the lines a user sees rather than the bytes that drew them.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import termios
import time
from collections.abc import Sequence

COLUMNS = 500  # wide enough that no test line wraps
ESCAPE = re.compile(rb"\x1b\[([0-9;?]*)([A-Za-z@])|\x1b\][^\x07]*\x07|\x1b[=>()][0-9A-Za-z]?")


class Terminal:
    """`args` running in a new pseudo-terminal; `send` types, `wait_for` reads until text shows."""

    def __init__(self, args: Sequence[str], env: dict[str, str], *, cwd: str | os.PathLike[str] | None = None) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: the pty is its controlling terminal
            fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 50, COLUMNS, 0, 0))
            if cwd is not None:
                os.chdir(cwd)
            os.execvpe(args[0], list(args), env)
        self.raw = b""
        self.returncode: int | None = None

    def send(self, text: str) -> None:
        os.write(self.fd, text.encode())

    def wait_for(self, text: str, *, count: int = 1, timeout: float = 120.0) -> list[str]:
        """Read until `text` is on the screen `count` times; the screen's lines."""
        deadline = time.monotonic() + timeout
        while sum(line.count(text) for line in self.screen()) < count:
            if time.monotonic() > deadline or not self._read(deadline - time.monotonic()):
                raise AssertionError(f"{text!r} x{count} never showed; the screen:\n" + "\n".join(self.screen()))
        return self.screen()

    def wait_exit(self, timeout: float = 120.0) -> int:
        """Read to the end of the output; the exit status (128 + N for a signal, as a shell says)."""
        deadline = time.monotonic() + timeout
        while self._read(deadline - time.monotonic()):
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError("the command did not end; the screen:\n" + "\n".join(self.screen()))
        _, status = os.waitpid(self.pid, 0)
        os.close(self.fd)
        self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode if self.returncode >= 0 else 128 - self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            self.returncode = -signal.SIGKILL
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            os.close(self.fd)

    def _read(self, timeout: float) -> bool:
        ready, _, _ = select.select([self.fd], [], [], max(0.0, timeout))
        if not ready:
            return True
        try:
            chunk = os.read(self.fd, 65536)
        except OSError:  # the child closed the terminal
            return False
        self.raw += chunk
        return bool(chunk)

    def screen(self) -> list[str]:
        return render(self.raw)


def render(raw: bytes) -> list[str]:
    """The lines a terminal shows for `raw` (no wrapping: see COLUMNS)."""
    lines: list[list[str]] = [[]]
    column = 0
    position = 0
    text = raw.replace(b"\r\n", b"\n")
    while position < len(text):
        match = ESCAPE.match(text, position)
        if match:
            params, final = match.group(1), match.group(2)
            count = int(params) if params and params.isdigit() else 1
            line = lines[-1]
            if final == b"C":
                column += count
            elif final == b"D":
                column = max(0, column - count)
            elif final == b"K":
                del line[column:]
            elif final == b"P":
                del line[column : column + count]
            elif final == b"@":
                line[column:column] = [" "] * count
            position = match.end()
            continue
        char = chr(text[position])
        if text[position] >= 0x80:  # a UTF-8 sequence: decode it whole
            end = position + 1
            while end < len(text) and 0x80 <= text[end] < 0xC0:
                end += 1
            char = text[position:end].decode("utf-8", "replace")
            position = end
        else:
            position += 1
        line = lines[-1]
        if char == "\n":
            lines.append([])
            column = 0
        elif char == "\r":
            column = 0
        elif char == "\b":
            column = max(0, column - 1)
        elif char == "\x07" or char < " ":
            continue
        else:
            line.extend(" " * (column - len(line)))
            if column < len(line):
                line[column] = char
            else:
                line.append(char)
            column += 1
    return ["".join(line) for line in lines]
