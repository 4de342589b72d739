"""Termination signals get the same clean-up as Ctrl-C.

A service manager, a shutdown or `kill` sends SIGTERM (a closed terminal, SIGHUP). Python's
default for those ends the process on the spot, so `finally` blocks never run and a half-written
`.part` file stays behind. Here they raise `Terminated`, a KeyboardInterrupt, so every clean-up
written for Ctrl-C (atomic_output removing its temporary file, child processes stopped) runs
for them too. A second signal during the clean-up is ignored; SIGKILL still ends the process.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


class Terminated(KeyboardInterrupt):
    """The process got a termination signal; `signum` says which."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"terminated by {signal.Signals(signum).name}")
        self.signum = signum


def _raise_terminated(signum: int, _frame: object) -> None:
    for other in SIGNALS:
        signal.signal(other, signal.SIG_IGN)  # let the clean-up finish
    raise Terminated(signum)


@contextmanager
def termination_cleans_up() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise `Terminated` (main thread only; elsewhere a
    no-op). The previous handlers come back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _raise_terminated) for signum in SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


_DEFERRABLE = (signal.SIGINT, *SIGNALS)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Hold Ctrl-C and termination signals back for the block (e.g. creating a temporary file,
    starting a child process), so nothing is made that the clean-up cannot see; a signal that
    came meanwhile takes effect as the block ends. Python handlers are swapped rather than the
    signal mask blocked: another thread (tqdm's monitor, llama.cpp's) would still take it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    previous = {signum: signal.signal(signum, lambda n, _f: pending.append(n)) for signum in _DEFERRABLE}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if pending:
            first = pending[0]
            handler = previous[first]
            if callable(handler):
                handler(first, None)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(first)
