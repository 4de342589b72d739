"""One variant's bench episodes, as the local child process and the Ray actor both run them.

`EpisodeRunner` loads the variant once (its "load" record says how long that took, on which
node and with how many threads) and then turns one (mode, question id) into one "episode"
record at a time. Whoever drives it decides where the records go: the local worker appends
them to the results file itself; a Ray actor returns them to the driver, which appends them.

With `task.parallel` = N > 1 the variant is loaded as N sessions of one model
(`runtime.batching.sequences.open_sessions`), and `run_many` answers N questions at once, one thread
per session (what lets the engine batch their decode steps). Each episode runs alone on its
session as it would serially, so its record is the serial one but for the timings. A vote
mode's item is K sampled episodes spread over the sessions and one record (voting.py).
"""

from __future__ import annotations

import dataclasses
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from edge_sql.bench.machine import machine_description, node_name
from edge_sql.bench.results import WorkKey
from edge_sql.bench.tasks import EpisodeTask
from edge_sql.bench.voting import split_mode
from edge_sql.errors import EdgeSqlError

if TYPE_CHECKING:
    from edge_sql.runtime import Session


class SpanRecorder:
    """A session seen through a wrapper that notes which context positions the model itself
    wrote ([start, end) of each `generate`, for fidelity); everything else is the session's.
    A wrapper, not a subclass, so it fits whatever sessions `open_sessions` returns."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.generated_spans: list[list[int]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.session, name)

    def reset(self) -> None:
        self.session.reset()
        self.generated_spans = []

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        start = self.session.n_past
        completion = self.session.generate(*args, **kwargs)
        if self.session.n_past > start:
            self.generated_spans.append([start, self.session.n_past])
        return completion


@dataclasses.dataclass
class _Piece:
    """One finished episode of a vote: its index (seed + index), result (or why it could not run)
    and when it started."""

    index: int
    mode: str
    question_id: str
    result: Any
    started: float
    wall_s: float


def _indices(mode: str) -> Sequence[int | None]:
    """The units of one item: None for a single episode, 0..K-1 for a vote of K."""
    k = split_mode(mode)[1]
    return [None] if k is None else range(k)


class EpisodeRunner:
    """A loaded variant and everything its episodes share (questions, prompt, budget, sampling)."""

    def __init__(self, task: EpisodeTask, *, model_path: str | None = None, node: str | None = None) -> None:
        """Load `task`'s variant from `model_path` (default: the task's path; a Ray node may hold
        its own copy elsewhere). `node` labels the records (default: this machine's name)."""
        from edge_sql.agent.budget import Budget
        from edge_sql.agent.prompt import load_prompt
        from edge_sql.api import load_settings
        from edge_sql.evaluation.datasets import load_dataset
        from edge_sql.runtime import SamplingParams

        self.task = task
        self.node = node or node_name()
        self.questions = {q.id: q for q in load_dataset(task.dataset, fmt=task.dataset_format, db_root=task.db_root)}
        self.prompt = load_prompt(task.prompt_file)
        self.budget = Budget(**task.budget)
        self.params = SamplingParams(seed=task.seed, greedy=task.greedy)

        path = model_path or task.model_path
        settings, self.tuning = load_settings(Path(path), tune=task.tune, n_gpu_layers=None, n_ctx=task.n_ctx,
                                              n_threads=task.n_threads, speculate=task.speculate,
                                              log=lambda message: print(message, file=sys.stderr))
        if task.n_threads is not None:
            settings = dataclasses.replace(settings, n_threads=task.n_threads)
        from edge_sql.runtime.batching.sequences import open_sessions

        started = time.perf_counter()
        self._group = open_sessions(path, settings.session_options(task.speculate, n_ctx=task.n_ctx), task.parallel)
        self.sessions = [SpanRecorder(session) for session in self._group.sessions]
        self.session = self.sessions[0]  # what `run` uses unless given another
        load_s = time.perf_counter() - started
        started = time.perf_counter()
        self.session.lltokenizer()  # the grammar engine's vocabulary view: same for every variant
        self.load_record: dict[str, Any] = {
            "kind": "load", "variant": task.variant, "load_s": load_s,
            "grammar_setup_s": time.perf_counter() - started, "n_threads": self.session.info.n_threads,
            "settings": self.session.info.settings, "tuning": self.tuning,
            "n_ctx": self.session.n_ctx, "time": time.time(), "node": self.node, "machine": machine_description(),
            **({"parallel": task.parallel} if task.parallel > 1 else {}),
        }

    def run_many(self, items: Sequence[tuple[str, str]]) -> Iterator[dict[str, Any]]:
        """The records of `items` (mode, question id), as they finish: in order with one session;
        with N, N at a time, one thread per session, each taking the next episode when it is free.
        A vote mode's item (`withheld+vote4`) is K episodes (seeds seed..seed+K-1) spread over
        the sessions like any other, and one record once the last of them ends.
        Closing the iterator early (an error, Ctrl-C) stops the running episodes and joins them."""
        units = [(mode, question_id, index) for mode, question_id in items for index in _indices(mode)]
        pieces: dict[tuple[str, str], dict[int, _Piece]] = {}
        if len(self.sessions) == 1:
            for unit in units:
                record = self._collect(self._work(unit, self.session, None), pieces)
                if record is not None:
                    yield record
            return
        todo: queue.SimpleQueue[tuple[str, str, int | None]] = queue.SimpleQueue()
        for unit in units:
            todo.put(unit)
        finished: queue.SimpleQueue[tuple[dict[str, Any] | _Piece | None, BaseException | None]] = queue.SimpleQueue()
        stop = threading.Event()

        def work(session: SpanRecorder) -> None:
            while not stop.is_set():
                try:
                    unit = todo.get_nowait()
                except queue.Empty:
                    return
                try:
                    finished.put((self._work(unit, session, stop.is_set), None))
                except BaseException as exc:  # a bug: the driver re-raises it
                    finished.put((None, exc))
                    return

        threads = [threading.Thread(target=work, args=(session,), name=f"edge-sql-bench-{index}", daemon=True)
                   for index, session in enumerate(self.sessions)]
        for thread in threads:
            thread.start()
        try:
            for _ in units:
                while True:
                    try:
                        outcome, error = finished.get(timeout=0.5)  # a timeout: Ctrl-C reaches this thread
                        break
                    except queue.Empty:
                        continue
                if error is not None:
                    raise error
                assert outcome is not None  # a unit that did not raise has its outcome
                record = self._collect(outcome, pieces)
                if record is not None:
                    yield record
        finally:
            stop.set()
            for thread in threads:
                thread.join()

    def _work(self, unit: tuple[str, str, int | None], session: SpanRecorder,
              should_stop: Callable[[], bool] | None) -> dict[str, Any] | _Piece:
        """One unit on `session`: a single episode's record, or one episode of a vote."""
        mode, question_id, index = unit
        if index is None:
            return self.run(mode, question_id, session=session, should_stop=should_stop)
        started = time.perf_counter()
        try:
            result: Any = self.episode(split_mode(mode)[0], question_id, session=session, should_stop=should_stop,
                                       params=dataclasses.replace(self.params, seed=self.task.seed + index, greedy=False))
        except EdgeSqlError as exc:  # it does not vote; the others still do
            result = exc
        return _Piece(index, mode, question_id, result, started, time.perf_counter() - started)

    def _collect(self, outcome: dict[str, Any] | _Piece, pieces: dict[tuple[str, str], dict[int, _Piece]]
                 ) -> dict[str, Any] | None:
        """The record `outcome` completes: a single episode's is its own; a vote's, once all K are in."""
        if isinstance(outcome, dict):
            return outcome
        mine = pieces.setdefault((outcome.mode, outcome.question_id), {})
        mine[outcome.index] = outcome
        k = split_mode(outcome.mode)[1]
        assert k is not None  # a piece is one episode of a vote
        if len(mine) < k:
            return None
        del pieces[(outcome.mode, outcome.question_id)]
        return self.vote_record(outcome.mode, outcome.question_id, [mine[i] for i in sorted(mine)])

    def vote_record(self, mode: str, question_id: str, pieces: Sequence[_Piece]) -> dict[str, Any]:
        """The record of one vote (voting.py): its episodes' results go to `agent.vote.choose`,
        the chosen SQL is scored, and the wall time runs from the first episode's start to the choice."""
        from edge_sql.agent.checked import join_vote
        from edge_sql.agent.result import EpisodeResult
        from edge_sql.agent.stats import EpisodeStats
        from edge_sql.agent.vote import choose
        from edge_sql.evaluation.scoring import score_prediction
        from edge_sql.tools import ReadOnlyDatabase

        task, question = self.task, self.questions[question_id]
        key = WorkKey(task.variant, mode, question_id, task.seed)
        fields = {"kind": "episode", **key.as_fields(), "db_id": question.db_id, "difficulty": question.difficulty}
        results = [p.result if isinstance(p.result, EpisodeResult) else EpisodeResult(
            question=question.question, evidence=question.evidence, sql=None, columns=[], rows=[], truncated=False,
            forced=False, fallback=False, answer=None, rounds=[], stats=EpisodeStats(), transcript="", stop="error",
            error=f"episode failed: {p.result}") for p in pieces]
        if not any(isinstance(p.result, EpisodeResult) for p in pieces):  # none could run: scores 0
            return {**fields, "sql": None, "correct": False, "error": results[0].error,
                    "episode_error": str(pieces[0].result), "node": self.node}
        with ReadOnlyDatabase(question.db_path) as db:
            chosen = choose(results, db, max_rows=self.budget.max_result_rows)
        join_vote(chosen)
        vote = chosen.stats.vote
        assert vote is not None  # choose() set it
        for piece, episode in zip(pieces, vote.episodes):
            episode.seed, episode.stop = task.seed + piece.index, results[piece.index].stop
            episode.wall_s = round(piece.wall_s, 4)
        wall_s = time.perf_counter() - min(p.started for p in pieces)
        score = score_prediction(chosen.sql, question.gold_sql, question.db_path, timeout_s=task.score_timeout_s)
        return {
            **fields, "sql": chosen.sql, "correct": score.correct, "error": score.error, "stop": chosen.stop,
            "forced": chosen.forced, "fallback": chosen.fallback, **_confidence_fields(chosen), "rounds": len(chosen.rounds),
            "calls": sum(len(r.calls) for r in chosen.rounds), "wall_s": wall_s,
            "vote": dataclasses.replace(vote, seeds=[task.seed + p.index for p in pieces]).to_json(), "node": self.node,
        }

    def episode(self, mode: str, question_id: str, *, session: SpanRecorder | None = None,
                should_stop: Callable[[], bool] | None = None, params: Any = None) -> Any:
        """One episode's `EpisodeResult` on `session` (default: the first), with the bench's
        sampling unless `params` says otherwise; an episode that cannot run raises EdgeSqlError."""
        from edge_sql.agent.checked import check_episode
        from edge_sql.agent.episode import run_episode
        from edge_sql.bench.modes import prompt_for_mode
        from edge_sql.tools import ReadOnlyDatabase, Toolbox

        session = session or self.session
        question = self.questions[question_id]
        with ReadOnlyDatabase(question.db_path) as db:
            # the recorder stands in for its session
            result = run_episode(cast("Session", session), Toolbox(db), question.question,
                                 evidence=question.evidence, params=params or self.params,
                                 prompt=prompt_for_mode(self.prompt, mode, db), budget=self.budget,
                                 should_stop=should_stop)
            result.checks = check_episode(db, result)  # the confidence the bench scores against accuracy
            return result

    def run(self, mode: str, question_id: str, *, session: SpanRecorder | None = None,
            should_stop: Callable[[], bool] | None = None) -> dict[str, Any]:
        """One episode on `session` (default: the first), scored: the "episode" record (an
        episode that cannot run scores 0)."""
        from edge_sql.evaluation.scoring import score_prediction

        task, session = self.task, session or self.session
        question = self.questions[question_id]
        key = WorkKey(task.variant, mode, question_id, task.seed)
        try:
            result = self.episode(mode, question_id, session=session, should_stop=should_stop)
        except EdgeSqlError as exc:  # e.g. a schema too long for the context: the question scores 0
            return {"kind": "episode", **key.as_fields(), "db_id": question.db_id,
                    "difficulty": question.difficulty, "sql": None, "correct": False,
                    "error": f"episode failed: {exc}", "episode_error": str(exc), "node": self.node}
        score = score_prediction(result.sql, question.gold_sql, question.db_path, timeout_s=task.score_timeout_s)
        figures = result.stats.measured
        record = {
            "kind": "episode",
            **key.as_fields(),
            "db_id": question.db_id,
            "difficulty": question.difficulty,
            "sql": result.sql,
            "correct": score.correct,
            "error": score.error,
            "stop": result.stop,
            "forced": result.forced,
            "fallback": result.fallback,
            **_confidence_fields(result),
            "rounds": len(result.rounds),
            "calls": sum(len(r.calls) for r in result.rounds),
            **figures.record_fields(),
            "node": self.node,
        }
        if task.record_tokens:
            record["tokens"] = session.tokens
            record["generated_spans"] = session.generated_spans  # [start, end) of the model's own tokens
        return record

    def close(self) -> None:
        self._group.close()


def _confidence_fields(result: Any) -> dict[str, Any]:
    """The answer checks' level and reasons (edge_sql/checks), for accuracy by confidence."""
    checks = result.checks
    return {"confidence": checks.confidence if checks is not None else None,
            "confidence_reasons": checks.reasons if checks is not None else []}
