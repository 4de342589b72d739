"""The knowledge modes of the bench: what notes and verified answers buy, measured in one run.

`withheld+notes`: the trained protocol, each question's evidence joined by the notes the user's
knowledge store holds for its database that apply to it. `withheld+examples`: leave one out, the
gold SQL of the *other* questions of the same database stand as verified answers, and the three
most similar (BM25, as `Agent.ask` finds them) join the evidence. Both compose the evidence as
`Agent.ask` does (knowledge/evidence.py), within the same bound in the model's tokens; the
report shows them beside plain `withheld`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from edge_sql.evaluation.datasets import Question
from edge_sql.knowledge import Knowledge, VerifiedAnswer, normalise_question
from edge_sql.knowledge.evidence import EXAMPLES_PER_QUESTION, compose
from edge_sql.knowledge.retrieval import schema_words
from edge_sql.knowledge.store import Seen
from edge_sql.tools import ReadOnlyDatabase

NOTES = "withheld+notes"
EXAMPLES = "withheld+examples"
KNOWLEDGE_MODES = (NOTES, EXAMPLES)


class BenchKnowledge:
    """The evidence of each question in the knowledge modes (databases opened once each)."""

    def __init__(self, questions: dict[str, Question], count_tokens: Callable[[str], int]) -> None:
        self.questions = questions
        self.count_tokens = count_tokens
        self._databases: dict[Path, ReadOnlyDatabase] = {}
        self._notes: Knowledge | None = None
        self._examples: dict[Path, Knowledge] = {}  # per database: the other questions' gold SQL

    def evidence(self, mode: str, question_id: str) -> str | None:
        question = self.questions[question_id]
        db = self._database(question.db_path)
        if mode == NOTES:
            if self._notes is None:
                self._notes = Knowledge.open(count_tokens=self.count_tokens)
            notes = self._notes.applicable_notes(db, question.question)
            return compose(question.evidence, notes=notes, count_tokens=self.count_tokens).evidence
        examples = others(self._gold(question.db_path, db), db, question.question)
        return compose(question.evidence, examples=examples, count_tokens=self.count_tokens).evidence

    def _database(self, path: Path) -> ReadOnlyDatabase:
        if path not in self._databases:
            self._databases[path] = ReadOnlyDatabase(path)
        return self._databases[path]

    def _gold(self, path: Path, db: ReadOnlyDatabase) -> Knowledge:
        """An in-memory knowledge holding every question of `path` with its gold SQL as verified."""
        if path not in self._examples:
            self._examples[path] = gold_knowledge(
                db, [q for q in self.questions.values() if q.db_path == path], self.count_tokens
            )
        return self._examples[path]

    def close(self) -> None:
        for kb in [*self._examples.values(), *([self._notes] if self._notes else [])]:
            kb.close()
        for db in self._databases.values():
            db.close()


def gold_knowledge(db: ReadOnlyDatabase, questions: list[Question], count_tokens: Callable[[str], int]) -> Knowledge:
    """A knowledge database in memory whose verified answers are `questions`' gold SQL (the
    dataset vouches for them: they are stored without running, as a person's `verify` would)."""
    kb = Knowledge(Path(":memory:"), count_tokens=count_tokens)
    seen, schema = Seen.of(db), schema_words(db)
    with kb.writing() as conn:
        for q in questions:
            answer = VerifiedAnswer(0, q.question, q.evidence, q.gold_sql, "")
            kb.store_answer(conn, seen, answer, schema, replace=True)  # a repeated question: the last gold SQL
    return kb


def others(kb: Knowledge, db: ReadOnlyDatabase, question: str, k: int = EXAMPLES_PER_QUESTION) -> list[VerifiedAnswer]:
    """The `k` verified answers most like `question`, leaving out the question itself (leave one out)."""
    own = normalise_question(question)
    return [a for a in kb.similar(db, question, k=k + 1) if normalise_question(a.question) != own][:k]
