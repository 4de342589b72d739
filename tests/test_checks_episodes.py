"""Checks on real episodes of the trained fixture: every answer carries them, each sighting points
at a call of that episode that shows the name or value (or at the question), `run` prints the
line under the answer and `--json` the whole object, and the database stays byte-identical."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import edge_sql
from edge_sql.api import Ask
from edge_sql.bench.confidence import confidence_figures, confidence_lines
from edge_sql.evaluation.datasets import load_bundled
from edge_sql.evaluation.scoring import score_prediction
from fixture_training import ask_trained

QUESTIONS = ["chinook-001", "chinook-002", "chinook-003", "chinook-006"]  # bundled, with their gold SQL


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def episodes(tiny_trained_gguf, tmp_path_factory):
    db = tmp_path_factory.mktemp("checks") / "chinook.sqlite"
    db.write_bytes((Path(edge_sql.__file__).parent / "data" / "chinook" / "chinook.sqlite").read_bytes())
    before = digest(db)
    questions = {q.id: q for q in load_bundled()}
    asked = [questions[qid] for _seed in (1, 2) for qid in QUESTIONS]
    results = ask_trained(
        tiny_trained_gguf, [Ask(q.question, db, q.evidence, seed) for seed in (1, 2) for q in asked[: len(QUESTIONS)]]
    )
    assert digest(db) == before
    return db, results, asked


def mentions(name: str, text: str) -> bool:
    return re.search(r"(?<![\w$])" + re.escape(name) + r"(?![\w$])", text, re.IGNORECASE) is not None


def test_every_answer_carries_checks_whose_sightings_point_at_real_calls(episodes) -> None:
    _db, results, _asked = episodes
    answered = [r for r in results if r.sql is not None]
    assert answered  # the trained fixture writes queries that run
    for result in results:
        if result.sql is None and not result.answer:
            assert result.checks is None
            continue
        checks = result.checks
        assert checks is not None and checks.provenance and checks.sql == (result.sql or result.answer)
        assert checks.confidence in ("checked", "unchecked", "doubtful")
        assert result.to_json()["checks"] == checks.to_json()
        if result.fallback:
            assert "fallback" in [f.code for f in checks.findings] and checks.confidence == "doubtful"
        if result.sql is not None and not result.rows:
            assert "no_rows" in [f.code for f in checks.findings]
        calls = {(r.index, i): c for r in result.rounds for i, c in enumerate(r.calls)}
        for use in checks.names:
            assert use.seen is not None
            for sighting in use.seen:
                if sighting.round is None:
                    text = {"question": result.question, "evidence": result.evidence or ""}[sighting.tool]
                    assert mentions(use.column or use.table, text)
                    continue
                call = calls[(sighting.round, sighting.call)]
                assert call.ok and call.tool == sighting.tool and call.tool != "submit_sql"
                shown = call.output + " " + " ".join(str(v) for v in call.args.values())
                assert mentions(use.column or use.table, shown), (use.name, call)
            if not use.seen:
                assert f"{use.kind} {use.name} was never shown to the model" in checks.reasons


def test_run_prints_the_checks_line_under_the_answer_and_json_carries_them(tiny_trained_gguf, chinook_db) -> None:
    before = digest(chinook_db)
    base = [
        sys.executable,
        "-m",
        "edge_sql",
        "run",
        "--db",
        str(chinook_db),
        "--model",
        str(tiny_trained_gguf),
        "--question",
        "What is the largest Milliseconds in Track?",
        "--seed",
        "2",
        "--no-tune",
        "--threads",
        "1",
        "--ctx",
        "4096",
        "--think-tokens",
        "24",
        "--calls-per-turn",
        "2",
    ]
    as_json = subprocess.run([*base, "--json"], capture_output=True, text=True)
    data = json.loads(as_json.stdout.strip().splitlines()[-1])
    shown = subprocess.run(base, capture_output=True, text=True)
    assert digest(chinook_db) == before
    lines = shown.stdout.splitlines()
    if data["sql"] is None:
        assert as_json.returncode == 3 and not any(line.startswith("checks: ") for line in lines)
        return
    checks = data["checks"]
    assert set(checks) == {"confidence", "reasons", "findings", "names", "values", "provenance", "agreement"}
    assert checks["provenance"] is True and checks["agreement"] is None
    line = next(i for i, text in enumerate(lines) if text.startswith("checks: "))
    assert lines[line].startswith(f"checks: {checks['confidence']} (")
    assert lines[line + 1].startswith("(") and "rounds" in lines[line + 1]  # the stats line follows it


def test_abstain_below_answers_not_sure_with_exit_status_4(tiny_trained_gguf, chinook_db) -> None:
    """`--vote 3 --abstain-below 1`: "not sure" (exit 4) unless all three episodes agree; the JSON
    says why either way, and the vote's agreement is in the checks."""
    base = [
        sys.executable,
        "-m",
        "edge_sql",
        "run",
        "--db",
        str(chinook_db),
        "--model",
        str(tiny_trained_gguf),
        "--question",
        "Which customer spent the most money?",
        "--seed",
        "1",
        "--no-tune",
        "--threads",
        "1",
        "--ctx",
        "4096",
        "--think-tokens",
        "24",
        "--calls-per-turn",
        "2",
        "--vote",
        "3",
        "--abstain-below",
        "1",
    ]
    as_json = subprocess.run([*base, "--json"], capture_output=True, text=True)
    data = json.loads(as_json.stdout.strip().splitlines()[-1])
    vote = data["stats"]["vote"]
    if data["stop"] == "abstained":
        assert as_json.returncode == 4 and data["sql"] is None and data["rows"] == [] and data["answer"]
        assert vote["agreed"] < 3 and data["checks"]["agreement"] == round(vote["agreed"] / 3, 4)
        assert data["error"].startswith(f"not sure: {vote['agreed']} of 3 episodes agree on this result")
        shown = subprocess.run(base, capture_output=True, text=True)
        assert shown.returncode == 4
        assert any(
            line.startswith("not sure: ") and "; the voted SQL was: " in line for line in shown.stdout.splitlines()
        )
    else:
        assert as_json.returncode in (0, 3)
        assert data["sql"] is None or (vote["agreed"] == 3 and data["checks"]["agreement"] == 1.0)
    refused = subprocess.run(base[:-4] + ["--abstain-below", "0.5"], capture_output=True, text=True)
    assert refused.returncode == 2 and "--abstain-below needs --vote K" in refused.stderr


def test_accuracy_by_confidence_on_the_trained_fixtures_episodes(episodes) -> None:
    """What `edge-sql bench` reports (bench/confidence.py), on real episodes scored against the
    gold SQL: each level's answers and right ones, and the risk-coverage rows built from them."""
    db, results, asked = episodes
    records = [
        {
            "mode": "given",
            "confidence": r.checks.confidence if r.checks else None,
            "correct": score_prediction(r.sql, q.gold_sql, db).correct,
        }
        for r, q in zip(results, asked)
    ]
    figures = confidence_figures(records, ["given"])["given"]
    labelled = [r for r in records if r["confidence"] is not None]
    assert figures["questions"] == len(records) and figures["unlabelled"] == len(records) - len(labelled)
    for level in ("checked", "unchecked", "doubtful"):
        mine = [r for r in labelled if r["confidence"] == level]
        assert figures["levels"][level]["answers"] == len(mine)
        assert figures["levels"][level]["right"] == sum(r["correct"] for r in mine)
    answered = [p["answered"] for p in figures["coverage"]]
    assert [p["level"] for p in figures["coverage"]] == ["checked", "unchecked", "doubtful"]
    assert answered == sorted(answered) and answered[-1] == len(labelled)
    assert figures["coverage"][-1]["right"] == sum(r["correct"] for r in labelled)
    lines = confidence_lines([{"name": "trained", "confidence": {"given": figures}}])
    assert lines[5].startswith("| trained | given | checked | ")
    print("\n".join(lines))  # the table, for the record (pytest -s)
