"""`edge-sql eval --ray`: scoring a predictions file with one Ray task per database.

Questions are grouped by database; each group is one task that opens its database once and
scores its predictions with the local scorer's own `score_on_database`, so every verdict (and
error text) is the one `edge-sql eval` gives. A database a node does not see at the driver's
path is copied there first (`edge_sql.cluster.files`). Results come back in the dataset's order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from edge_sql.cluster.files import SourceFile, start_file_server
from edge_sql.cluster.ray_support import connect
from edge_sql.evaluation.datasets import Question, base_id, require_databases
from edge_sql.evaluation.outcomes import EvalReport, QuestionResult

Item = tuple[str | None, str]  # (predicted SQL, gold SQL)


def score_database(
    source: SourceFile, server: str, items: list[Item], timeout_s: float
) -> list[tuple[bool, str | None]]:
    """Every (correct, error) of one database's predictions (what a Ray task runs)."""
    from edge_sql.cluster.files import local_file
    from edge_sql.evaluation.scoring import score_on_database
    from edge_sql.tools.database import ReadOnlyDatabase

    with ReadOnlyDatabase(local_file(source, server), time_limit_s=timeout_s) as db:
        scores = [score_on_database(db, pred, gold, timeout_s=timeout_s) for pred, gold in items]
    return [(s.correct, s.error) for s in scores]


def evaluate_on_ray(
    questions: Sequence[Question],
    predictions: Mapping[str, str],
    *,
    address: str,
    timeout_s: float,
    dataset: str | None = None,
    log: Callable[[str], None] = lambda _msg: None,
) -> EvalReport:
    """What `scoring.evaluate` returns, computed by per-database tasks on the Ray cluster."""
    require_databases(questions)
    ray = connect(address, log=log)
    groups: dict[str, list[int]] = {}
    for index, question in enumerate(questions):
        groups.setdefault(str(question.db_path), []).append(index)
    predicted = [predictions.get(q.id, predictions.get(base_id(q.id))) for q in questions]
    server, server_name = start_file_server(list(groups))
    try:
        task = ray.remote(num_cpus=1)(score_database)
        refs: dict[str, Any] = {  # Any: ray
            db: task.remote(
                SourceFile.of(db), server_name, [(predicted[i], questions[i].gold_sql) for i in indices], timeout_s
            )
            for db, indices in groups.items()
        }
        log(f"scoring {len(questions)} predictions in {len(refs)} per-database Ray tasks")
        verdicts: dict[int, tuple[bool, str | None]] = {}
        for db, ref in refs.items():
            verdicts.update(zip(groups[db], ray.get(ref)))
    finally:
        ray.kill(server)
    results = [
        QuestionResult(
            id=q.id,
            db_id=q.db_id,
            difficulty=q.difficulty,
            correct=verdicts[i][0],
            error=verdicts[i][1],
            predicted_sql=predicted[i],
            gold_sql=q.gold_sql,
        )
        for i, q in enumerate(questions)
    ]
    return EvalReport(results=results, timeout_s=timeout_s, dataset=dataset)
