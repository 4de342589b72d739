"""The Agent's sessions lent one episode at a time: `ask` may be called from any number of
threads, and each call borrows a free session for its whole episode (blocking while all are
busy), so at most one episode runs on a session and closing waits for the running ones."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from edge_sql.api.plan import SessionPlan
from edge_sql.errors import ClosedError
from edge_sql.runtime import PrefixCache, Session
from edge_sql.runtime.batching.sequences import SessionGroup, open_sessions


class SessionPool:
    """The sessions of one group (`open_sessions`, `views`: its sessions in order), lent by
    `borrowed`; `close` frees the group once every session is back."""

    def __init__(self, group: SessionGroup, views: list[Session], load_s: float = 0.0) -> None:
        self.group, self.views, self.load_s = group, views, load_s
        self._free: list[Session] = list(views)
        self._changed = threading.Condition()
        self._closed = False  # no more borrowing
        self._done = False  # the context is freed

    @classmethod
    def open(
        cls,
        plan: SessionPlan,
        prefix_cache: PrefixCache,
    ) -> SessionPool:
        """The plan's sessions opened on one context (`open_sessions`) with its options; `load_s`
        is how long opening took (the model, the context)."""
        started = time.perf_counter()
        group = open_sessions(plan.model_path, plan.options, plan.sessions, prefix_cache=prefix_cache)
        load_s = time.perf_counter() - started
        return cls(group, list(group.sessions), load_s)

    @contextmanager
    def borrowed(self) -> Iterator[Session]:
        """A free session for one episode, given back after it; waits while all are busy (a
        closed pool: ClosedError)."""
        with self._changed:
            while not self._closed and not self._free:
                self._changed.wait()
            if self._closed:
                raise ClosedError("this Agent is closed")
            session = self._free.pop()
        try:
            yield session
        finally:
            session.context.idle()  # the other episodes at once stop waiting for this one
            with self._changed:
                self._free.append(session)
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
