"""The loop speaks the published protocol: scripted turns through the real grammar, llama.cpp
context, tools and database (tests/scripted_session.py), with the fixture Qwen3.5 model.

Published evidence (trl-lab/sqale): rounds of up to 14 calls with repeats, all run; results
numbered i/N; the forced-final message verbatim after the last round's results, quoting the
last query that ran; the final answer as SQL text over several lines.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from edge_sql.agent import Budget, load_prompt, run_episode
from edge_sql.tools import ReadOnlyDatabase, Toolbox
from episode_checks import check_each_token_evaluated_once, check_turns_parse, sha256
from scripted_session import ScriptedSession

DATA_DIR = Path(__file__).resolve().parents[1] / "edge_sql" / "data"
PROMPT = load_prompt()


def call(tool: str, **args) -> str:
    return json.dumps({"tool": tool, "args": args})


FOURTEEN = [  # a round as the published ones: several tools, the same call repeated up to 6 times
    call("list_tables"),
    call("list_tables"),
    *[call("describe_table", table_name="Album")] * 6,
    call("run_query", sql="SELECT COUNT(*) FROM Album"),
    call("run_query", sql="SELECT nope FROM Album"),
    call("sample_rows", table_name="Artist", limit=3),
    call("sample_rows", table_name="Artist", limit=3),
    call("distinct_values", table_name="Genre", column_name="Name", limit=2),
    call("run_query", sql="SELECT COUNT(*) FROM Album"),
]
MULTI_LINE_ANSWER = "SELECT COUNT(*) AS n\nFROM Album\nWHERE ArtistId = 1"


def first_segment(think: str, first_call: str) -> str:
    return f"{think}</think>\n\n{first_call}"


@pytest.fixture
def chinook(tmp_path: Path) -> Path:
    path = tmp_path / "chinook.sqlite"
    shutil.copyfile(DATA_DIR / "chinook" / "chinook.sqlite", path)
    return path


def run(tiny_gguf_fast: Path, db: Path, script: list[str], budget: Budget = Budget()):
    before = sha256(db)
    with ScriptedSession(tiny_gguf_fast, script=script, n_ctx=budget.max_tokens) as session:
        with ReadOnlyDatabase(db) as database:
            result = run_episode(session, Toolbox(database), "How many albums are there?", budget=budget)
        assert not session.script, "the episode stopped before the script ended"
        n_past = session.n_past
    assert sha256(db) == before
    check_turns_parse(result)
    check_each_token_evaluated_once(result, n_past)
    assert n_past <= budget.max_tokens
    return result


def test_a_fourteen_call_round_with_repeats_runs_every_call_numbered(tiny_gguf_fast, chinook):
    script = [
        first_segment("I look around.", FOURTEEN[0]),
        *("\n" + c for c in FOURTEEN[1:]),
        "",
        first_segment("Done.", call("submit_sql", sql="SELECT COUNT(*) FROM Album")),
    ]
    result = run(tiny_gguf_fast, chinook, script)
    assert Budget().max_calls_per_turn is None  # no cap that training did not have
    first = result.rounds[0]
    assert [c.tool for c in first.calls] == [json.loads(c)["tool"] for c in FOURTEEN]
    describe = [c.output for c in first.calls if c.tool == "describe_table"]
    assert len(describe) == 6 and len(set(describe)) == 1  # a repeated call runs again, same result
    assert [c.ok for c in first.calls].count(False) == 1
    results_turn = result.transcript.split("<|im_start|>user\n")[2].split("<|im_end|>")[0]
    labels = re.findall(r"^Result \((\d+)/(\d+)\):$", results_turn, re.MULTILINE)
    assert labels == [(str(i), "14") for i in range(1, 15)]
    assert results_turn.count(describe[0]) == 6  # the repeated result is repeated
    assert results_turn.endswith("\n\n[5 tool turns left before you must answer]")
    assert result.stop == "submitted" and result.rows == [[347]]


def test_json_layouts_and_blank_lines_between_calls_run(tiny_gguf_fast, chinook):
    pretty = '{\n  "tool": "describe_table",\n  "args": {"table_name": "Genre"}\n}'
    compact = '{"tool":"run_query","args":{"sql":"SELECT COUNT(*) FROM Genre"}}'
    script = [
        first_segment("Two calls.", pretty),
        "\n\n\n" + compact,
        "\n",
        first_segment("Submit.", call("submit_sql", sql="SELECT COUNT(*) FROM Genre")),
    ]
    result = run(tiny_gguf_fast, chinook, script)
    calls = result.rounds[0].calls
    assert [(c.tool, c.args, c.ok) for c in calls] == [
        ("describe_table", {"table_name": "Genre"}, True),
        ("run_query", {"sql": "SELECT COUNT(*) FROM Genre"}, True),
    ]
    assert pretty + "\nResult (1/2):\n" in result.transcript  # echoed as the model wrote it
    assert result.rows == [[25]]


@pytest.mark.parametrize(
    "answer", [MULTI_LINE_ANSWER, "```sql\n" + MULTI_LINE_ANSWER + ";\n```", MULTI_LINE_ANSWER + ";"]
)
def test_forced_final_turn_is_the_published_message_and_takes_sql_text(tiny_gguf_fast, chinook, answer):
    last_good = "SELECT COUNT(*) FROM Album"
    script = [
        first_segment("Count.", call("run_query", sql=last_good)),
        "\n" + call("run_query", sql="SELECT nope"),
        "",
        "I will return a filtered count.</think>\n\n" + answer,
    ]
    result = run(tiny_gguf_fast, chinook, script, Budget(max_rounds=1))
    results_turn = result.transcript.split("<|im_start|>user\n")[2].split("<|im_end|>")[0]
    assert results_turn.endswith("\n\n" + PROMPT.forced_text(last_good))
    assert PROMPT.forced_text(last_good) == (
        "You have reached the exploration limit. Now generate the final SQL query to answer the question. "
        "Return only the SQL query. Your last query that executed without error was:\n"
        f"{last_good}\n"
        "If you are not sure of an improvement, return that query."
    )
    assert "tool turns left" not in results_turn  # the message takes the budget line's place
    assert result.forced and result.force_reason == "max_rounds" and not result.fallback
    assert result.sql == result.answer == MULTI_LINE_ANSWER  # the same statement whatever the form
    assert result.rows == [[2]]


PROSE_AND_FENCE = (
    "You can use this query to count the albums of artist 1:\n\n```sql\n"
    + MULTI_LINE_ANSWER
    + "\n```\n\nIt filters on ArtistId."
)  # the grammar allows no `;` before the end


@pytest.mark.parametrize("answer", [PROSE_AND_FENCE, "The answer is:\n" + MULTI_LINE_ANSWER + ";"])
def test_a_final_answer_in_prose_runs_its_query(tiny_gguf_fast, chinook, answer):
    """A small model's answer: a sentence and a fenced block (ran whole before: `near "You":
    syntax error`), or a sentence and the query: the query runs."""
    script = [
        first_segment("Count.", call("run_query", sql="SELECT COUNT(*) FROM Album")),
        "",
        "Done.</think>\n\n" + answer,
    ]
    result = run(tiny_gguf_fast, chinook, script, Budget(max_rounds=1))
    assert result.answer == result.sql == MULTI_LINE_ANSWER and not result.fallback
    assert result.rows == [[2]] and result.error is None


def test_forced_message_without_a_good_query_and_a_broken_answer(tiny_gguf_fast, chinook):
    script = [
        first_segment("Try.", call("run_query", sql="SELECT nope")),
        "",
        "Still unsure.</think>\n\nSELECT nope FROM nowhere",
    ]
    result = run(tiny_gguf_fast, chinook, script, Budget(max_rounds=1))
    results_turn = result.transcript.split("<|im_start|>user\n")[2].split("<|im_end|>")[0]
    assert results_turn.endswith("\n\n" + PROMPT.forced_final_no_query)
    assert result.sql is None and not result.fallback
    assert result.error == "the answer failed to run: no such table: nowhere"
