"""The Agent's sessions lent one episode at a time: `ask` may be called from any number of
threads, and each call borrows a free session for its whole episode, so at most one episode
runs on a session and closing waits for the running ones.

The calls that find every session busy wait in one queue, served first come, first served,
at most `max_waiting` of them (one more is refused with QueueFull, as `serve` refuses a request
when its queue is full); a waiting call whose `stopped()` turns True (its deadline, its
`should_stop`, its awaiting task cancelled) leaves the queue within `POLL_S`."""

from __future__ import annotations

import collections
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from edge_sql.api.agent_settings import DEFAULT_MAX_WAITING
from edge_sql.api.plan import SessionPlan
from edge_sql.errors import Cancelled, ClosedError, QueueFull
from edge_sql.runtime import PrefixCache, Session
from edge_sql.runtime.batching.sequences import SessionGroup, open_sessions
from edge_sql.runtime.llama.decode_thread import release_decode_thread

POLL_S = 0.05  # how often a waiting call looks at its `stopped` (a cancel also wakes it at once)
_pools: weakref.WeakSet[SessionPool] = weakref.WeakSet()  # the last one open closed: the decode thread ends
_pools_lock = threading.Lock()


class SessionPool:
    """The sessions of one group (`open_sessions`, `views`: its sessions in order), lent by
    `borrowed` in arrival order; `close` frees the group once every session is back."""

    def __init__(
        self, group: SessionGroup, views: list[Session], load_s: float = 0.0, max_waiting: int = DEFAULT_MAX_WAITING
    ) -> None:
        if max_waiting < 0:
            raise ValueError(f"max_waiting must be at least 0, got {max_waiting}")
        self.group, self.views, self.load_s, self.max_waiting = group, views, load_s, max_waiting
        self._free: list[Session] = list(views)
        self._waiting: collections.deque[object] = collections.deque()  # one ticket per waiting call, in order
        self._changed = threading.Condition()
        self._closed = False  # no more borrowing
        self._done = False  # the context is freed
        self._mean_s = 10.0  # a running mean of how long a session is lent, for QueueFull's retry_after_s
        with _pools_lock:
            _pools.add(self)

    @classmethod
    def open(cls, plan: SessionPlan, prefix_cache: PrefixCache, max_waiting: int = DEFAULT_MAX_WAITING) -> SessionPool:
        """The plan's sessions opened on one context (`open_sessions`) with its options; `load_s`
        is how long opening took (the model, the context)."""
        started = time.perf_counter()
        group = open_sessions(plan.model_path, plan.options, plan.sessions, prefix_cache=prefix_cache)
        load_s = time.perf_counter() - started
        return cls(group, list(group.sessions), load_s, max_waiting)

    def state(self) -> dict[str, int]:
        """Sessions running an episode, calls waiting for one, and the bounds (an app's /health)."""
        with self._changed:
            running = len(self.views) - len(self._free) if not self._done else 0
            return {
                "running": running,
                "waiting": len(self._waiting),
                "sessions": len(self.views),
                "max_waiting": self.max_waiting,
            }

    @contextmanager
    def borrowed(self, stopped: Callable[[], bool] | None = None) -> Iterator[Session]:
        """A free session for one episode, given back after it. While all are busy the call waits
        its turn (QueueFull when `max_waiting` calls already wait; Cancelled when `stopped()`
        turns True first; ClosedError once the pool is closed)."""
        with self._changed:
            if not self._closed and (not self._free or self._waiting):
                self._wait_turn(stopped)
            if self._closed:
                raise ClosedError("this Agent is closed")
            session = self._free.pop()
        started = time.monotonic()
        try:
            yield session
        finally:
            session.context.idle()  # the other episodes at once stop waiting for this one
            with self._changed:
                self._mean_s = 0.7 * self._mean_s + 0.3 * (time.monotonic() - started)
                self._free.append(session)
                self._changed.notify_all()

    def _wait_turn(self, stopped: Callable[[], bool] | None) -> None:
        """Wait (holding `_changed`) until this call is the first in line and a session is free."""
        if len(self._waiting) >= self.max_waiting:
            raise QueueFull(
                f"{len(self._waiting)} calls already wait for a session (max_waiting={self.max_waiting}); "
                "try again later",
                max(1, round(self._mean_s * (len(self._waiting) + 1) / len(self.views))),
            )
        ticket = object()
        self._waiting.append(ticket)
        try:
            while not self._closed and not (self._free and self._waiting[0] is ticket):
                if stopped is not None and stopped():
                    raise Cancelled("stopped while waiting for a free session")
                self._changed.wait(POLL_S if stopped is not None else None)
        finally:
            self._waiting.remove(ticket)
            self._changed.notify_all()  # the next in line may be served now

    def wake(self) -> None:
        """Make the waiting calls look at their `stopped` now (a cancel, a close)."""
        with self._changed:
            self._changed.notify_all()

    def close(self) -> None:
        """Refuse further borrowing (waiting calls get ClosedError), wait for the sessions lent
        out, then free the context (idempotent)."""
        with self._changed:
            if self._done:
                return
            self._closed = True
            self._changed.notify_all()
            while len(self._free) < len(self.group):
                self._changed.wait()
            self.group.close()
            self._free, self._done = [], True
        with _pools_lock:
            last = not any(not pool._done for pool in _pools)  # an Agent dropped unclosed holds nothing
        if last:
            release_decode_thread()  # no thread of edge-sql's outlives the last Agent
