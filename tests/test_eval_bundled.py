"""The bundled evaluation set: its composition, every gold query, and oracles on the scorer."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from edge_sql.evaluation.datasets import bundled_data_dir, bundled_questions_file, load_bundled
from edge_sql.evaluation.scoring import NO_PREDICTION, evaluate
from edge_sql.tools.database import ReadOnlyDatabase

QUESTIONS = load_bundled()
LIMIT = re.compile(r"\bLIMIT\s+(\d+)\s*$", re.IGNORECASE)


def test_composition() -> None:
    assert len(QUESTIONS) >= 60
    assert len({q.id for q in QUESTIONS}) == len(QUESTIONS)
    by_db = Counter(q.db_id for q in QUESTIONS)
    assert set(by_db) == {"chinook", "northwind"} and min(by_db.values()) >= 30
    for q in QUESTIONS:
        assert re.fullmatch(rf"{q.db_id}-\d{{3}}", q.id), q.id
        assert q.question.strip().endswith(("?", ".")), q.id
    shares = {d: n / len(QUESTIONS) for d, n in Counter(q.difficulty for q in QUESTIONS).items()}
    assert set(shares) == {"simple", "moderate", "challenging"}
    assert 0.35 <= shares["simple"] <= 0.45
    assert 0.35 <= shares["moderate"] <= 0.45
    assert 0.15 <= shares["challenging"] <= 0.25
    assert sum('"Order Details"' in q.gold_sql for q in QUESTIONS) >= 5


def test_database_paths_are_the_packaged_files() -> None:
    data = bundled_data_dir()
    assert bundled_questions_file() == data / "eval" / "edge_sql_eval.json"
    paths = {q.db_id: q.db_path for q in QUESTIONS}
    assert paths == {
        "chinook": data / "chinook" / "chinook.sqlite",
        "northwind": data / "northwind" / "northwind.sqlite",
    }
    assert all(p.is_file() for p in paths.values())
    assert (data / "eval" / "README.md").is_file()


def test_file_is_bird_format() -> None:
    raw = json.loads(bundled_questions_file().read_text(encoding="utf-8"))
    assert all(set(e) == {"question_id", "db_id", "question", "evidence", "SQL", "difficulty"} for e in raw)


@pytest.mark.parametrize("db_id", ["chinook", "northwind"])
def test_every_gold_query_runs_and_returns_rows(db_id: str) -> None:
    questions = [q for q in QUESTIONS if q.db_id == db_id]
    with ReadOnlyDatabase(questions[0].db_path, time_limit_s=10.0) as db:
        for q in questions:
            result = db.execute(q.gold_sql, max_rows=None)
            assert result.rows, f"{q.id} returns no rows"
            assert any(v is not None for v in result.rows[0]), f"{q.id} returns only NULLs"


def test_limit_answers_have_no_tie_at_the_cut() -> None:
    """For `ORDER BY ... LIMIT k`, the first k+1 rows of the order must differ at place k:
    rerun with the ORDER BY keys selected and check the k-th and (k+1)-th keys differ."""
    checked = 0
    for q in QUESTIONS:
        match = LIMIT.search(q.gold_sql)
        if not match:
            continue
        k = int(match.group(1))
        head, order_by = q.gold_sql[: match.start()].rsplit("ORDER BY", 1)
        keys = [re.sub(r"\s+(ASC|DESC)$", "", key.strip(), flags=re.IGNORECASE) for key in order_by.split(",")]
        select_keys = head.replace("SELECT ", "SELECT " + ", ".join(keys) + ", ", 1)
        probe = f"{select_keys} ORDER BY {order_by} LIMIT {k + 1}"
        with ReadOnlyDatabase(q.db_path) as db:
            rows = db.execute(probe, max_rows=None).rows
        assert len(rows) == k + 1, q.id
        width = len(keys)
        assert rows[k - 1][:width] != rows[k][:width], f"{q.id}: tie at place {k}"
        checked += 1
    assert checked >= 8


def test_gold_oracle_scores_100_percent() -> None:
    report = evaluate(QUESTIONS, {q.id: q.gold_sql for q in QUESTIONS}, timeout_s=30.0)
    assert (report.overall.correct, report.overall.total) == (len(QUESTIONS), len(QUESTIONS))
    assert report.overall.percent == 100.0
    for difficulty, accuracy in report.by_difficulty.items():
        assert accuracy.correct == accuracy.total > 0, difficulty
    assert all(r.error is None for r in report.results)


def test_select_1_oracle_scores_zero() -> None:
    """No bundled question has the answer {(1,)}, so `SELECT 1` is wrong everywhere."""
    report = evaluate(QUESTIONS, {q.id: "SELECT 1" for q in QUESTIONS})
    assert report.overall.correct == 0
    assert all(r.error is None and not r.correct for r in report.results)


def test_altered_limit_oracle_loses_exactly_the_limit_questions() -> None:
    """Gold SQL with `LIMIT k` changed to `LIMIT k+1` returns one row too many: wrong on those
    questions, right on all others."""
    predictions, altered = {}, Counter()
    for q in QUESTIONS:
        match = LIMIT.search(q.gold_sql)
        if match:
            predictions[q.id] = f"{q.gold_sql[: match.start()]}LIMIT {int(match.group(1)) + 1}"
            altered[q.difficulty] += 1
        else:
            predictions[q.id] = q.gold_sql
    report = evaluate(QUESTIONS, predictions)
    assert sum(altered.values()) >= 8
    assert report.overall.correct == len(QUESTIONS) - sum(altered.values())
    totals = Counter(q.difficulty for q in QUESTIONS)
    assert {d: a.correct for d, a in report.by_difficulty.items()} == {d: totals[d] - altered[d] for d in totals}
    wrong = {r.id for r in report.results if not r.correct}
    assert wrong == {q.id for q in QUESTIONS if LIMIT.search(q.gold_sql)}


def test_oracle_without_challenging_predictions() -> None:
    predictions = {q.id: q.gold_sql for q in QUESTIONS if q.difficulty != "challenging"}
    report = evaluate(QUESTIONS, predictions)
    accuracy = report.by_difficulty
    assert accuracy["challenging"].correct == 0 and accuracy["challenging"].total >= 10
    assert accuracy["simple"].percent == accuracy["moderate"].percent == 100.0
    assert report.overall.correct == len(QUESTIONS) - accuracy["challenging"].total
    assert {r.error for r in report.results if r.difficulty == "challenging"} == {NO_PREDICTION}


def test_swapped_gold_oracle_is_wrong_everywhere() -> None:
    """Each question answered with the next question's gold SQL on the same database: the
    bundled questions have pairwise different answers, so every one is wrong."""
    predictions = {}
    for db_id in ("chinook", "northwind"):
        same_db = [q for q in QUESTIONS if q.db_id == db_id]
        for q, other in zip(same_db, same_db[1:] + same_db[:1], strict=True):
            predictions[q.id] = other.gold_sql
    report = evaluate(QUESTIONS, predictions)
    assert report.overall.correct == 0
