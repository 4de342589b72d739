"""The Agent's calls for many questions and for an event loop: `ask_many` and `each` (the one
driver of episodes, `driver.py`), and `ask_async` / `ask_many_async`, the same calls awaited.

An awaited call runs on a thread of the Agent's own (`edge-sql-async`), so the event loop never
waits for an episode; cancelling the awaiting task stops the episode at its next token (or takes
the call out of the queue for a session) and frees the session at once. The queue is the
session pool's: first come, first served, with `max_waiting` as its bound.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypedDict, TypeVar, Unpack

from edge_sql.agent.events import EpisodeEvent
from edge_sql.agent.given import FollowUp
from edge_sql.agent.result import EpisodeResult
from edge_sql.api.asks import Ask, ask_item, error_result
from edge_sql.api.driver import EachWatch, drive
from edge_sql.api.stopping import StopWhen
from edge_sql.errors import ClosedError, EdgeSqlError
from edge_sql.tools import ReadOnlyDatabase

if TYPE_CHECKING:
    from edge_sql.agent.budget import Budget
    from edge_sql.agent.prompt import PromptTemplate
    from edge_sql.api.asks import Watch
    from edge_sql.api.plan import SessionPlan
    from edge_sql.api.session_pool import SessionPool

T = TypeVar("T")
P = ParamSpec("P")


class AskOptions(TypedDict, total=False):
    """`Agent.ask`'s keywords that `ask_async` passes on as they are (`on_event` is called on
    the call's thread, not the event loop's)."""

    evidence: str | None
    seed: int | None
    greedy: bool | None
    on_event: Callable[[EpisodeEvent], None] | None
    vote: int | Literal["auto"] | None
    early_stop: bool
    abstain_below: float | None
    follow_up: FollowUp | None
    fresh: bool
    knowledge: bool


class AskMany:
    """`Agent`'s calls for many questions and its awaitable calls (the Agent supplies the rest)."""

    prompt: PromptTemplate
    budget: Budget
    plan: SessionPlan  # its `sessions` answer at once (the `parallel` setting, or a vote's K if more)
    greedy: bool
    seed: int | None
    _executor: ThreadPoolExecutor | None

    if TYPE_CHECKING:  # the Agent's, which these calls go through

        def ask(self, *args: Any, **kwargs: Any) -> EpisodeResult: ...  # Any: mixin
        def stop_when(self, *args: Any, **kwargs: Any) -> StopWhen: ...  # Any: mixin
        def vote_k(self, *args: Any, **kwargs: Any) -> int | None: ...  # Any: mixin
        def _answer(self, *args: Any, **kwargs: Any) -> EpisodeResult: ...  # Any: mixin
        def _open_pool(self) -> SessionPool: ...

    async def ask_async(
        self,
        question: str,
        db: str | Path | ReadOnlyDatabase,
        *,
        should_stop: Callable[[], bool] | None = None,
        timeout: float | None = None,
        **options: Unpack[AskOptions],
    ) -> EpisodeResult:
        """`ask`, awaited: the episode runs on the Agent's thread and the loop goes on serving.
        Cancelling the awaiting task (a client gone, `asyncio.wait_for`) stops the episode at the
        next token, or takes the call out of the queue, and raises CancelledError; `timeout` and
        `should_stop` count while it waits for a session too."""
        stop = self.stop_when(should_stop, timeout)
        return await self._awaited(stop, functools.partial(self.ask, question, db, should_stop=stop, **options))

    async def ask_many_async(
        self,
        questions: Sequence[str | Ask | tuple],
        db: str | Path | ReadOnlyDatabase | None = None,
        *,
        evidence: str | None = None,
        seed: int | None = None,
        greedy: bool | None = None,
        should_stop: Callable[[], bool] | None = None,
        timeout: float | None = None,
        knowledge: bool = True,
    ) -> list[EpisodeResult]:
        """`ask_many`, awaited (cancelling the awaiting task stops every episode at the next token)."""
        stop = self.stop_when(should_stop, timeout)
        call = functools.partial(
            self.ask_many, questions, db, evidence=evidence, seed=seed, greedy=greedy, knowledge=knowledge
        )
        return await self._awaited(stop, functools.partial(call, should_stop=stop))

    async def run_async(self, call: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Any blocking call (the knowledge calls that touch the disk: `agent.knowledge.add_note`,
        ...) on the Agent's thread, awaited."""
        return await self._awaited(None, functools.partial(call, *args, **kwargs))

    @property
    def queue(self) -> SessionPool:
        """The Agent's one queue of calls (`session_pool.py`): `serve` takes a request's place in
        it when the request arrives (`queue.enter`, refused at once when full, told each move),
        waits for its turn (`queue.turn`) and passes the place to `ask(..., place=...)`, which
        leaves it; ClosedError once closed."""
        return self._open_pool()

    def queue_state(self) -> dict[str, int]:
        """`running` episodes (of `sessions`), calls `waiting` for a session (of `max_waiting`):
        JSON-ready, for an app's health endpoint; ClosedError once closed."""
        return self._open_pool().state()

    async def _awaited(self, stop: StopWhen | None, call: Callable[[], T]) -> T:
        import asyncio  # here: an app that never awaits (and the CLI) does not pay its import

        pool = self._open_pool()
        if self._executor is None:  # enough threads for every session and every place in the queue
            self._executor = ThreadPoolExecutor(len(pool.views) + pool.max_waiting + 1, "edge-sql-async")
        try:
            future = asyncio.get_running_loop().run_in_executor(self._executor, call)
        except RuntimeError:  # shut down meanwhile: the Agent was closed
            raise ClosedError("this Agent is closed") from None
        try:
            return await future
        except asyncio.CancelledError:
            if stop is not None:
                stop.cancel()  # the episode stops at its next token; a waiting call leaves the queue
                pool.wake()
            raise

    def _close_async(self) -> None:
        """End the awaited calls' threads (the running calls have ended: the pool is closed)."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)

    def ask_many(
        self,
        questions: Sequence[str | Ask | tuple],
        db: str | Path | ReadOnlyDatabase | None = None,
        *,
        evidence: str | None = None,
        seed: int | None = None,
        greedy: bool | None = None,
        should_stop: Callable[[], bool] | None = None,
        timeout: float | None = None,
        on_result: Callable[[int, EpisodeResult], None] | None = None,
        knowledge: bool = True,
    ) -> list[EpisodeResult]:
        """Answer several questions, `parallel` at a time; the results come in input order.

        A question is a str (about `db`, with `evidence` and `seed`) or an `Ask` (or a tuple of
        its fields: `(question, db, evidence, seed)`) whose fields that are not None win. Each
        database file is opened once and shared by its questions. `on_result(i, result)` is
        called as each episode finishes (in the calling thread); `should_stop` ends them all, and
        so does `timeout` (seconds for them all; `greedy` and `seed` None: the Agent's).
        Runs through `each`, which yields the results as they finish and consults the knowledge
        for each question as `ask` does (`knowledge=False`: not).

        A question that fails with an EdgeSqlError (a missing database, an empty question, one
        too long for the context) gets a result with `stop == "error"` and the message in
        `error`, so one bad question costs no other its answer. Any other exception is raised
        once every running question has finished; so is a KeyboardInterrupt (Ctrl-C) while
        waiting, after the running episodes have been stopped.
        """
        items = [ask_item(q, db, evidence, self.seed if seed is None else seed) for q in questions]
        outcomes: list[EpisodeResult | Exception | None] = [None] * len(items)
        stop = should_stop if isinstance(should_stop, StopWhen) else self.stop_when(should_stop, timeout)
        greedy = self.greedy if greedy is None else greedy
        for i, outcome in self._each(items, greedy=greedy, should_stop=stop, knowledge=knowledge):
            outcomes[i] = outcome
            if on_result is not None and isinstance(outcome, EpisodeResult):
                on_result(i, outcome)
        for failed in outcomes:
            if isinstance(failed, BaseException) and not isinstance(failed, EdgeSqlError):
                raise failed
        results = [
            error_result(item, outcome, self.prompt.version) if isinstance(outcome, BaseException) else outcome
            for item, outcome in zip(items, outcomes)
            if outcome is not None
        ]
        for result in results:
            if result.stop == "cancelled":
                result.error = stop.message() + (
                    "" if result.stats.figures is not None else " before the episode started"
                )
        return results

    def each(
        self,
        items: Sequence[Ask],
        *,
        greedy: bool = False,
        should_stop: Callable[[], bool] | None = None,
        early_stop: bool = True,
        watch: EachWatch | None = None,
        knowledge: bool = True,
    ) -> Generator[tuple[int, EpisodeResult | Exception], None, None]:
        """Answer `items` (each with its own database, evidence, seed; see `Ask`), `parallel` at a
        time, yielding `(index, result)` as each finishes, or `(index, exception)` for one that
        could not be asked (a bad database, a question too long for the context). An item with
        `vote=K` is answered as `ask(..., vote=K, early_stop=early_stop)`; its episodes borrow
        sessions like any other. `watch(index, ask, session, result)` sees each episode (each of a
        vote's, with its own seed) on its session before the session is given back.
        `should_stop` ends them all; closing the iterator early (Ctrl-C, an error) stops the
        running episodes, starts no more and waits for them. Each question consults the knowledge
        first as `ask` does (`Agent._answer`: a verified question is answered at once, notes and
        similar verified answers join the evidence, `result.given` says which); `knowledge=False`
        skips that (the bench: its evidence goes to the model as it is). This is the one driver
        of episodes: `ask_many`, `ask(vote=K)` and the bench (`bench/episodes.py`) run through it."""
        return self._each(
            list(items), greedy=greedy, should_stop=should_stop, early_stop=early_stop, watch=watch, knowledge=knowledge
        )

    def _each(
        self,
        items: list[Ask],
        *,
        greedy: bool,
        should_stop: Callable[[], bool] | None,
        early_stop: bool = True,
        watch: EachWatch | None = None,
        skip: Callable[[], bool] | None = None,
        share_opening: bool = False,
        knowledge: bool = True,
        in_turn: bool = False,
    ) -> Generator[tuple[int, EpisodeResult | Exception], None, None]:
        """`each`, with what a vote adds: an item not started yet when `skip()` is True is not
        asked (nothing is yielded for it); `share_opening` (see `run_episode`); `in_turn`: the
        items are a vote's own episodes, run within the vote's turn in the queue without
        consulting the knowledge (the vote's question did, once)."""

        def answer(
            item: Ask, database: ReadOnlyDatabase, stopped: Callable[[], bool], seen: Watch | None
        ) -> EpisodeResult:
            return self._answer(
                item,
                database,
                greedy=greedy,
                should_stop=stopped,
                early_stop=early_stop,
                knowledge=knowledge and not in_turn,
                compose=knowledge and not in_turn,
                watch=seen,
                share_opening=share_opening,
                in_turn=in_turn,
            )

        return drive(items, answer, workers=self.plan.sessions, should_stop=should_stop, watch=watch, skip=skip)
