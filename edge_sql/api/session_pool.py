"""The Agent's one queue and its sessions: `ask` may be called from any number of threads (and
`serve` answers its clients through the same calls); each call takes a place in one line, served
first come, first served, at most `calls` at a time, and its episodes borrow the sessions while
it holds its turn, so at most one episode runs on a session and closing waits for the running
ones.

At most `max_waiting` calls wait in line (one more is refused with QueueFull); a waiting call
whose `stopped()` turns True (its deadline, its `should_stop`, its awaiting task cancelled, a
client gone) leaves the line within `POLL_S`, or at once when `leave` takes it out, and one that
waits longer than its `wait_s` ends in QueueTimeout. A place is taken when the call arrives
(`enter`; `serve` takes it when a request comes in, to refuse at once and to tell the client
where it stands) and told each move (`moved(position)`: 1 is the next in line, 0 its turn)."""

from __future__ import annotations

import collections
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Literal

from edge_sql.api.agent_settings import DEFAULT_MAX_WAITING
from edge_sql.api.plan import SessionPlan
from edge_sql.errors import Cancelled, ClosedError, QueueFull, QueueTimeout
from edge_sql.runtime import PrefixCache, Session
from edge_sql.runtime.batching.sequences import SessionGroup, open_sessions
from edge_sql.runtime.llama.decode_thread import release_decode_thread

POLL_S = 0.05  # how often a waiting call looks at its `stopped` (a cancel also wakes it at once)
_pools: weakref.WeakSet[SessionPool] = weakref.WeakSet()  # the last one open closed: the decode thread ends
_pools_lock = threading.Lock()


class Place:
    """One call's place in the line: `waiting`, then `running` (its turn: `started` says when),
    then `left` (its turn ended, or it left the line without one)."""

    def __init__(self, moved: Callable[[int], None] | None, wait_s: float | None) -> None:
        self.moved = moved
        self.wait_s = wait_s
        self.entered = time.monotonic()
        self.started: float | None = None
        self.state: Literal["waiting", "running", "left"] = "waiting"

    def tell(self, position: int) -> None:
        if self.moved is not None:
            self.moved(position)


class SessionPool:
    """The sessions of one group (`open_sessions`, `views`: its sessions in order) and the line of
    calls that use them, `calls` of them at a time; `close` frees the group once every session
    is back."""

    def __init__(
        self,
        group: SessionGroup,
        views: list[Session],
        load_s: float = 0.0,
        max_waiting: int = DEFAULT_MAX_WAITING,
        calls: int | None = None,
    ) -> None:
        if max_waiting < 0:
            raise ValueError(f"max_waiting must be at least 0, got {max_waiting}")
        self.group, self.views, self.load_s, self.max_waiting = group, views, load_s, max_waiting
        self.calls = max(1, min(calls or len(views), len(views)))  # calls holding a turn at once
        self._free: list[Session] = list(views)
        self._line: collections.deque[Place] = collections.deque()  # the waiting calls, in order
        self._running = 0  # calls holding their turn
        self._changed = threading.Condition()
        self._closed = False  # no more borrowing
        self._done = False  # the context is freed
        self._mean_s = 10.0  # a running mean of how long a turn lasts, for the retry_after_s guesses
        with _pools_lock:
            _pools.add(self)

    @classmethod
    def open(
        cls,
        plan: SessionPlan,
        prefix_cache: PrefixCache,
        max_waiting: int = DEFAULT_MAX_WAITING,
        calls: int | None = None,
    ) -> SessionPool:
        """The plan's sessions opened on one context (`open_sessions`) with its options; `load_s`
        is how long opening took (the model, the context)."""
        started = time.perf_counter()
        group = open_sessions(plan.model_path, plan.options, plan.sessions, prefix_cache=prefix_cache)
        load_s = time.perf_counter() - started
        return cls(group, list(group.sessions), load_s, max_waiting, calls)

    def state(self) -> dict[str, int]:
        """Calls holding their turn, calls waiting for one, and the bounds (an app's /health)."""
        with self._changed:
            return {
                "running": self._running if not self._done else 0,
                "waiting": len(self._line),
                "sessions": len(self.views),
                "max_waiting": self.max_waiting,
            }

    def retry_after_s(self) -> int:
        """Seconds until a place is likely to free up: one mean turn over the calls at once, at least 1."""
        return max(1, round(self._mean_s / self.calls))

    # ---- the line ----------------------------------------------------------------------------

    def enter(
        self,
        moved: Callable[[int], None] | None = None,
        *,
        wait_s: float | None = None,
        max_waiting: int | None = None,
    ) -> Place:
        """A place for a call that has arrived: its turn at once when nobody waits and fewer than
        `calls` run, else the last in line (QueueFull when `max_waiting`, default the pool's,
        calls already wait; ClosedError once closed). `moved` is told its position now and at
        each move (under the pool's lock: it must only hand the news on)."""
        bound = self.max_waiting if max_waiting is None else max_waiting
        with self._changed:
            if self._closed:
                raise ClosedError("this Agent is closed")
            if len(self._line) >= bound and self._running >= self.calls:
                raise QueueFull(
                    f"{len(self._line)} calls already wait for a session (max_waiting={bound}); try again later",
                    self.retry_after_s(),
                )
            place = Place(moved, wait_s)
            self._line.append(place)
            place.tell(len(self._line))
            self._promote()
            return place

    def leave(self, place: Place) -> None:
        """Take `place` out of the line, or end its turn (idempotent): a stopped call leaves at
        once, and the next in line moves up."""
        with self._changed:
            if place.state == "waiting":
                self._line.remove(place)
                self._tell_line()
            elif place.state == "running":
                self._running -= 1
                assert place.started is not None
                self._mean_s = 0.7 * self._mean_s + 0.3 * (time.monotonic() - place.started)
            place.state = "left"
            self._promote()
            self._changed.notify_all()

    @contextmanager
    def turn(self, place: Place | None = None, stopped: Callable[[], bool] | None = None) -> Iterator[Place]:
        """The call's turn (a place taken now when none is given): waits until the place is
        served, ended by its `stopped` (Cancelled), its `wait_s` (QueueTimeout), a `leave`
        (Cancelled) or the pool closing (ClosedError); the place is left afterwards."""
        place = place if place is not None else self.enter()
        try:
            with self._changed:
                while place.state == "waiting" and not self._closed:
                    if stopped is not None and stopped():
                        raise Cancelled("stopped while waiting for a free session")
                    waited = time.monotonic() - place.entered
                    if place.wait_s is not None and waited >= place.wait_s:
                        raise QueueTimeout(
                            f"the request waited {place.wait_s:g} s in the queue without starting "
                            "(the model is busy with earlier requests); try again later",
                            self.retry_after_s(),
                        )
                    self._changed.wait(POLL_S if stopped is not None or place.wait_s is not None else None)
                if place.state == "left":
                    raise Cancelled("stopped while waiting for a free session")
                if self._closed and place.state == "waiting":
                    raise ClosedError("this Agent is closed")
            yield place
        finally:
            self.leave(place)

    def _promote(self) -> None:
        """The first in line take the free turns (holding `_changed`); the rest hear where they stand."""
        started = False
        while self._line and self._running < self.calls and not self._closed:
            place = self._line.popleft()
            place.state, place.started = "running", time.monotonic()
            self._running += 1
            place.tell(0)
            started = True
        if started:
            self._tell_line()
            self._changed.notify_all()

    def _tell_line(self) -> None:
        for position, waiting in enumerate(self._line, start=1):
            waiting.tell(position)

    # ---- the sessions ------------------------------------------------------------------------

    @contextmanager
    def borrowed(self, stopped: Callable[[], bool] | None = None) -> Iterator[Session]:
        """A free session for one episode of a call holding its turn, given back after it (a
        vote's episodes may wait for one: Cancelled when `stopped()` turns True first,
        ClosedError once the pool is closed)."""
        with self._changed:
            while not self._free and not self._closed:
                if stopped is not None and stopped():
                    raise Cancelled("stopped while waiting for a free session")
                self._changed.wait(POLL_S if stopped is not None else None)
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
