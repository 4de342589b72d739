"""`edge-sql eval` end to end through click's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from edge_sql.cli import main
from edge_sql.evaluation.datasets import load_bundled

NEVER_ENDS = "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT count(*) FROM r"
SPIDER_SAMPLE = Path(__file__).resolve().parent / "data" / "spider_sample"


def _run(*args: str):
    return CliRunner().invoke(main, ["eval", *args])


def test_bundled_with_some_right_some_wrong(tmp_path: Path) -> None:
    questions = load_bundled()
    predictions = {}
    for q in questions:
        if q.difficulty == "simple":
            predictions[q.id] = q.gold_sql  # right
        elif q.difficulty == "moderate":
            predictions[q.id] = "SELECT 1"  # wrong
        # challenging: no prediction
    pred_file = tmp_path / "pred.json"
    pred_file.write_text(json.dumps(predictions))
    out = tmp_path / "report.json"
    result = _run("--dataset", "bundled", "--predictions", str(pred_file), "--json", str(out))
    assert result.exit_code == 0, result.output
    lines = [line.split() for line in result.output.splitlines()]
    n_simple = sum(q.difficulty == "simple" for q in questions)
    n_moderate = sum(q.difficulty == "moderate" for q in questions)
    n_challenging = len(questions) - n_simple - n_moderate
    assert ["simple", str(n_simple), str(n_simple), "100.0%"] in lines
    assert ["moderate", "0", str(n_moderate), "0.0%"] in lines
    assert ["challenging", "0", str(n_challenging), "0.0%"] in lines
    overall = f"{100 * n_simple / len(questions):.1f}%"
    assert ["overall", str(n_simple), str(len(questions)), overall] in lines
    report = json.loads(out.read_text())
    assert report["overall"]["correct"] == n_simple and report["overall"]["total"] == len(questions)
    assert report["dataset"] == "bundled" and report["timeout_s"] == 30.0
    errors = {r["id"]: r["error"] for r in report["results"]}
    assert {errors[q.id] for q in questions if q.difficulty == "challenging"} == {"no prediction"}


def test_spider_sample_with_a_timeout(tmp_path: Path) -> None:
    pred_file = tmp_path / "pred.json"
    pred_file.write_text(
        json.dumps(
            {
                "0": "SELECT count(*) FROM student",
                "1": "SELECT name FROM student WHERE city = 'London' ORDER BY name DESC",
                "2": "SELECT title FROM course",
                "3": NEVER_ENDS,
            }
        )
    )
    out = tmp_path / "r.json"
    result = _run(
        "--dataset",
        str(SPIDER_SAMPLE / "dev.json"),
        "--format",
        "spider",
        "--db-root",
        str(SPIDER_SAMPLE / "database"),
        "--predictions",
        str(pred_file),
        "--timeout",
        "0.2",
        "--json",
        str(out),
    )
    assert result.exit_code == 0, result.output
    assert ["overall", "2", "8", "25.0%"] in [line.split() for line in result.output.splitlines()]
    results = {r["id"]: r for r in json.loads(out.read_text())["results"]}
    assert [results[str(i)]["correct"] for i in range(8)] == [True, True] + [False] * 6
    assert results["2"]["error"] is None
    assert results["3"]["error"] == "predicted SQL failed: query exceeded the 0.2 s time limit"


def test_missing_files_are_clear_errors(tmp_path: Path) -> None:
    result = _run("--dataset", "bundled", "--predictions", str(tmp_path / "nope.json"))
    assert result.exit_code == 1
    assert f"Error: predictions file not found: {tmp_path / 'nope.json'}" in result.output

    result = _run(
        "--dataset",
        str(tmp_path / "dev.json"),
        "--db-root",
        str(tmp_path),
        "--predictions",
        str(tmp_path / "nope.json"),
    )
    assert result.exit_code == 1 and "questions file not found" in result.output

    result = _run("--dataset", str(SPIDER_SAMPLE / "dev.json"), "--predictions", str(tmp_path / "p.json"))
    assert result.exit_code == 1 and "needs --db-root" in result.output


def test_unwritable_json_path_is_a_clear_error(tmp_path: Path) -> None:
    pred_file = tmp_path / "pred.json"
    pred_file.write_text("{}")
    target = tmp_path / "no_such_folder" / "r.json"
    result = _run("--dataset", "bundled", "--predictions", str(pred_file), "--json", str(target))
    assert result.exit_code == 1
    assert f"Error: cannot write the report to {target}: No such file or directory" in result.output
    assert "overall" in result.output  # the table was printed before the write failed


def test_missing_database_is_named(tmp_path: Path) -> None:
    pred_file = tmp_path / "pred.json"
    pred_file.write_text("{}")
    result = _run(
        "--dataset",
        str(SPIDER_SAMPLE / "dev.json"),
        "--format",
        "spider",
        "--db-root",
        str(tmp_path),
        "--predictions",
        str(pred_file),
    )
    assert result.exit_code == 1
    assert "2 database(s) missing: 'library' (expected at" in result.output


def test_help_explains_the_options() -> None:
    result = _run("--help")
    assert result.exit_code == 0
    for option in ("--dataset", "--format", "--db-root", "--predictions", "--timeout", "--json"):
        assert option in result.output
    assert "BIRD" in result.output
