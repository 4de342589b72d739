"""Where llama.cpp's log goes: one process-wide switch, silent unless verbose.

llama.cpp writes a line per tensor while quantizing and dozens while loading a model. Both
the quantizer and the runtime route that log through here, so every command behaves the same
way: quiet by default, the full log with `--verbose`.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import llama_cpp

_lock = threading.Lock()
_installed = False
_verbose = False
_captures: list[list[str]] = []


@llama_cpp.llama_log_callback
def _log_callback(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    message = text.decode("utf-8", errors="replace")
    for lines in _captures:
        lines.append(message)
    if _verbose:
        sys.stderr.write(message)


@contextmanager
def capture_llama_log() -> Iterator[list[str]]:
    """Collect llama.cpp's log messages while inside (e.g. the buffer sizes it allocates),
    whether or not they are shown."""
    lines: list[str] = []
    _captures.append(lines)
    try:
        yield lines
    finally:
        _captures.remove(lines)


def route_llama_log(*, verbose: bool) -> None:
    """Send llama.cpp's log to stderr when `verbose`, else drop it (for this whole process)."""
    global _installed, _verbose
    with _lock:
        _verbose = verbose
        if not _installed:
            llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))
            _installed = True
