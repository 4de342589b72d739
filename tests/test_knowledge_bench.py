"""The bench's knowledge modes on the bundled questions (real Chinook and Northwind files)."""

from __future__ import annotations

import json
import re

from click.testing import CliRunner

from edge_sql.agent.prompt import load_prompt
from edge_sql.bench.knowledge_modes import EXAMPLES, NOTES, BenchKnowledge
from edge_sql.bench.modes import parse_modes, prompt_for_mode
from edge_sql.cli import main
from edge_sql.evaluation.datasets import load_bundled
from edge_sql.knowledge import Knowledge
from edge_sql.knowledge.evidence import EVIDENCE_TOKEN_BOUND, utf8_bytes
from edge_sql.tools import ReadOnlyDatabase


def test_examples_are_the_other_questions_of_the_same_database(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGE_SQL_HOME", str(tmp_path))
    questions = {q.id: q for q in load_bundled()}
    bench = BenchKnowledge(questions, utf8_bytes)
    try:
        given = 0
        for question in questions.values():
            evidence = bench.evidence(EXAMPLES, question.id) or ""
            quoted = re.findall(r"a similar question '(.*?)' was answered by: ", evidence)
            others = {q.question for q in questions.values() if q.db_id == question.db_id and q.id != question.id}
            assert set(quoted) <= others, (question.question, evidence)  # never itself, never another db's
            given += bool(quoted)
            added = evidence.removeprefix(question.evidence + "; ") if question.evidence else evidence
            assert (
                len(quoted) <= 3 and utf8_bytes("; " + added) <= EVIDENCE_TOKEN_BOUND
            )  # the user's own is not counted
        assert given >= 0.9 * len(questions)  # a question sharing no word with any other gets none
        first = questions["chinook-001"]
        assert bench.evidence(NOTES, first.id) is None  # no notes in this store yet
    finally:
        bench.close()
    with ReadOnlyDatabase(first.db_path) as db, Knowledge.open(tmp_path) as kb:
        kb.add_note(db, "the catalogue is the Track table")
    bench = BenchKnowledge(questions, utf8_bytes)
    try:
        assert bench.evidence(NOTES, first.id) == "the catalogue is the Track table"
    finally:
        bench.close()


def test_the_knowledge_modes_are_named_and_keep_the_withheld_prompt():
    assert parse_modes("withheld,withheld+notes,withheld+examples") == ["withheld", NOTES, EXAMPLES]
    prompt = load_prompt()
    with ReadOnlyDatabase(load_bundled()[0].db_path) as db:
        assert prompt_for_mode(prompt, EXAMPLES, db) is prompt and prompt_for_mode(prompt, NOTES, db) is prompt


def test_a_bench_run_reports_the_knowledge_modes_beside_withheld(tiny_gguf_fast, tmp_path):
    out = tmp_path / "out"
    args = ["bench", "--base", str(tiny_gguf_fast), "--variants", str(tiny_gguf_fast), "--limit", "2"]
    args += ["--modes", "withheld,withheld+examples", "--threads", "1", "--ctx", "4096", "--out", str(out)]
    args += ["--no-tune", "--max-rounds", "1", "--think-tokens", "4", "--calls-per-turn", "1"]
    args += ["--budget", "max_final_sql_tokens=16", "--budget", "max_sql_chars=24", "--fidelity-tokens", "16"]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    report = json.loads((out / "bench.json").read_text())
    assert report["settings"]["modes"] == ["withheld", "withheld+examples"]
    modes = {e["mode"] for e in report["episodes"]}
    assert modes == {"withheld", "withheld+examples"}
    table = (out / "bench.md").read_text()
    assert "| tiny-Q4_0 | withheld |" in table and "| tiny-Q4_0 | withheld+examples |" in table
