"""Execution accuracy with BIRD's semantics.

BIRD's official ``evaluation.py`` runs the predicted and the gold SQL on the question's
database, fetches all rows, and counts the prediction correct when
``set(predicted_rows) == set(gold_rows)``. We do exactly that, through the read-only
`ReadOnlyDatabase`:

- rows are tuples of the values sqlite3 returns (None, int, float, str, bytes);
- row order and duplicate rows are ignored (it is a set), column order is not (a tuple);
- values compare as Python compares them: NULL == NULL (None == None), 1 == 1.0 (so an
  integer and an equal float match), 1 != '1' (a number never equals text), and floats must be
  exactly equal (0.1 + 0.2 != 0.3); there is no rounding or tolerance;
- an empty result equals only an empty result.

A prediction scores 0, with the reason recorded, when it is missing or blank, fails to run
(syntax error, unknown column, a write the read-only policy refuses), or exceeds the time limit.
Each query (predicted, then gold) gets its own `timeout_s` (BIRD gives the pair 30 s together).
A gold query that fails also scores 0, with "gold SQL failed: ..." as the reason.

Two details come from `ReadOnlyDatabase` rather than from BIRD: text that is not valid UTF-8
is decoded with replacement characters (BIRD's plain sqlite3 would raise), and a statement
must be a single read-only statement. Spider questions are scored with this same BIRD rule,
not with Spider's own exact-match or test-suite metrics.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from edge_sql.agent.result import result_set
from edge_sql.errors import QueryError
from edge_sql.evaluation.datasets import Question, base_id, require_databases
from edge_sql.evaluation.outcomes import EvalReport, QuestionResult
from edge_sql.tools.database import ReadOnlyDatabase

DEFAULT_TIMEOUT_S = 30.0
NO_PREDICTION = "no prediction"


@dataclass(frozen=True)
class Score:
    """Whether a prediction is correct; `error` says why not when its SQL (or the gold) failed."""

    correct: bool
    error: str | None = None


def score_on_database(
    db: ReadOnlyDatabase,
    pred_sql: str | None,
    gold_sql: str,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Score:
    """Score one prediction on an open database (see the module docstring for the rules)."""
    if pred_sql is None or not pred_sql.strip():
        return Score(False, NO_PREDICTION)
    try:
        predicted = db.execute(pred_sql, max_rows=None, time_limit_s=timeout_s)
    except QueryError as exc:
        return Score(False, f"predicted SQL failed: {exc}")
    try:
        gold = db.execute(gold_sql, max_rows=None, time_limit_s=timeout_s)
    except QueryError as exc:
        return Score(False, f"gold SQL failed: {exc}")
    return Score(result_set(predicted.rows) == result_set(gold.rows))


def score_prediction(
    pred_sql: str | None,
    gold_sql: str,
    db_path: Path | str,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Score:
    """Score one predicted query against the gold query on the SQLite file `db_path`.
    A missing or unreadable database raises DatabaseError (a setup error, not a wrong answer)."""
    with ReadOnlyDatabase(Path(db_path), time_limit_s=timeout_s) as db:
        return score_on_database(db, pred_sql, gold_sql, timeout_s=timeout_s)


def evaluate(
    questions: Sequence[Question],
    predictions: Mapping[str, str],
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    dataset: str | None = None,
    show_progress: bool = False,
    threads: int = 1,
) -> EvalReport:
    """Score a predictions mapping (question id -> SQL) on every question.

    A question without a prediction is wrong ("no prediction"). A prediction keyed by a
    repeated question's plain id (see `datasets.base_id`) covers each repeat. All databases are
    checked first, so a missing one stops the run with its name before any scoring.

    `threads` > 1 (`eval --parallel`) scores that many questions at once, each thread on
    connections of its own (each `ReadOnlyDatabase` runs its SQL in a worker process of its own,
    so a slow gold query no longer holds up the rest); the report is the same, in the questions'
    order.
    """
    if threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}")
    require_databases(questions)
    local = threading.local()
    opened: list[dict[Path, ReadOnlyDatabase]] = []  # each thread's open databases

    def score(question: Question) -> QuestionResult:
        open_dbs = getattr(local, "dbs", None)
        if open_dbs is None:
            open_dbs = local.dbs = {}
            opened.append(open_dbs)
        pred_sql = predictions.get(question.id, predictions.get(base_id(question.id)))
        if question.db_path not in open_dbs:
            open_dbs[question.db_path] = ReadOnlyDatabase(question.db_path, time_limit_s=timeout_s)
        score = score_on_database(open_dbs[question.db_path], pred_sql, question.gold_sql, timeout_s=timeout_s)
        return QuestionResult(
            id=question.id,
            db_id=question.db_id,
            difficulty=question.difficulty,
            correct=score.correct,
            error=score.error,
            predicted_sql=pred_sql,
            gold_sql=question.gold_sql,
        )

    pool = ThreadPoolExecutor(threads, thread_name_prefix="edge-sql-score") if threads > 1 else None
    done = False
    try:
        scored = map(score, questions) if pool is None else pool.map(score, questions)
        results = list(
            tqdm(scored, total=len(questions), desc="scoring", unit="q", file=sys.stderr, disable=not show_progress)
        )
        done = True
    finally:
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
            if not done:  # Ctrl-C or an error: the statements still running stop now
                for db in [db for dbs in opened for db in dbs.values()]:
                    db.interrupt()
            pool.shutdown(wait=True)
        for db in [db for dbs in opened for db in dbs.values()]:
            db.close()
    return EvalReport(results=results, timeout_s=timeout_s, dataset=dataset)
