"""The scorer on hand-made cases, on a small SQLite database built in each test."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from edge_sql.errors import DatabaseError
from edge_sql.evaluation.datasets import Question
from edge_sql.evaluation.outcomes import EvalReport
from edge_sql.evaluation.scoring import NO_PREDICTION, Score, evaluate, score_prediction


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "cases.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript(
        """
        CREATE TABLE people (id INTEGER PRIMARY KEY, name TEXT, city TEXT, score REAL, code TEXT);
        INSERT INTO people VALUES
            (1, 'Ana', 'Lisbon', 1.5, '1'),
            (2, 'Bo', 'Oslo', 2.0, '2'),
            (3, 'Cy', 'Lisbon', NULL, '3'),
            (4, 'Di', NULL, 0.5, '4');
        """
    )
    conn.commit()
    conn.close()
    return path


# (predicted SQL, gold SQL, expected correct): each pair is one rule of BIRD's set comparison.
CASES = {
    "same query": ("SELECT name FROM people", "SELECT name FROM people", True),
    "row order ignored": (
        "SELECT name FROM people ORDER BY name DESC",
        "SELECT name FROM people ORDER BY name",
        True,
    ),
    "duplicate rows ignored": ("SELECT city FROM people", "SELECT DISTINCT city FROM people", True),
    "a missing row is wrong": (
        "SELECT name FROM people WHERE id < 4",
        "SELECT name FROM people",
        False,
    ),
    "an extra row is wrong": (
        "SELECT name FROM people",
        "SELECT name FROM people WHERE id < 4",
        False,
    ),
    "NULL equals NULL": (
        "SELECT name, city FROM people WHERE city IS NULL",
        "SELECT 'Di', NULL",
        True,
    ),
    "NULL is not 0": ("SELECT NULL", "SELECT 0", False),
    "NULL is not empty text": ("SELECT NULL", "SELECT ''", False),
    "floats compare exactly": ("SELECT 0.1 + 0.2", "SELECT 0.3", False),
    "rounded float matches": ("SELECT ROUND(0.1 + 0.2, 2)", "SELECT 0.3", True),
    "integer equals equal float": ("SELECT 1", "SELECT 1.0", True),
    "AVG float equals integer value": (
        "SELECT AVG(score) * 2 FROM people WHERE id = 2",
        "SELECT 4",
        True,
    ),
    "number is not text": ("SELECT 1", "SELECT '1'", False),
    "text column is not its number": (
        "SELECT code FROM people WHERE id = 1",
        "SELECT id FROM people WHERE id = 1",
        False,
    ),
    "column order counts": (
        "SELECT name, city FROM people",
        "SELECT city, name FROM people",
        False,
    ),
    "an extra column is wrong": ("SELECT id, name FROM people", "SELECT name FROM people", False),
    "empty equals empty": (
        "SELECT name FROM people WHERE id > 99",
        "SELECT city FROM people WHERE 0",
        True,
    ),
    "empty is not a NULL row": ("SELECT name FROM people WHERE id > 99", "SELECT NULL", False),
    "text case counts": ("SELECT 'lisbon'", "SELECT 'Lisbon'", False),
    "column names do not count": (
        "SELECT name AS who FROM people",
        "SELECT name FROM people",
        True,
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_hand_made_case(db: Path, name: str) -> None:
    pred, gold, expected = CASES[name]
    assert score_prediction(pred, gold, db) == Score(expected, None)


@pytest.mark.parametrize("name", list(CASES))
def test_case_agrees_with_birds_own_rule(db: Path, name: str) -> None:
    """BIRD's evaluation.py: `set(predicted_res) == set(ground_truth_res)` on fetchall()."""
    pred, gold, _ = CASES[name]
    conn = sqlite3.connect(db)
    bird_says = set(conn.execute(pred).fetchall()) == set(conn.execute(gold).fetchall())
    conn.close()
    assert score_prediction(pred, gold, db).correct is bird_says


def test_sql_error_scores_zero_with_the_reason(db: Path) -> None:
    score = score_prediction("SELECT nickname FROM people", "SELECT name FROM people", db)
    assert not score.correct
    assert score.error == "predicted SQL failed: no such column: nickname"


def test_syntax_error_scores_zero(db: Path) -> None:
    score = score_prediction("SELEC name FROM people", "SELECT name FROM people", db)
    assert not score.correct and score.error.startswith("predicted SQL failed: ")
    assert "syntax error" in score.error


def test_failing_gold_scores_zero_and_says_so(db: Path) -> None:
    score = score_prediction("SELECT name FROM people", "SELECT name FROM nowhere", db)
    assert score == Score(False, "gold SQL failed: no such table: nowhere")


def test_write_is_refused_and_leaves_the_file_unchanged(db: Path) -> None:
    before = db.read_bytes()
    score = score_prediction("DELETE FROM people", "SELECT 1", db)
    assert not score.correct and "read-only" in score.error
    assert db.read_bytes() == before


def test_two_statements_score_zero(db: Path) -> None:
    score = score_prediction("SELECT 1; SELECT 2", "SELECT 1", db)
    assert not score.correct and "one SQL statement" in score.error


def test_time_out_scores_zero(db: Path) -> None:
    never_ends = "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT count(*) FROM r"
    started = time.monotonic()
    score = score_prediction(never_ends, "SELECT 1", db, timeout_s=0.3)
    elapsed = time.monotonic() - started
    assert not score.correct
    assert score.error == "predicted SQL failed: query exceeded the 0.3 s time limit"
    assert 0.25 < elapsed < 5.0


@pytest.mark.parametrize("pred", [None, "", "   \n"])
def test_missing_prediction_scores_zero(db: Path, pred: str | None) -> None:
    assert score_prediction(pred, "SELECT 1", db) == Score(False, NO_PREDICTION)


def test_missing_database_is_a_setup_error(tmp_path: Path) -> None:
    with pytest.raises(DatabaseError, match="not found"):
        score_prediction("SELECT 1", "SELECT 1", tmp_path / "absent.sqlite")


def _question(qid: str, db: Path, gold: str, difficulty: str | None) -> Question:
    return Question(
        id=qid,
        db_id="cases",
        db_path=db,
        question=f"q {qid}",
        evidence=None,
        gold_sql=gold,
        difficulty=difficulty,
    )


def test_evaluate_counts_overall_and_per_difficulty(db: Path) -> None:
    questions = [
        _question("a", db, "SELECT name FROM people", "simple"),
        _question("b", db, "SELECT count(*) FROM people", "simple"),
        _question("c", db, "SELECT city FROM people", "moderate"),
        _question("d", db, "SELECT max(score) FROM people", "challenging"),
        _question("e", db, "SELECT min(id) FROM people", "challenging"),
    ]
    predictions = {
        "a": "SELECT name FROM people ORDER BY id DESC",  # right
        "b": "SELECT count(city) FROM people",  # wrong: 3 != 4
        "c": "SELECT city FROM peeple",  # error
        "d": "SELECT 2.0",  # right (2.0 == max)
        # "e": no prediction
    }
    report = evaluate(questions, predictions, timeout_s=5.0)
    assert (report.overall.correct, report.overall.total) == (2, 5)
    assert report.overall.percent == pytest.approx(40.0)
    assert {d: (a.correct, a.total) for d, a in report.by_difficulty.items()} == {
        "simple": (1, 2),
        "moderate": (0, 1),
        "challenging": (1, 2),
    }
    assert list(report.by_difficulty) == ["simple", "moderate", "challenging"]
    by_id = {r.id: r for r in report.results}
    assert by_id["b"].error is None and not by_id["b"].correct
    assert by_id["c"].error == "predicted SQL failed: no such table: peeple"
    assert by_id["e"].error == NO_PREDICTION and by_id["e"].predicted_sql is None


def test_report_json_round_trip_and_table(db: Path, tmp_path: Path) -> None:
    questions = [_question("a", db, "SELECT 1", "simple"), _question("b", db, "SELECT 2", None)]
    report = evaluate(questions, {"a": "SELECT 1", "b": "SELECT 3"}, timeout_s=2.0, dataset="cases")
    out = tmp_path / "report.json"
    report.write_json(out)
    data = json.loads(out.read_text())
    assert data["overall"] == {"correct": 1, "total": 2, "percent": 50.0}
    assert data["by_difficulty"] == {"simple": {"correct": 1, "total": 1, "percent": 100.0}}
    assert data["timeout_s"] == 2.0 and data["dataset"] == "cases"
    assert [r["id"] for r in data["results"]] == ["a", "b"]
    assert EvalReport.from_json(data).to_json() == data
    table = report.format_table().splitlines()
    assert table[0].split() == ["difficulty", "correct", "total", "accuracy"]
    assert table[1].split() == ["simple", "1", "1", "100.0%"]
    assert table[-1].split() == ["overall", "1", "2", "50.0%"]
