"""One model, many clients: a bounded first-come-first-served queue in front of one `Agent`.

`Agent.ask` already serializes callers (or, with `parallel=N`, lets N of them run), but it
neither keeps arrival order, nor bounds how many wait, nor says where a caller stands. The
queue does, on the event loop that serves the clients: jobs wait in a deque, up to `parallel`
of them run at once (each as one task on the loop, started in arrival order as a slot frees),
and withdrawals and wait time-outs happen on the loop too, so the queue's state has one owner
and needs no lock. Only the episodes themselves leave the loop, for an executor of `parallel`
threads (one per slot); their events come back with `call_soon_threadsafe`.

A job's `updates()` yield its queue position (0 while it runs, 1 when it is the next to start,
counted behind all the running ones), the episode's events and finally its outcome. Cancelling
a job (client disconnect, MCP cancellation) removes it if it still waits, or stops its own
episode at the next token and interrupts its running SQL; the other running episodes go on.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from edge_sql.agent.display import plural
from edge_sql.agent.events import EpisodeEvent
from edge_sql.agent.result import EpisodeResult
from edge_sql.errors import Cancelled, EdgeSqlError, QueueFull, QueueTimeout
from edge_sql.serve.request import AskRequest
from edge_sql.tools import ReadOnlyDatabase

JobState = Literal["queued", "running", "done", "withdrawn"]
Ask = Callable[[AskRequest, ReadOnlyDatabase, Callable[[EpisodeEvent], None], Callable[[], bool]], EpisodeResult]


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
    """One queued request, touched on the queue's event loop only, but for `stop` and `_db` (its episode's)."""

    def __init__(self, number: int, request: AskRequest, path: Path, queue: AskQueue) -> None:
        self.number = number
        self.request = request
        self.path = path
        self.submitted = time.monotonic()
        self.started: float | None = None  # when its episode started (it left the queue)
        self.state: JobState = "queued"  # queued -> running -> done; or queued -> withdrawn
        self.stop = threading.Event()  # read by the episode, in the executor, at every token
        self.outcome: Finished | None = None
        self.update_elapsed_s = 0.0  # when the update just yielded was posted, from submit
        self._queue = queue
        self._items: asyncio.Queue[tuple[float, Update]] = asyncio.Queue()
        self._wait_timer: asyncio.TimerHandle | None = None
        self._db: ReadOnlyDatabase | None = None  # while its episode runs

    @property
    def finished(self) -> bool:
        return self.outcome is not None

    def cancel(self) -> None:
        """Withdraw the job if it waits; otherwise stop its episode (idempotent)."""
        self.stop.set()
        if not self._queue.withdraw(self, Cancelled("cancelled before it started")):
            db = self._db
            if db is not None:
                try:
                    db.interrupt()  # a running statement stops now, not at its time limit
                except sqlite3.ProgrammingError:  # closed meanwhile: the episode has ended
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
    """Runs `ask(request, db, on_event, should_stop) -> EpisodeResult` per job, up to `parallel`
    at a time, starting them in arrival order.

    `ask` is normally a bound call of one shared `Agent` (built with `parallel` sessions when
    `parallel` > 1: the queue only decides how many calls run at once). At most `max_waiting`
    jobs wait behind the running ones. Each job runs as a task on the event loop of the call
    that started it (`submit`, or the end of the job before it).
    """

    def __init__(
        self,
        ask: Ask,
        *,
        parallel: int = 1,
        max_waiting: int = 8,
        wait_timeout_s: float = 300.0,
        log: Callable[[str], None] = lambda _m: None,
        on_ended: Callable[[Job, Finished, float | None], None] | None = None,
    ) -> None:
        """`on_ended(job, outcome, episode_s)` is called on the loop as each job ends (episode_s:
        None when it never ran), for the metrics."""
        if max_waiting < 0:
            raise ValueError("max_waiting must be at least 0")
        if parallel < 1:
            raise ValueError("parallel must be at least 1")
        self._ask = ask
        self.parallel = parallel
        self.max_waiting = max_waiting
        self.wait_timeout_s = wait_timeout_s
        self._log = log
        self._on_ended = on_ended
        self._waiting: collections.deque[Job] = collections.deque()
        self._running: list[Job] = []  # in the order they started; never more than `parallel`
        self._tasks: set[asyncio.Task[None]] = set()
        self._numbers = itertools.count(1)
        self._closed = False
        self._mean_s = 10.0  # a running mean of episode wall times, for Retry-After
        self.counts = QueueCounts()
        self._executor = ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="edge-sql-episode")

    # ---- on the event loop -----------------------------------------------------------------

    def submit(self, request: AskRequest, path: Path) -> Job:
        """Queue a request (on the loop that reads its updates); QueueFull when there is no room."""
        loop = asyncio.get_running_loop()
        if self._closed:
            raise EdgeSqlError("the server is shutting down")
        if len(self._waiting) >= self.max_waiting and len(self._running) >= self.parallel:
            self.counts.rejected += 1
            raise QueueFull(
                f"the queue is full ({len(self._waiting)} waiting, limit {self.max_waiting}); try again later",
                self.retry_after_s(),
            )
        job = Job(next(self._numbers), request, path, self)
        self._waiting.append(job)
        job.post(Position(len(self._waiting)))
        job._wait_timer = loop.call_later(self.wait_timeout_s, self._time_out, job)
        self._promote()  # a free slot: it runs now, so /health never shows a job waiting while a slot is free
        return job

    def withdraw(self, job: Job, reason: EdgeSqlError) -> bool:
        """Remove a waiting job, finishing it with `reason`; False when it already started or ended."""
        if job.state != "queued":
            return False
        self._waiting.remove(job)
        job.state = "withdrawn"
        if job._wait_timer is not None:
            job._wait_timer.cancel()
        if isinstance(reason, QueueTimeout):
            self.counts.timed_out += 1
        else:
            self.counts.cancelled += 1
        self._post_positions()
        self._log(f"ask #{job.number} ({job.request.database}): {reason}")
        outcome = Finished(error=reason)
        self._ended(job, outcome, None)
        job.post(outcome)
        return True

    def snapshot(self) -> dict[str, object]:
        """Queue state for /health: whether any job runs and how many (of `parallel`), waiting,
        limits and counts."""
        return {
            "running": bool(self._running),
            "running_jobs": len(self._running),
            "parallel": self.parallel,
            "waiting": len(self._waiting),
            "max_waiting": self.max_waiting,
            "wait_timeout_s": self.wait_timeout_s,
            **vars(self.counts),
        }

    def by_database(self) -> dict[str, tuple[int, int]]:
        """Waiting and running jobs per database name (for the metrics)."""
        counts: dict[str, tuple[int, int]] = {}
        for job in self._waiting:
            waiting, running = counts.get(job.request.database, (0, 0))
            counts[job.request.database] = (waiting + 1, running)
        for job in self._running:
            waiting, running = counts.get(job.request.database, (0, 0))
            counts[job.request.database] = (waiting, running + 1)
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
        for job in list(self._waiting):
            job.cancel()
        for job in list(self._running):
            job.cancel()
        for task in list(self._tasks):
            if not task.done() and not task.get_loop().is_closed():
                task.get_loop().call_soon_threadsafe(task.cancel)
        self._executor.shutdown(wait=True)

    def _time_out(self, job: Job) -> None:
        message = (
            f"the request waited {self.wait_timeout_s:g} s in the queue without starting "
            "(the model is busy with earlier requests); try again later"
        )
        self.withdraw(job, QueueTimeout(message, self.retry_after_s()))

    def _post_positions(self) -> None:
        for index, waiting in enumerate(self._waiting, start=1):
            waiting.post(Position(index))

    def _promote(self) -> None:
        """Waiting jobs take the free slots in arrival order, each started as a task on this loop."""
        started = False
        while self._waiting and len(self._running) < self.parallel and not self._closed:
            job = self._waiting.popleft()
            self._running.append(job)
            job.state = "running"
            job.started = time.monotonic()
            if job._wait_timer is not None:
                job._wait_timer.cancel()
            job.post(Position(0))
            task = asyncio.get_running_loop().create_task(self._run(job), name=f"edge-sql-ask-{job.number}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            started = True
        if started:
            self._post_positions()

    async def _run(self, job: Job) -> None:
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        try:
            outcome = await loop.run_in_executor(self._executor, self._episode, job, loop)
        except asyncio.CancelledError:  # the server is closing: the episode stops at the next token
            job.stop.set()
            self._running.remove(job)
            job.post(Finished(error=Cancelled("the server is shutting down")))
            raise
        elapsed = time.monotonic() - started
        job.state = "done"
        if (outcome.result is not None and outcome.result.stop == "cancelled") or isinstance(outcome.error, Cancelled):
            self.counts.cancelled += 1
        elif outcome.result is not None:
            self.counts.completed += 1
            self._mean_s = 0.7 * self._mean_s + 0.3 * elapsed
        else:
            self.counts.failed += 1
        self._running.remove(job)
        self._promote()  # hand over in the same step: a job never waits while a slot is free (what /health shows)
        self._log(self._summary(job, outcome, elapsed))
        self._ended(job, outcome, elapsed)
        job.post(outcome)

    def _ended(self, job: Job, outcome: Finished, episode_s: float | None) -> None:
        if self._on_ended is not None:
            try:
                self._on_ended(job, outcome, episode_s)
            except Exception as exc:  # the metrics must never cost a client its answer
                self._log(f"metrics: {type(exc).__name__}: {exc}")

    # ---- in one of the executor's threads -------------------------------------------------------

    def _episode(self, job: Job, loop: asyncio.AbstractEventLoop) -> Finished:
        def on_event(event: EpisodeEvent) -> None:
            try:
                loop.call_soon_threadsafe(job.post, event, time.monotonic())
            except RuntimeError:  # the loop is closed: nobody listens any more
                pass

        try:
            db = ReadOnlyDatabase(job.path)
        except EdgeSqlError as exc:
            return Finished(error=exc)
        job._db = db
        try:
            if job.stop.is_set():  # cancelled between leaving the queue and here
                return Finished(error=Cancelled("cancelled before it started"))
            return Finished(result=self._ask(job.request, db, on_event, job.stop.is_set))
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
