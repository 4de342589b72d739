"""The one driver of episodes (`Agent.each`): a list of Asks answered N at a time on a thread
pool, each database file opened once, results yielded as they finish; stopping (the caller's
`should_stop`, or the iterator closed early by Ctrl-C or an error) stops the running episodes,
starts no more and waits for them."""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import ExitStack

from edge_sql.agent.result import EpisodeResult
from edge_sql.api.asks import Ask, Watch, db_key, open_each
from edge_sql.errors import EdgeSqlError
from edge_sql.runtime import Session
from edge_sql.tools import ReadOnlyDatabase

EachWatch = Callable[[int, Ask, Session, EpisodeResult], None]
"""`Agent.each`'s watch: a `Watch` that also sees the index of the item the episode answers."""

AnswerOne = Callable[[Ask, ReadOnlyDatabase, Callable[[], bool], Watch | None], EpisodeResult]
"""How the Agent answers one item (one episode, or a vote) on its open database, with the
driver's `stopped` and the item's watch."""


def drive(
    items: list[Ask],
    answer: AnswerOne,
    *,
    workers: int,
    should_stop: Callable[[], bool] | None,
    watch: EachWatch | None = None,
    skip: Callable[[], bool] | None = None,
) -> Generator[tuple[int, EpisodeResult | Exception], None, None]:
    """`(index, result)` for each of `items` as it finishes, or `(index, exception)` for one that
    could not be asked, `workers` at a time; an item not started yet when `skip()` is True is not
    asked (nothing is yielded for it: a decided vote)."""
    stop = threading.Event()

    def stopped() -> bool:
        return stop.is_set() or (should_stop is not None and should_stop())

    def one(i: int, databases: dict[object, ReadOnlyDatabase | EdgeSqlError]) -> EpisodeResult | Exception | None:
        item = items[i]
        if skip is not None and skip():
            return None
        seen: Watch | None = None
        if watch is not None:
            seen = lambda ask, session, result: watch(i, ask, session, result)  # noqa: E731 - the index bound here
        try:
            database = databases[db_key(item.db)]
            if isinstance(database, BaseException):
                raise database
            return answer(item, database, stopped, seen)
        except Exception as exc:
            return exc

    with ExitStack() as stack:
        databases = open_each(items, stack)
        pool = ThreadPoolExecutor(max_workers=max(1, min(workers, len(items))), thread_name_prefix="edge-sql-ask")
        try:
            futures = {pool.submit(one, i, databases): i for i in range(len(items))}
            for future in as_completed(futures):
                outcome = future.result()
                if outcome is not None:
                    yield futures[future], outcome
        finally:  # done, or Ctrl-C / the caller stopped reading: stop the running episodes, start no more
            stop.set()
            pool.shutdown(wait=True, cancel_futures=True)
