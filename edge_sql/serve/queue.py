"""One model, many clients: a bounded first-come-first-served queue in front of one `Agent`.

`Agent.ask` already serializes callers with a lock, but a lock neither keeps arrival order,
nor bounds how many wait, nor says where a caller stands. The queue does: one worker thread
takes jobs in arrival order and runs `Agent.ask` for each; the async side (HTTP handlers,
MCP tools) gets a `Job` whose `updates()` yield its queue position, the episode's events and
finally its outcome. Cancelling a job (client disconnect, MCP cancellation) removes it if it
still waits, or stops its episode at the next token and interrupts its running SQL.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

from edge_sql.agent.episode import EpisodeEvent
from edge_sql.agent.result import EpisodeResult
from edge_sql.errors import EdgeSqlError
from edge_sql.tools import ReadOnlyDatabase


class QueueFull(EdgeSqlError):
    """Every place in the queue is taken; `retry_after_s` is a fair guess for trying again."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class QueueTimeout(EdgeSqlError):
    """The job waited longer than the queue's time limit and was removed without running."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class Cancelled(EdgeSqlError):
    """The client went away (or cancelled) before its job started."""


@dataclass(frozen=True)
class AskRequest:
    """What a client may ask: a question about a database the operator named."""

    question: str
    database: str                   # a name given with --db, never a path
    evidence: str | None = None
    seed: int | None = None


@dataclass(frozen=True)
class Position:
    """The job's place: 0 while it runs, 1 when it is next, and so on."""

    position: int


@dataclass(frozen=True)
class Finished:
    """The job's outcome: an episode result (possibly cancelled) or an error."""

    result: EpisodeResult | None = None
    error: EdgeSqlError | None = None


Update = Position | EpisodeEvent | Finished


@dataclass
class QueueCounts:
    """What the queue has done since start (for /health and the log)."""

    completed: int = 0
    cancelled: int = 0
    timed_out: int = 0
    rejected: int = 0
    failed: int = 0


class Job:
    """One queued request. Its updates are delivered on the event loop that submitted it."""

    def __init__(self, number: int, request: AskRequest, path: Path, queue: AskQueue,
                 loop: asyncio.AbstractEventLoop, wait_timeout_s: float) -> None:
        self.number = number
        self.request = request
        self.path = path
        self.submitted = time.monotonic()
        self.wait_deadline = self.submitted + wait_timeout_s
        self.wait_timeout_s = wait_timeout_s
        self.state = "queued"           # queued -> running -> done; or queued -> withdrawn
        self.stop = threading.Event()   # checked by the episode at every token
        self.outcome: Finished | None = None
        self._queue = queue
        self._loop = loop
        self._items: asyncio.Queue[tuple[float, Update]] = asyncio.Queue()
        self.update_elapsed_s = 0.0     # when the update just yielded was posted, from submit
        self._db: ReadOnlyDatabase | None = None

    @property
    def finished(self) -> bool:
        return self.outcome is not None

    def cancel(self) -> None:
        """Withdraw the job if it waits; otherwise stop its episode (idempotent, any thread)."""
        self.stop.set()
        if not self._queue.withdraw(self, Cancelled("cancelled before it started")):
            db = self._db
            if db is not None:
                try:
                    db.interrupt()  # a running statement stops now, not at its time limit
                except sqlite3.ProgrammingError:  # closed meanwhile: the episode has ended
                    pass

    async def updates(self) -> AsyncIterator[Update]:
        """Positions, episode events, then one `Finished`; a wait past the limit ends it."""
        while True:
            if self.state == "queued":
                try:
                    posted, item = await asyncio.wait_for(self._items.get(),
                                                          max(0.0, self.wait_deadline - time.monotonic()))
                except TimeoutError:
                    message = (f"the request waited {self.wait_timeout_s:g} s in the queue without starting "
                               "(the model is busy with earlier requests); try again later")
                    self._queue.withdraw(self, QueueTimeout(message, self._queue.retry_after_s()))
                    continue  # withdrawn: Finished is queued; or it just started: go on
            else:
                posted, item = await self._items.get()
            self.update_elapsed_s = posted - self.submitted
            yield item
            if isinstance(item, Finished):
                return

    async def wait(self) -> Finished:
        """The outcome, ignoring the intermediate updates."""
        async for item in self.updates():
            if isinstance(item, Finished):
                return item
        raise AssertionError("updates() always ends with Finished")

    # ---- called by the worker thread or under the queue's lock ----------------------------

    def post(self, item: Update) -> None:
        """Deliver an update to the async side (thread-safe; dropped when the loop is gone)."""
        if isinstance(item, Finished):
            self.outcome = item
        try:
            self._loop.call_soon_threadsafe(self._items.put_nowait, (time.monotonic(), item))
        except RuntimeError:  # the event loop is closed: nobody listens any more
            pass


class AskQueue:
    """Runs `ask(request, db) -> EpisodeResult` for each job, one at a time, in arrival order.

    `ask` is given the job's stop flag and event callback; it is normally a bound call of one
    shared `Agent`. At most `max_waiting` jobs wait behind the running one.
    """

    def __init__(
        self,
        ask: Callable[[AskRequest, ReadOnlyDatabase, Callable[[EpisodeEvent], None], Callable[[], bool]], EpisodeResult],
        *,
        max_waiting: int = 8,
        wait_timeout_s: float = 300.0,
        log: Callable[[str], None] = lambda _m: None,
    ) -> None:
        if max_waiting < 0:
            raise ValueError("max_waiting must be at least 0")
        self._ask = ask
        self.max_waiting = max_waiting
        self.wait_timeout_s = wait_timeout_s
        self._log = log
        self._cond = threading.Condition()
        self._waiting: collections.deque[Job] = collections.deque()
        self._running: Job | None = None
        self._numbers = itertools.count(1)
        self._closed = False
        self._mean_s = 10.0   # a running mean of episode wall times, for Retry-After
        self.counts = QueueCounts()
        self._thread = threading.Thread(target=self._work, name="edge-sql-serve-worker", daemon=True)
        self._thread.start()

    # ---- the async side --------------------------------------------------------------------

    def submit(self, request: AskRequest, path: Path) -> Job:
        """Queue a request (call on the event loop that will read its updates); QueueFull if no room."""
        loop = asyncio.get_running_loop()
        with self._cond:
            if self._closed:
                raise EdgeSqlError("the server is shutting down")
            if len(self._waiting) >= self.max_waiting and (self._running is not None or self._waiting):
                self.counts.rejected += 1
                waiting = len(self._waiting)
                raise QueueFull(f"the queue is full ({waiting} waiting, limit {self.max_waiting}); try again later",
                                self.retry_after_s())
            job = Job(next(self._numbers), request, path, self, loop, self.wait_timeout_s)
            self._waiting.append(job)
            job.post(Position(len(self._waiting)))
            if self._running is None:  # idle: it runs now, so /health never shows a job waiting while none runs
                self._promote()
            self._cond.notify_all()
        return job

    def withdraw(self, job: Job, reason: EdgeSqlError) -> bool:
        """Remove a waiting job, finishing it with `reason`; False when it already started or ended."""
        with self._cond:
            if job.state != "queued" or job not in self._waiting:
                return False
            self._waiting.remove(job)
            job.state = "withdrawn"
            if isinstance(reason, QueueTimeout):
                self.counts.timed_out += 1
            else:
                self.counts.cancelled += 1
            self._post_positions()
        self._log(f"ask #{job.number} ({job.request.database}): {reason}")
        job.post(Finished(error=reason))
        return True

    def snapshot(self) -> dict[str, object]:
        """Queue state for /health: running, waiting, limits and counts."""
        with self._cond:
            return {
                "running": self._running is not None,
                "waiting": len(self._waiting),
                "max_waiting": self.max_waiting,
                "wait_timeout_s": self.wait_timeout_s,
                **vars(self.counts),
            }

    def retry_after_s(self) -> int:
        """Seconds until a place is likely to free up: one mean episode, at least 1."""
        return max(1, round(self._mean_s))

    def close(self) -> None:
        """Cancel the waiting jobs, stop the running one, end the worker."""
        with self._cond:
            self._closed = True
            waiting = list(self._waiting)
            running = self._running
            self._cond.notify_all()
        for job in waiting:
            job.cancel()
        if running is not None:
            running.cancel()
        self._thread.join(timeout=30)

    # ---- the worker thread -------------------------------------------------------------------

    def _post_positions(self) -> None:
        for index, waiting in enumerate(self._waiting, start=1):
            waiting.post(Position(index))

    def _promote(self) -> Job | None:
        """With the lock held: the next waiting job becomes the running one (or none runs)."""
        job = self._waiting.popleft() if self._waiting and not self._closed else None
        if job is not None:
            job.state = "running"
            self._post_positions()
        self._running = job
        return job

    def _next(self) -> Job | None:
        with self._cond:
            while self._running is None and not self._waiting and not self._closed:
                self._cond.wait()
            job = self._running or self._promote()  # promoted by `submit` or `_work`, or the next waiting
        if job is not None:
            job.post(Position(0))
        return job

    def _work(self) -> None:
        while (job := self._next()) is not None:
            started = time.monotonic()
            outcome = self._run(job)
            elapsed = time.monotonic() - started
            with self._cond:
                job.state = "done"
                if (outcome.result is not None and outcome.result.stop == "cancelled") or isinstance(
                        outcome.error, Cancelled):
                    self.counts.cancelled += 1
                elif outcome.result is not None:
                    self.counts.completed += 1
                    self._mean_s = 0.7 * self._mean_s + 0.3 * elapsed
                else:
                    self.counts.failed += 1
                # hand over in the same step: a job never waits while none runs (what /health shows)
                self._promote()
            self._log(self._summary(job, outcome, elapsed))
            job.post(outcome)

    def _run(self, job: Job) -> Finished:
        try:
            db = ReadOnlyDatabase(job.path)
        except EdgeSqlError as exc:
            return Finished(error=exc)
        job._db = db
        try:
            if job.stop.is_set():  # cancelled between leaving the queue and here
                return Finished(error=Cancelled("cancelled before it started"))
            return Finished(result=self._ask(job.request, db, job.post, job.stop.is_set))
        except EdgeSqlError as exc:
            return Finished(error=exc)
        except Exception as exc:  # a bug must not kill the worker: report it to this client
            return Finished(error=EdgeSqlError(f"internal error: {type(exc).__name__}: {exc}"))
        finally:
            job._db = None
            db.close()

    @staticmethod
    def _summary(job: Job, outcome: Finished, elapsed: float) -> str:
        head = f"ask #{job.number} ({job.request.database})"
        if outcome.result is None:
            return f"{head}: error: {outcome.error}"
        result = outcome.result
        calls = sum(len(r.calls) for r in result.rounds)
        return f"{head}: {result.stop}, {len(result.rounds)} rounds, {calls} calls, {elapsed:.1f} s"
