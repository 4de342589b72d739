"""One variant's bench episodes, as the local child process and the Ray actor both run them.

`EpisodeRunner` loads the variant once as an `edge_sql.api.Agent` (its "load" record says how
long that took, on which node and with how many threads) and turns each (mode, question id)
into one "episode" record. Whoever drives it decides where the records go: the local worker
appends them to the results file itself; a Ray actor returns them to the driver, which appends them.

The Agent is the driver of the episodes (`Agent.each`): with `task.settings.parallel` = N > 1 it holds
N sessions of one model and answers N questions at once (what lets the engine batch their
decode steps); each episode runs alone on its session as it would serially, so its record is
the serial one but for the timings. A vote mode's item is `ask(vote=K)`'s vote (the opening
evaluated once, vote_mode.py) and one record. What stays here is the bench's own: the records, the
schema-given prompt of a mode, the positions the model wrote (for fidelity) and the scoring.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, cast

from edge_sql.bench.machine import machine_description, node_name
from edge_sql.bench.records import EpisodeRecord, LoadRecord
from edge_sql.bench.results import WorkKey
from edge_sql.bench.tasks import EpisodeTask
from edge_sql.bench.vote_mode import split_mode
from edge_sql.errors import EdgeSqlError

if TYPE_CHECKING:
    from edge_sql.agent.prompt import PromptTemplate
    from edge_sql.agent.result import EpisodeResult
    from edge_sql.api import Ask
    from edge_sql.bench.knowledge_modes import BenchKnowledge
    from edge_sql.runtime import Session


class EpisodeRunner:
    """A loaded variant (an Agent) and everything its episodes share (questions, prompt, budget,
    sampling)."""

    def __init__(
        self,
        task: EpisodeTask,
        *,
        model_path: str | None = None,
        node: str | None = None,
    ) -> None:
        """Load `task`'s variant from `model_path` (default: the task's path; a Ray node may hold
        its own copy elsewhere). `node` labels the records (default: this machine's name)."""
        from edge_sql.api import Agent
        from edge_sql.evaluation.datasets import load_dataset

        self.task = task
        self.node = node or node_name()
        self.questions = {q.id: q for q in load_dataset(task.dataset, fmt=task.dataset_format, db_root=task.db_root)}
        self.agent = Agent(
            model_path or task.model_path, settings=task.settings, log=lambda m: print(m, file=sys.stderr)
        )
        self._prompts: dict[tuple[str, str], PromptTemplate] = {}  # (mode, db path): the mode's prompt
        self._knowledge: BenchKnowledge | None = None  # the knowledge modes' evidence, made on first use
        started = time.perf_counter()
        self.agent.warm_up()  # the grammar engine's vocabulary view: same for every variant
        info = self.agent.info
        self.load_record: LoadRecord = {
            "kind": "load",
            "variant": task.variant,
            "load_s": self.agent.load_s,
            "grammar_setup_s": time.perf_counter() - started,
            "n_threads": info.n_threads,
            "settings": info.settings,
            "tuning": self.agent.tuning,
            "n_ctx": self.sessions[0].n_ctx,
            "time": time.time(),
            "node": self.node,
            "machine": machine_description(),
        }
        if task.settings.parallel > 1:
            self.load_record["parallel"] = task.settings.parallel

    @property
    def sessions(self) -> list[Session]:
        """The variant's sessions (one per episode at once)."""
        return self.agent.sessions

    def run_many(self, items: Sequence[tuple[str, str]]) -> Iterator[EpisodeRecord]:
        """The records of `items` (mode, question id), as they finish, `task.parallel` at a time
        (`Agent.each`). A vote mode's item (`withheld+vote4`) is a vote of K episodes (seeds
        seed..seed+K-1) whose episodes borrow the sessions like any other, and one record.
        Closing the iterator early (an error, Ctrl-C) stops the running episodes and joins them."""
        asks = [self._ask(mode, question_id) for mode, question_id in items]
        seen: dict[int, TokenFields] = {}  # per item: what its session said (see `_watch`)

        def watch(index: int, ask: Ask, session: Session, result: EpisodeResult) -> None:
            tokens = self._watch(session, result)
            if tokens is not None:
                seen[index] = tokens

        # knowledge=False: a benchmark measures the model, its evidence (the modes' own) as it is
        answers = self.agent.each(
            asks, greedy=self.task.settings.greedy, watch=watch, early_stop=False, knowledge=False
        )
        with closing(answers) as finished:
            for index, outcome in finished:
                if not isinstance(outcome, EdgeSqlError) and isinstance(outcome, Exception):
                    raise outcome  # a bug: stop the others
                yield self._record(*items[index], outcome, seen.pop(index, None))

    def run(self, mode: str, question_id: str) -> EpisodeRecord:
        """One item's record (`run_many` of one)."""
        return next(iter(self.run_many([(mode, question_id)])))

    def _ask(self, mode: str, question_id: str) -> Ask:
        """The Agent's question for one item: the mode's prompt, the bench's seed, K for a vote."""
        from edge_sql.api import Ask

        base, k = split_mode(mode)
        question = self.questions[question_id]
        return Ask(
            question.question,
            question.db_path,
            self._evidence(base, question_id),
            self.task.seed,
            vote=k,
            prompt=self._prompt(base, question.db_path),
        )

    def _evidence(self, mode: str, question_id: str) -> str | None:
        """The question's evidence; in a knowledge mode, with notes or examples added."""
        from edge_sql.bench.knowledge_modes import KNOWLEDGE_MODES, BenchKnowledge

        if mode not in KNOWLEDGE_MODES:
            return self.questions[question_id].evidence
        if self._knowledge is None:
            self._knowledge = BenchKnowledge(self.questions, self.agent.count_tokens)
        return self._knowledge.evidence(mode, question_id)

    def _prompt(self, mode: str, db_path: str | Path) -> PromptTemplate:
        """`mode`'s prompt for questions on `db_path` (`given` carries the schema), made once."""
        from edge_sql.bench.modes import prompt_for_mode
        from edge_sql.tools import ReadOnlyDatabase

        key = (mode, str(db_path))
        if key not in self._prompts:
            with ReadOnlyDatabase(db_path) as db:
                self._prompts[key] = prompt_for_mode(self.agent.prompt, mode, db)
        return self._prompts[key]

    def _watch(self, session: Session, result: EpisodeResult) -> TokenFields | None:
        """What an item's record takes from the session its episode ran on, before it is given
        back: its tokens and the positions the model wrote (`result.generated_spans`), for
        fidelity; the counts, timings and a vote's episodes are in the result's stats."""
        if not self.task.record_tokens:
            return None
        return {"tokens": session.tokens, "generated_spans": result.generated_spans}

    def _record(
        self, mode: str, question_id: str, outcome: EpisodeResult | Exception, tokens: TokenFields | None
    ) -> EpisodeRecord:
        """The "episode" record of one item: its answer scored (an item that cannot run scores 0)."""
        from edge_sql.evaluation.scoring import score_prediction

        task, question = self.task, self.questions[question_id]
        fields = {
            "kind": "episode",
            **WorkKey(task.variant, mode, question_id, task.seed).as_fields(),
            "db_id": question.db_id,
            "difficulty": question.difficulty,
        }
        if isinstance(outcome, Exception):  # e.g. a schema too long for the context: the question scores 0
            return cast(
                "EpisodeRecord",
                {
                    **fields,
                    "sql": None,
                    "correct": False,
                    "error": f"episode failed: {outcome}",
                    "episode_error": str(outcome),
                    "node": self.node,
                },
            )
        score = score_prediction(outcome.sql, question.gold_sql, question.db_path, timeout_s=task.score_timeout_s)
        record = {
            **fields,
            "sql": outcome.sql,
            "correct": score.correct,
            "error": score.error,
            "stop": outcome.stop,
            "forced": outcome.forced,
            "fallback": outcome.fallback,
            **_confidence_fields(outcome),
            "rounds": len(outcome.rounds),
            "calls": sum(len(r.calls) for r in outcome.rounds),
        }
        vote = outcome.stats.vote
        if vote is not None:  # vote_mode.py: the whole vote's wall time, each episode's seed, stop and time
            data = vote.to_json(runs=True)
            if task.vote_auto:
                data["auto"] = True  # K was `--vote auto`'s pick on this machine
            return cast("EpisodeRecord", {**record, "wall_s": vote.wall_s, "vote": data, "node": self.node})
        measured = outcome.stats.measured.record_fields()  # counts and seconds: EpisodeFigures' own names
        return cast("EpisodeRecord", {**record, **measured, "node": self.node, **(tokens or {})})

    def close(self) -> None:
        if self._knowledge is not None:
            self._knowledge.close()
        self.agent.close()


class TokenFields(TypedDict):
    """The reference's tokens and the [start, end) spans the model wrote itself: what fidelity
    teacher-forces."""

    tokens: list[int]
    generated_spans: list[list[int]]


def _confidence_fields(result: EpisodeResult) -> dict[str, str | list[str] | None]:
    """The answer checks' level and reasons (edge_sql/checks), for accuracy by confidence."""
    checks = result.checks
    return {
        "confidence": checks.confidence if checks is not None else None,
        "confidence_reasons": checks.reasons if checks is not None else [],
    }
