"""One model, many clients: each request a call of one `Agent`, waiting in the Agent's own queue.

The queue is the Agent's (`api/session_pool.py`): a request takes its place there when it
arrives (QueueFull at once when `max_waiting` already wait, said as serve says it), is served
first come, first served, `calls` at a time (the Agent's `parallel`), and leaves it at once
when its client goes away. This module is serve's view of it, on the event loop that serves the
clients: each request is a `Job` whose `updates()` yield its queue position (0 while it runs, 1
when it is the next to start, counted behind all the running ones; told by the Agent's queue as
it moves), the episode's events and finally its outcome, plus the counts and metrics /health
shows. Each job's call runs on a thread of its own (it waits for its turn there); its events come
back with `call_soon_threadsafe`.

Cancelling a job (client disconnect, MCP cancellation) takes it out of the queue if it still
waits, or stops its own episode at the next token and interrupts its running SQL; the other
running episodes go on.
"""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from edge_sql.agent.display import plural
from edge_sql.agent.events import EpisodeEvent
from edge_sql.agent.result import EpisodeResult
from edge_sql.errors import Cancelled, EdgeSqlError, QueueFull, QueueTimeout
from edge_sql.serve.request import AskRequest
from edge_sql.tools import ReadOnlyDatabase

if TYPE_CHECKING:  # the Agent's queue lives beside its sessions: serve starts without loading them
    from edge_sql.api.session_pool import Place, SessionPool

Ask = Callable[
    [AskRequest, ReadOnlyDatabase, Callable[[EpisodeEvent], None], Callable[[], bool], "Place"], EpisodeResult
]


@dataclass(frozen=True)
class Position:
    """The job's place: 0 while it runs, 1 when it is the next to start, and so on."""

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
    """One request, touched on the queue's event loop only, but for `stop`, `_db` (its episode's)
    and `place` (the Agent's queue's)."""

    def __init__(self, request: AskRequest, path: Path, queue: AskQueue, loop: asyncio.AbstractEventLoop) -> None:
        self.number = 0  # given once the queue has taken it
        self.request = request
        self.path = path
        self.submitted = time.monotonic()
        self.place: Place | None = None  # its place in the Agent's queue
        self.stop = threading.Event()  # read by the episode, in its thread, at every token
        self.outcome: Finished | None = None
        self.update_elapsed_s = 0.0  # when the update just yielded was posted, from submit
        self._queue = queue
        self._loop = loop
        self._items: asyncio.Queue[tuple[float, Update]] = asyncio.Queue()
        self._db: ReadOnlyDatabase | None = None  # while its episode runs

    @property
    def started(self) -> float | None:
        """When its turn came (it left the queue), None while it waits or if it never ran."""
        return self.place.started if self.place is not None else None

    @property
    def finished(self) -> bool:
        return self.outcome is not None

    def cancel(self) -> None:
        """Take the job out of the queue if it waits; otherwise stop its episode (idempotent)."""
        self.stop.set()
        place = self.place
        if place is not None and place.state == "waiting":
            self._queue.line.leave(place)  # at once: the ones behind it move up now
            return
        db = self._db
        if db is not None:
            try:
                db.interrupt()  # a running statement stops now, not at its time limit
            except sqlite3.ProgrammingError:  # closed meanwhile: the episode has ended
                pass

    def moved(self, position: int) -> None:
        """The Agent's queue says where the job stands (from any thread, under the queue's lock)."""
        try:
            self._loop.call_soon_threadsafe(self.post, Position(position), time.monotonic())
        except RuntimeError:  # the loop is closed: nobody listens any more
            pass

    async def updates(self) -> AsyncIterator[Update]:
        """Positions, episode events, then one `Finished` (a wait past the limit ends in QueueTimeout)."""
        while True:
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

    def post(self, item: Update, posted: float | None = None) -> None:
        """Deliver an update (on the loop); `posted` is when it happened, if not now."""
        if isinstance(item, Finished):
            self.outcome = item
        self._items.put_nowait((time.monotonic() if posted is None else posted, item))


class AskQueue:
    """Runs `ask(request, db, on_event, should_stop, place) -> EpisodeResult` per job, each in
    its turn in `line` (the Agent's queue: `agent.queue`), `line.calls` at a time, in arrival order.

    `ask` is normally a bound call of one shared `Agent`, given the job's place so that its call
    takes this turn and no other. At most `max_waiting` jobs wait behind the running ones, each at
    most `wait_timeout_s`.
    """

    def __init__(
        self,
        ask: Ask,
        line: SessionPool,
        *,
        max_waiting: int = 8,
        wait_timeout_s: float = 300.0,
        log: Callable[[str], None] = lambda _m: None,
        on_ended: Callable[[Job, Finished, float | None], None] | None = None,
    ) -> None:
        """`on_ended(job, outcome, episode_s)` is called on the loop as each job ends (episode_s:
        None when it never ran), for the metrics."""
        if max_waiting < 0:
            raise ValueError("max_waiting must be at least 0")
        self._ask = ask
        self.line = line
        self.parallel = line.calls
        self.max_waiting = max_waiting
        self.wait_timeout_s = wait_timeout_s
        self._log = log
        self._on_ended = on_ended
        self._jobs: set[Job] = set()  # submitted and not ended
        self._tasks: set[asyncio.Task[None]] = set()
        self._numbers = itertools.count(1)
        self._closed = False
        self._mean_s = 10.0  # a running mean of episode wall times, for Retry-After
        self.counts = QueueCounts()
        # a thread for every call that may run or wait at once (the waiting ones wait in it)
        self._executor = ThreadPoolExecutor(self.parallel + max_waiting + 1, thread_name_prefix="edge-sql-episode")

    # ---- on the event loop -----------------------------------------------------------------

    def submit(self, request: AskRequest, path: Path) -> Job:
        """Queue a request (on the loop that reads its updates); QueueFull when there is no room."""
        loop = asyncio.get_running_loop()
        if self._closed:
            raise EdgeSqlError("the server is shutting down")
        job = Job(request, path, self, loop)
        try:
            job.place = self.line.enter(job.moved, wait_s=self.wait_timeout_s, max_waiting=self.max_waiting)
        except QueueFull:
            self.counts.rejected += 1
            waiting = self.line.state()["waiting"]
            raise QueueFull(
                f"the queue is full ({waiting} waiting, limit {self.max_waiting}); try again later",
                self.retry_after_s(),
            ) from None
        job.number = next(self._numbers)
        self._jobs.add(job)
        task = loop.create_task(self._run(job), name=f"edge-sql-ask-{job.number}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return job

    def snapshot(self) -> dict[str, object]:
        """Queue state for /health: whether any job runs and how many (of `parallel`), waiting,
        limits and counts."""
        state = self.line.state()
        return {
            "running": state["running"] > 0,
            "running_jobs": state["running"],
            "parallel": self.parallel,
            "waiting": state["waiting"],
            "max_waiting": self.max_waiting,
            "wait_timeout_s": self.wait_timeout_s,
            **vars(self.counts),
        }

    def by_database(self) -> dict[str, tuple[int, int]]:
        """Waiting and running jobs per database name (for the metrics)."""
        counts: dict[str, tuple[int, int]] = {}
        for job in list(self._jobs):
            state = job.place.state if job.place is not None else "left"
            if state == "left":
                continue
            waiting, running = counts.get(job.request.database, (0, 0))
            counts[job.request.database] = (waiting + 1, running) if state == "waiting" else (waiting, running + 1)
        return counts

    def retry_after_s(self) -> int:
        """Seconds until a place is likely to free up: one mean episode over the slots, at least 1."""
        return max(1, round(self._mean_s / self.parallel))

    def close(self) -> None:
        """Cancel the waiting jobs, stop the running ones and wait for their episodes to end.

        Called once the loop serves no more (or on it): what is left is set flags and
        interrupted statements, and the executor's threads to join.
        """
        self._closed = True
        for job in list(self._jobs):
            job.cancel()
        for task in list(self._tasks):
            if not task.done() and not task.get_loop().is_closed():
                task.get_loop().call_soon_threadsafe(task.cancel)
        self._executor.shutdown(wait=True)

    async def _run(self, job: Job) -> None:
        loop = asyncio.get_running_loop()
        try:
            outcome = await loop.run_in_executor(self._executor, self._call, job, loop)
        except asyncio.CancelledError:  # the server is closing: the episode stops at the next token
            job.stop.set()
            self._jobs.discard(job)
            job.post(Finished(error=Cancelled("the server is shutting down")))
            raise
        self._jobs.discard(job)
        if job.started is None:  # it never ran: taken out of the queue (cancelled, timed out)
            if isinstance(outcome.error, QueueTimeout):
                self.counts.timed_out += 1
            else:
                self.counts.cancelled += 1
            self._log(f"ask #{job.number} ({job.request.database}): {outcome.error}")
            self._ended(job, outcome, None)
            job.post(outcome)
            return
        elapsed = time.monotonic() - job.started
        if (outcome.result is not None and outcome.result.stop == "cancelled") or isinstance(outcome.error, Cancelled):
            self.counts.cancelled += 1
        elif outcome.result is not None:
            self.counts.completed += 1
            self._mean_s = 0.7 * self._mean_s + 0.3 * elapsed
        else:
            self.counts.failed += 1
        self._log(self._summary(job, outcome, elapsed))
        self._ended(job, outcome, elapsed)
        job.post(outcome)

    def _ended(self, job: Job, outcome: Finished, episode_s: float | None) -> None:
        if self._on_ended is not None:
            try:
                self._on_ended(job, outcome, episode_s)
            except Exception as exc:  # the metrics must never cost a client its answer
                self._log(f"metrics: {type(exc).__name__}: {exc}")

    # ---- in the job's own thread ------------------------------------------------------------------

    def _call(self, job: Job, loop: asyncio.AbstractEventLoop) -> Finished:
        """The job's turn in the Agent's queue (waited for here), then its call."""
        assert job.place is not None

        def on_event(event: EpisodeEvent) -> None:
            try:
                loop.call_soon_threadsafe(job.post, event, time.monotonic())
            except RuntimeError:  # the loop is closed: nobody listens any more
                pass

        try:
            with self.line.turn(job.place, job.stop.is_set):
                return self._episode(job, on_event)
        except Cancelled as exc:  # taken out of the queue, or stopped before its turn came
            return Finished(error=Cancelled("cancelled before it started") if job.started is None else exc)
        except EdgeSqlError as exc:  # QueueTimeout: waited past the limit
            return Finished(error=exc)

    def _episode(self, job: Job, on_event: Callable[[EpisodeEvent], None]) -> Finished:
        assert job.place is not None
        try:
            db = ReadOnlyDatabase(job.path)
        except EdgeSqlError as exc:
            return Finished(error=exc)
        job._db = db
        try:
            if job.stop.is_set():  # cancelled between leaving the queue and here
                return Finished(error=Cancelled("cancelled before it started"))
            return Finished(result=self._ask(job.request, db, on_event, job.stop.is_set, job.place))
        except EdgeSqlError as exc:
            return Finished(error=exc)
        except Exception as exc:  # a bug must not kill the consumer: report it to this client
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
        return f"{head}: {result.stop}, {plural(len(result.rounds), 'round')}, {plural(calls, 'call')}, {elapsed:.1f} s"
