"""The agent's parts without episodes: prompt template, call parser, budget, grammar text."""

from __future__ import annotations

import json
import re
from pathlib import Path

import llguidance
import pytest

from edge_sql.agent import Budget, PromptFileError, load_prompt, parse_call, parse_final_turn, parse_tool_turn
from edge_sql.agent.budget import RoundCounter
from edge_sql.agent.display import answer_text, call_line, table_text
from edge_sql.agent.grammar import (
    MAX_BYTES_PER_CHAR,
    StringBounds,
    call_max_tokens,
    final_grammar,
    first_call_grammar,
    next_call_grammar,
)
from edge_sql.agent.parsing import TurnParseError
from edge_sql.agent.prompt import DEFAULT_PROMPT_FILE
from edge_sql.agent.result import CallRecord, EpisodeResult
from edge_sql.runtime import Session
from edge_sql.tools import TOOL_SPECS

# ---- the prompt template ---------------------------------------------------------------------


def test_default_template_has_every_part_of_the_protocol():
    prompt = load_prompt()
    assert prompt.version == "sqale-v1"
    system = prompt.system_text(max_rounds=6)
    for spec in TOOL_SPECS:
        assert spec.signature() in system
    assert "You have 6 tool turns" in system
    assert '{"tool": "<name>", "args": {...}}' in system  # JSON braces survive rendering
    assert "{tools}" not in system and "{max_rounds}" not in system
    assert prompt.chat.assistant_prefix == "<think>\n"
    assert prompt.chat.turn_start == "<|im_start|>{role}\n" and prompt.chat.turn_end == "<|im_end|>"


def test_user_turn_with_and_without_evidence():
    prompt = load_prompt()
    assert prompt.user_text("  How many albums?  ") == "Question: How many albums?"
    assert prompt.user_text("How many albums?", "albums are rows of Album") == (
        "Question: How many albums?\nEvidence: albums are rows of Album")
    assert prompt.user_text("Q?", "   ") == "Question: Q?"


def test_budget_lines_and_forced_message():
    prompt = load_prompt()
    assert prompt.budget_text(4) == "[4 tool turns left before you must answer]"
    assert prompt.budget_text(1) == "[1 tool turn left before you must answer]"
    forced = prompt.forced_text("SELECT COUNT(*) FROM Album")
    assert "Exploration limit reached" in forced
    assert "SELECT COUNT(*) FROM Album" in forced and "Return it if you are unsure" in forced
    assert "No query has run without error yet" in prompt.forced_text(None)
    assert prompt.result_text('{"tool": "list_tables", "args": {}}', "Album\nArtist") == (
        '{"tool": "list_tables", "args": {}}\nResult:\nAlbum\nArtist')


def _write_variant(tmp_path: Path, old: str, new: str) -> Path:
    text = DEFAULT_PROMPT_FILE.read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / "prompt.toml"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return path


def test_prompt_file_replaces_the_template(tmp_path):
    path = _write_variant(tmp_path, 'version = "sqale-v1"', 'version = "mine-2"')
    path.write_text(path.read_text().replace('user_template = "Question: {question}{evidence}"',
                                             'user_template = "Q: {question}{evidence}"'))
    prompt = load_prompt(path)
    assert prompt.version == "mine-2" and prompt.source == str(path)
    assert prompt.user_text("Why?") == "Q: Why?"


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ('user_template = "Question: {question}{evidence}"', 'user_template = "Question: {evidence}"',
         "field `user_template` lacks the placeholder {question}"),
        ('budget_line = "[{n} tool turns left before you must answer]"', 'budget_line = "[{n} left {count}]"',
         "field `budget_line` has unknown placeholder {count}"),
        ('version = "sqale-v1"', "", "missing field `version`"),
        ('turn_end = "<|im_end|>"', "", "missing field `chat.turn_end`"),
        ('result_separator = "\\n\\n"', "result_separator = 3", "field `result_separator` must be a string"),
        ('version = "sqale-v1"', 'version = "sqale-v1', "is not valid TOML"),
        ('turn_start = "<|im_start|>{role}\\n"', 'turn_start = "<|im_start|>\\n"',
         "field `chat.turn_start` lacks the placeholder {role}"),
    ],
)
def test_bad_prompt_files_fail_with_one_clear_line(tmp_path, old, new, message):
    path = _write_variant(tmp_path, old, new)
    with pytest.raises(PromptFileError) as error:
        load_prompt(path)
    assert message in str(error.value)
    assert str(path) in str(error.value) and "\n" not in str(error.value)


def test_missing_prompt_file(tmp_path):
    with pytest.raises(PromptFileError, match="prompt file not found"):
        load_prompt(tmp_path / "nope.toml")


# ---- parsing ---------------------------------------------------------------------------------


def test_parse_call_accepts_the_protocol_format():
    call = parse_call('{"tool": "sample_rows", "args": {"table_name": "Order Details", "limit": 3}}')
    assert (call.tool, call.args) == ("sample_rows", {"table_name": "Order Details", "limit": 3})
    assert parse_call('{"tool": "list_tables", "args": {}}').args == {}
    assert parse_call('{"tool": "run_query", "args": {"sql": "SELECT \\"x\\" FROM t"}}').args["sql"] == 'SELECT "x" FROM t'


@pytest.mark.parametrize(
    "line",
    [
        '{"tool": "drop_table", "args": {}}',
        '{"tool": "list_tables", "args": {}, "extra": 1}',
        '{"tool": "describe_table", "args": {}}',
        '{"tool": "describe_table", "args": {"table_name": 5}}',
        '{"tool": "describe_table", "args": {"table_name": "a", "table": "b"}}',
        '{"tool": "sample_rows", "args": {"table_name": "a", "limit": true}}',
        '{"tool": "sample_rows", "args": {"table_name": "a", "limit": 21}}',
        '{"tool": "sample_rows", "args": {"table_name": "a", "limit": NaN}}',
        '{"tool": "list_tables", "tool": "run_query", "args": {}}',
        '{"tool": "list_tables", "args": {}} trailing',
        "{'tool': 'list_tables', 'args': {}}",
        '["list_tables", {}]',
    ],
)
def test_parse_call_rejects_anything_else(line):
    with pytest.raises(TurnParseError):
        parse_call(line)


def test_parse_tool_and_final_turns():
    turn = parse_tool_turn('look</think>\n\n{"tool": "list_tables", "args": {}}\n{"tool": "run_query", "args": {"sql": "SELECT 1"}}',
                           think_end="</think>", after_think="\n\n")
    assert turn.think == "look" and [c.tool for c in turn.calls] == ["list_tables", "run_query"]
    with pytest.raises(TurnParseError):
        parse_tool_turn("no end of thinking", think_end="</think>", after_think="\n\n")
    with pytest.raises(TurnParseError):
        parse_tool_turn("x</think>\n\n", think_end="</think>", after_think="\n\n")
    with pytest.raises(TurnParseError):
        parse_tool_turn('x</think>\n\n{"tool": "list_tables", "args": {}}\n', think_end="</think>", after_think="\n\n")
    final = parse_final_turn("hm</think>\n\nSELECT name FROM Artist;", think_end="</think>", after_think="\n\n")
    assert final.sql == "SELECT name FROM Artist"
    assert parse_final_turn("</think>\n\nwith x as (select 1) select * from x", think_end="</think>",
                            after_think="\n\n").sql.startswith("with x")
    for bad in ("selected_rows: 3", "DROP TABLE x", "SELECT 1; SELECT 2", ""):
        with pytest.raises(TurnParseError):
            parse_final_turn("</think>\n\n" + bad, think_end="</think>", after_think="\n\n")


# ---- the budget ------------------------------------------------------------------------------


def test_four_failed_queries_in_a_row_force_the_answer():
    counter = RoundCounter(Budget())
    for _ in range(3):
        counter.record_query("SELECT nope", ok=False)
    assert not counter.must_answer
    counter.record_query("SELECT 1", ok=True)  # a success resets the streak
    for _ in range(3):
        counter.record_query("SELECT nope", ok=False)
    assert not counter.must_answer and counter.last_good_sql == "SELECT 1"
    counter.record_query("SELECT nope", ok=False)
    assert counter.must_answer and counter.force_reason == "failed_queries"


def test_six_rounds_force_the_answer():
    counter = RoundCounter(Budget())
    for done in range(1, 6):
        counter.end_round()
        assert counter.turns_left == 6 - done and not counter.must_answer
    counter.end_round()
    assert counter.turns_left == 0 and counter.force_reason == "max_rounds"


def test_budget_rejects_nonsense():
    with pytest.raises(ValueError):
        Budget(max_rounds=0)
    with pytest.raises(ValueError):
        Budget(max_tokens=100)


# ---- grammar text ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def smol_session(smollm2_gguf):
    with Session(smollm2_gguf, n_ctx=512, n_threads=1) as session:
        yield session


def _matcher(session: Session, lark: str) -> llguidance.LLMatcher:
    matcher = llguidance.LLMatcher(session.lltokenizer(), llguidance.LLMatcher.grammar_from_lark(lark), log_level=0)
    assert not matcher.is_error(), matcher.get_error()
    return matcher


def _accepts(session: Session, lark: str, text: str) -> bool:
    """Whether the grammar accepts exactly `text` (tokenized as this model would)."""
    matcher = _matcher(session, lark)
    return matcher.consume_tokens(session.tokenize(text, special=True)) and matcher.is_accepting()


def _first(session: Session, **kw) -> str:
    kw.setdefault("bounds", StringBounds(sql_chars=40, name_chars=16))
    return first_call_grammar(think_end_token=session.grammar_token("</think>"), think_end_text="</think>",
                              after_think="\n\n", max_think_tokens=kw.pop("think", 32), **kw).lark


def test_call_grammar_accepts_every_tool_with_typed_args(smol_session):
    lark = _first(smol_session)
    calls = [
        '{"tool": "list_tables", "args": {}}',
        '{"tool": "describe_table", "args": {"table_name": "Order Details"}}',
        '{"tool": "foreign_keys", "args": {"table_name": "Track"}}',
        '{"tool": "join_path", "args": {"table_a": "Track", "table_b": "Artist"}}',
        '{"tool": "sample_rows", "args": {"table_name": "Album"}}',
        '{"tool": "sample_rows", "args": {"table_name": "Album", "limit": 20}}',
        '{"tool": "distinct_values", "args": {"table_name": "Track", "column_name": "Composer", "limit": 50}}',
        '{"tool": "run_query", "args": {"sql": "SELECT \\"Name\\" FROM Artist"}}',
        '{"tool": "submit_sql", "args": {"sql": "SELECT 1"}}',
    ]
    for call in calls:
        assert _accepts(smol_session, lark, "thinking</think>\n\n" + call), call
        parse_call(call)  # and the parser agrees


def test_call_grammar_rejects_what_the_tools_do_not_take(smol_session):
    lark = _first(smol_session)
    bad = [
        '{"tool": "drop_table", "args": {}}',                                        # unknown tool
        '{"tool": "sample_rows", "args": {"table_name": "Album", "limit": 21}}',     # out of range
        '{"tool": "sample_rows", "args": {"table_name": "Album", "limit": "3"}}',    # wrong type
        '{"tool": "describe_table", "args": {}}',                                    # missing arg
        '{"tool": "describe_table", "args": {"table_name": "' + "x" * 17 + '"}}',  # over the bound
        '{"tool": "run_query", "args": {"sql": "SELECT \\u0041"}}',                  # no \\u escapes
        '{"tool": "run_query", "args": {"sql": "line\nbreak"}}',                      # raw newline
        '{"tool":"list_tables","args":{}}',                                          # not the format
        'x</think>\n\n{"tool": "list_tables", "args": {}}',                          # think text holds the end
    ]
    for call in bad:
        assert not _accepts(smol_session, lark, "t</think>\n\n" + call), call


def test_next_call_grammar_is_nothing_or_one_more_call(smol_session):
    nxt = next_call_grammar(bounds=StringBounds(40, 12)).lark
    assert _accepts(smol_session, nxt, "")  # the model may end its turn (a stop token)
    assert _accepts(smol_session, nxt, '\n{"tool": "list_tables", "args": {}}')
    assert not _accepts(smol_session, nxt, '{"tool": "list_tables", "args": {}}')
    assert not _accepts(smol_session, nxt, '\n{"tool": "list_tables", "args": {}}\n{"tool": "list_tables", "args": {}}')


def test_final_grammar_is_one_select_or_with_statement(smol_session):
    lark = final_grammar(think_end_token=smol_session.grammar_token("</think>"), think_end_text="</think>",
                         after_think="\n\n", max_think_tokens=16, max_sql_tokens=64).lark
    for sql in ("SELECT COUNT(*) FROM Album;", "select 1", "WITH t AS (SELECT 1) SELECT * FROM t",
                "SELECT *\nFROM Track"):
        assert _accepts(smol_session, lark, "ok</think>\n\n" + sql), sql
    for sql in ("DROP TABLE Album", "SELECT 1; DROP TABLE Album", "selected_rows", "SELECT 1;;", " SELECT 1"):
        assert not _accepts(smol_session, lark, "ok</think>\n\n" + sql), sql


def test_worst_case_token_bound_covers_the_longest_call():
    bounds = StringBounds(sql_chars=10, name_chars=5)
    longest = '{"tool": "join_path", "args": {"table_a": "' + "\U0001F600" * 5 + '", "table_b": "' + "\U0001F600" * 5 + '"}}'
    assert call_max_tokens(bounds) >= len(longest.encode())
    run_query = '{"tool": "run_query", "args": {"sql": "' + "\U0001F600" * 10 + '"}}'
    assert call_max_tokens(bounds) >= len(run_query.encode())
    assert call_max_tokens(StringBounds(60, 5)) - call_max_tokens(StringBounds(50, 5)) == MAX_BYTES_PER_CHAR * 10


def test_grammar_names_match_the_tool_specs():
    lark = first_call_grammar(think_end_token="<[1]>", think_end_text="</think>", after_think="\n\n",
                              max_think_tokens=8, bounds=StringBounds(10, 10)).lark
    names = set(re.findall(r'\\"tool\\": \\"([a-z_]+)\\"', lark))
    assert names == {spec.name for spec in TOOL_SPECS}


# ---- display ---------------------------------------------------------------------------------


def test_table_and_call_lines():
    text = table_text(["Name", "n"], [["AC/DC", 10], ["Aerosmith", None], ["x" * 60, 2]], max_rows=2)
    lines = text.splitlines()
    assert lines[0].startswith("Name") and lines[1].startswith("-----")
    assert lines[2].endswith("10") and "None" in lines[3] and lines[-1] == "... 1 more rows"
    ok = CallRecord("list_tables", {}, True, "Album\nArtist")
    assert "2 tables: Album, Artist" in call_line(ok)
    err = CallRecord("run_query", {"sql": "SELECT nope"}, False, "Error: no such column: nope")
    assert call_line(err).startswith("  err run_query(sql=\"SELECT nope\")") and "error: no such column" in call_line(err)


def test_answer_text_marks_forced_and_fallback():
    result = EpisodeResult(question="q", evidence=None, sql="SELECT 1", columns=["1"], rows=[[1]], truncated=False,
                           forced=True, fallback=True, answer="SELECT nope", rounds=[], stats={"rounds": 6},
                           transcript="", stop="final_answer", force_reason="max_rounds")
    text = answer_text(result)
    assert "forced final answer: tool rounds used up" in text and "fallback" in text and "SQL: SELECT 1" in text
    assert json.loads(json.dumps(result.to_json()))["fallback"] is True
