"""Why an `ask` stops early: the caller's `should_stop`, its deadline (`timeout=`), the awaiting
task cancelled (`ask_async`) or the Agent closed with `close(cancel=True)`. One `StopWhen` per
call is the `should_stop` its episodes (and its wait for a session) read at every token; it
remembers which reason came first, so the result says "deadline" rather than "stopped by the user"."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Literal

Reason = Literal["user", "deadline", "cancelled", "closed"]
MESSAGES: dict[Reason, str] = {
    "user": "stopped by the user",
    "deadline": "stopped at the deadline: timeout={timeout:g} s passed",
    "cancelled": "stopped: the awaiting task was cancelled",
    "closed": "stopped: the Agent was closed (close(cancel=True))",
}


class StopWhen:
    """A `should_stop` made of the call's reasons to stop; `reason` is the first that fired."""

    def __init__(
        self,
        should_stop: Callable[[], bool] | None = None,
        *,
        timeout: float | None = None,
        closing: threading.Event | None = None,
    ) -> None:
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be a number of seconds above 0, got {timeout!r}")
        self.timeout = timeout
        self._deadline = time.monotonic() + timeout if timeout is not None else None
        self._should_stop = should_stop
        self._closing = closing
        self._cancelled = threading.Event()
        self.reason: Reason | None = None

    def cancel(self) -> None:
        """Stop at the next token (the awaiting task was cancelled)."""
        self._cancelled.set()

    def __call__(self) -> bool:
        if self.reason is None:
            self.reason = self._fired()
        return self.reason is not None

    def _fired(self) -> Reason | None:
        if self._cancelled.is_set():
            return "cancelled"
        if self._closing is not None and self._closing.is_set():
            return "closed"
        if self._deadline is not None and time.monotonic() >= self._deadline:
            return "deadline"
        if self._should_stop is not None and self._should_stop():
            return "user"
        return None

    def message(self) -> str:
        """What a stopped result's `error` says (the user's words when nothing else fired)."""
        return MESSAGES[self.reason or "user"].format(timeout=self.timeout or 0)
