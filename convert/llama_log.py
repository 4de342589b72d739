"""Where llama.cpp's log goes: one process-wide switch, silent unless verbose.

llama.cpp writes a line per tensor while quantizing and dozens while loading a model. Both
the quantizer and the runtime route that log through here, so every command behaves the same
way: quiet by default, the full log with `--verbose`.
"""

from __future__ import annotations

import ctypes
import sys
import threading

import llama_cpp

_lock = threading.Lock()
_installed = False
_verbose = False


@llama_cpp.llama_log_callback
def _log_callback(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    if _verbose:
        sys.stderr.write(text.decode("utf-8", errors="replace"))


def route_llama_log(*, verbose: bool) -> None:
    """Send llama.cpp's log to stderr when `verbose`, else drop it (for this whole process)."""
    global _installed, _verbose
    with _lock:
        _verbose = verbose
        if not _installed:
            llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))
            _installed = True
