"""Loaders (BIRD mini-dev, the Spider-format sample, malformed files) and predictions files."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from edge_sql.errors import DatabaseError
from edge_sql.evaluation.datasets import (
    DatasetError,
    base_id,
    check_databases,
    load_bird,
    load_bundled,
    load_dataset,
    load_spider,
    require_databases,
)
from edge_sql.evaluation.predictions import PredictionsError, load_predictions
from edge_sql.evaluation.scoring import evaluate

# A copy of BIRD mini-dev's question file (CC BY-SA 4.0, see its README)
BIRD_MINIDEV = Path(__file__).resolve().parent / "data" / "bird_minidev" / "mini_dev_sqlite.json"
SPIDER_SAMPLE = Path(__file__).resolve().parent / "data" / "spider_sample"


def test_bird_minidev_parses(tmp_path: Path) -> None:
    questions = load_bird(BIRD_MINIDEV, tmp_path / "dev_databases")
    assert len(questions) == 500
    assert Counter(q.difficulty for q in questions) == {
        "simple": 148,
        "moderate": 250,
        "challenging": 102,
    }
    assert len({q.db_id for q in questions}) == 11
    first = questions[0]
    assert first.id == "1471" and first.db_id == "debit_card_specializing"
    assert first.question == "What is the ratio of customers who pay in EUR against customers who pay in CZK?"
    assert first.gold_sql.startswith("SELECT CAST(SUM(IIF(Currency = 'EUR', 1, 0)) AS FLOAT)")
    assert first.evidence.startswith("ratio of customers who pay in EUR")
    assert first.db_path == tmp_path / "dev_databases" / "debit_card_specializing" / "debit_card_specializing.sqlite"
    assert len({q.id for q in questions}) == 500


def test_bird_minidev_repeated_ids_stay_distinct(tmp_path: Path) -> None:
    """mini-dev lists questions 137 and 138 twice, verbatim: the repeats get `#2`."""
    ids = [q.id for q in load_bird(BIRD_MINIDEV, tmp_path)]
    assert ids.count("137") == ids.count("137#2") == ids.count("138#2") == 1
    assert base_id("137#2") == "137" and base_id("chinook-001") == "chinook-001"


def test_missing_databases_are_listed_and_named(tmp_path: Path) -> None:
    questions = load_bird(BIRD_MINIDEV, tmp_path)
    missing = check_databases(questions)
    assert len(missing) == 11
    assert missing["formula_1"] == tmp_path / "formula_1" / "formula_1.sqlite"
    with pytest.raises(DatabaseError, match=r"11 database\(s\) missing: 'california_schools' \(expected at "):
        require_databases(questions)
    with pytest.raises(DatabaseError, match="'financial'"):
        evaluate([q for q in questions if q.db_id == "financial"], {})


def test_spider_sample_parses_and_its_gold_scores_100() -> None:
    questions = load_spider(SPIDER_SAMPLE / "dev.json", SPIDER_SAMPLE / "database")
    assert [q.id for q in questions] == [str(i) for i in range(8)]
    assert Counter(q.db_id for q in questions) == {"school": 5, "library": 3}
    assert all(q.difficulty is None and q.evidence is None for q in questions)
    assert questions[1].question == "What are the names of the students who live in London?"
    assert questions[1].gold_sql == "SELECT name FROM student WHERE city = 'London'"
    assert check_databases(questions) == {}
    report = evaluate(questions, {q.id: q.gold_sql for q in questions})
    assert (report.overall.correct, report.overall.total) == (8, 8)
    assert report.by_difficulty == {}


def test_bundled_loads_through_load_dataset() -> None:
    assert load_dataset("bundled") == load_bundled()
    assert load_dataset(SPIDER_SAMPLE / "dev.json", fmt="spider", db_root=SPIDER_SAMPLE / "database")[0].id == "0"


def _write(path: Path, content: str) -> Path:
    path.write_text(content, encoding="utf-8")
    return path


GOOD_ENTRY = {
    "question_id": 1,
    "db_id": "x",
    "question": "q?",
    "evidence": "",
    "SQL": "SELECT 1",
    "difficulty": "simple",
}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "is not valid JSON"),
        ('{"a": 1}', "must hold a JSON list"),
        ("[3]", "entry 0 is not a JSON object"),
        (
            json.dumps([GOOD_ENTRY, {k: v for k, v in GOOD_ENTRY.items() if k != "SQL"}]),
            "entry 1 lacks the field 'SQL'",
        ),
        (
            json.dumps([{**GOOD_ENTRY, "question": "  "}]),
            "entry 0 has an empty or non-text 'question'",
        ),
        (json.dumps([{**GOOD_ENTRY, "evidence": 5}]), "entry 0 has a non-text 'evidence'"),
    ],
)
def test_malformed_bird_file(tmp_path: Path, content: str, message: str) -> None:
    path = _write(tmp_path / "dev.json", content)
    with pytest.raises(DatasetError, match=message) as caught:
        load_bird(path, tmp_path)
    assert str(path) in str(caught.value)


def test_bird_empty_evidence_and_missing_id(tmp_path: Path) -> None:
    entry = {k: v for k, v in GOOD_ENTRY.items() if k != "question_id"}
    questions = load_bird(_write(tmp_path / "dev.json", json.dumps([entry, entry])), tmp_path)
    assert [q.id for q in questions] == ["0", "1"]
    assert questions[0].evidence is None and questions[0].difficulty == "simple"


def test_malformed_spider_file(tmp_path: Path) -> None:
    path = _write(tmp_path / "dev.json", json.dumps([{"db_id": "x", "question": "q?", "SQL": "SELECT 1"}]))
    with pytest.raises(DatasetError, match="entry 0 lacks the field 'query'"):
        load_spider(path, tmp_path)


def test_missing_questions_file_and_format_errors(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="questions file not found"):
        load_bird(tmp_path / "absent.json", tmp_path)
    with pytest.raises(DatasetError, match="needs --db-root"):
        load_dataset(tmp_path / "dev.json")
    with pytest.raises(DatasetError, match="unknown dataset format 'wikisql'"):
        load_dataset(tmp_path / "dev.json", fmt="wikisql", db_root=tmp_path)


# ---- predictions files


def test_predictions_by_question_id(tmp_path: Path) -> None:
    questions = load_bundled()
    path = _write(tmp_path / "p.json", json.dumps({"chinook-001": " SELECT 1\n", "northwind-002": "SELECT 2"}))
    assert load_predictions(path, questions) == {
        "chinook-001": "SELECT 1",
        "northwind-002": "SELECT 2",
    }


def test_predictions_in_birds_own_format(tmp_path: Path) -> None:
    questions = load_bundled()
    raw = {str(i): f"{q.gold_sql}\t----- bird -----\t{q.db_id}" for i, q in enumerate(questions)}
    predictions = load_predictions(_write(tmp_path / "predict_dev.json", json.dumps(raw)), questions)
    assert predictions == {q.id: q.gold_sql for q in questions}
    assert evaluate(questions, predictions).overall.percent == 100.0


def test_bird_format_on_minidev_maps_positions_to_ids(tmp_path: Path) -> None:
    questions = load_bird(BIRD_MINIDEV, tmp_path)
    raw = {
        "0": "SELECT 1\t----- bird -----\tdebit_card_specializing",
        "487": "SELECT 2\t----- bird -----\tfinancial",
    }
    assert load_predictions(_write(tmp_path / "p.json", json.dumps(raw)), questions) == {
        "1471": "SELECT 1",
        "137#2": "SELECT 2",
    }


def test_plain_id_covers_repeated_questions(tmp_path: Path) -> None:
    questions = [q for q in load_bird(BIRD_MINIDEV, tmp_path) if base_id(q.id) == "137"]
    assert [q.id for q in questions] == ["137", "137#2"]
    assert load_predictions(_write(tmp_path / "p.json", '{"137": "SELECT 1"}'), questions) == {"137": "SELECT 1"}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[]", "must hold a JSON object"),
        ("{", "is not valid JSON"),
        ('{"chinook-001": 5}', "the prediction for 'chinook-001' is not a string"),
        (
            '{"chinook-001": "SELECT 1", "spider-7": "SELECT 2"}',
            r"1 prediction id\(s\) match no question.*'spider-7'",
        ),
        (
            '{"999": "SELECT 1\\t----- bird -----\\tchinook"}',
            "BIRD-format key '999' is not a question position",
        ),
        (
            '{"0": "SELECT 1\\t----- bird -----\\tnorthwind"}',
            "names database 'northwind' but question 0 is about 'chinook'",
        ),
    ],
)
def test_bad_predictions_files(tmp_path: Path, content: str, message: str) -> None:
    with pytest.raises(PredictionsError, match=message):
        load_predictions(_write(tmp_path / "p.json", content), load_bundled())


def test_missing_predictions_file(tmp_path: Path) -> None:
    with pytest.raises(PredictionsError, match="predictions file not found"):
        load_predictions(tmp_path / "absent.json", load_bundled())
