"""The agent's parts without episodes: prompt template, call parser, budget, grammar text."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import llguidance
import pytest

from edge_sql.agent import Budget, PromptFileError, load_prompt, parse_call, parse_final_turn, parse_tool_turn
from edge_sql.agent.budget import RoundCounter
from edge_sql.agent.display import answer_text, call_line, result_summary, table_text
from edge_sql.agent.grammar import (
    MAX_BYTES_PER_CHAR,
    StringBounds,
    final_grammar,
    first_call_grammar,
    next_call_grammar,
)
from edge_sql.agent.parsing import TurnParseError
from edge_sql.agent.prompt import DEFAULT_PROMPT_FILE
from edge_sql.agent.result import CallRecord, EpisodeResult
from edge_sql.agent.stats import EpisodeFigures, EpisodeStats
from edge_sql.runtime import Session, Timings
from edge_sql.tools import TOOL_SPECS

# ---- the prompt template ---------------------------------------------------------------------


PUBLISHED_FORCED = (
    "You have reached the exploration limit. Now generate the final SQL query to answer the question. "
    "Return only the SQL query. Your last query that executed without error was:\n"
    "SELECT COUNT(*) FROM Album\n"
    "If you are not sure of an improvement, return that query."
)


def test_default_template_has_every_part_of_the_protocol():
    prompt = load_prompt()
    assert prompt.version == "sqale-v2" and prompt.call_layout == "json"
    system = prompt.system_text(max_rounds=6)
    for spec in TOOL_SPECS:
        assert spec.signature() in system
    assert "You have 6 tool turns" in system
    assert '{"tool": "<name>", "args": {...}}' in system  # JSON braces survive rendering
    assert "a single JSON object per reply" in system  # what the original asked, nothing more
    assert "tool calls, one per line" not in system
    assert "{tools}" not in system and "{max_rounds}" not in system
    assert prompt.chat.assistant_prefix == "<think>\n"
    assert prompt.chat.turn_start == "<|im_start|>{role}\n" and prompt.chat.turn_end == "<|im_end|>"


def test_user_turn_with_and_without_evidence():
    prompt = load_prompt()
    assert prompt.user_text("  How many albums?  ") == "How many albums?"
    # the published evidence-supported phrasing: `<question>, evidence: <note>`
    assert prompt.user_text("How many albums?", "albums are rows of Album") == (
        "How many albums?, evidence: albums are rows of Album"
    )
    assert prompt.user_text("Q?", "   ") == "Q?"
    v1 = load_prompt("sqale-v1")
    assert v1.user_text("How many albums?", "albums are rows of Album") == (
        "Question: How many albums?\nEvidence: albums are rows of Album"
    )


def test_budget_lines_and_forced_message_are_the_published_strings():
    prompt = load_prompt()
    assert prompt.budget_text(4) == "[4 tool turns left before you must answer]"
    assert prompt.budget_text(1) == "[1 tool turn left before you must answer]"
    assert prompt.forced_text("SELECT COUNT(*) FROM Album") == PUBLISHED_FORCED
    no_query = prompt.forced_text(None)
    assert no_query.startswith("You have reached the exploration limit. ")
    assert no_query.splitlines()[-1].startswith("If you are not sure of ")
    assert "SELECT" not in no_query


def test_results_are_numbered_i_of_n():
    prompt = load_prompt()
    assert prompt.result_text('{"tool": "list_tables", "args": {}}', "Album\nArtist", i=10, n=12) == (
        '{"tool": "list_tables", "args": {}}\nResult (10/12):\nAlbum\nArtist'
    )


def test_sqale_v1_is_kept_as_a_file_with_its_own_strings():
    v1 = load_prompt("sqale-v1")
    assert v1.version == "sqale-v1" and v1.call_layout == "strict"
    assert "tool calls, one per line" in v1.system_text(max_rounds=6)
    forced = v1.forced_text("SELECT COUNT(*) FROM Album")
    assert forced.startswith("Exploration limit reached") and "Return it if you are unsure" in forced
    assert "No query has run without error yet" in v1.forced_text(None)
    assert v1.result_text('{"tool": "list_tables", "args": {}}', "Album", i=1, n=3) == (
        '{"tool": "list_tables", "args": {}}\nResult:\nAlbum'
    )


def _write_variant(tmp_path: Path, old: str, new: str) -> Path:
    text = DEFAULT_PROMPT_FILE.read_text(encoding="utf-8")
    assert old in text
    path = tmp_path / "prompt.toml"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return path


def test_prompt_file_replaces_the_template(tmp_path):
    path = _write_variant(tmp_path, 'version = "sqale-v2"', 'version = "mine-2"')
    path.write_text(
        path.read_text().replace('user_template = "{question}{evidence}"', 'user_template = "Q: {question}{evidence}"')
    )
    prompt = load_prompt(path)
    assert prompt.version == "mine-2" and prompt.source == str(path)
    assert prompt.user_text("Why?") == "Q: Why?"


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            'user_template = "{question}{evidence}"',
            'user_template = "Question: {evidence}"',
            "field `user_template` lacks the placeholder {question}",
        ),
        (
            'budget_line = "[{n} tool turns left before you must answer]"',
            'budget_line = "[{n} left {count}]"',
            "field `budget_line` has unknown placeholder {count}",
        ),
        ('version = "sqale-v2"', "", "missing field `version`"),
        ('call_layout = "json"', 'call_layout = "pretty"', "field `call_layout` must be one of: json, strict"),
        (
            'forced_final = """You',
            'forced_final = """{last_query} You',
            "field `forced_final` has unknown placeholder {last_query} (allowed: {sql})",
        ),
        ('turn_end = "<|im_end|>"', "", "missing field `chat.turn_end`"),
        ('result_separator = "\\n\\n"', "result_separator = 3", "field `result_separator` must be a string"),
        ('version = "sqale-v2"', 'version = "sqale-v2', "is not valid TOML"),
        (
            'turn_start = "<|im_start|>{role}\\n"',
            'turn_start = "<|im_start|>\\n"',
            "field `chat.turn_start` lacks the placeholder {role}",
        ),
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
    assert (
        parse_call('{"tool": "run_query", "args": {"sql": "SELECT \\"x\\" FROM t"}}').args["sql"] == 'SELECT "x" FROM t'
    )


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


PUBLISHED_ANSWER = (  # the published forced answer ("Firmware devices"), as the model wrote it
    "SELECT d.name, (SELECT COUNT(*) FROM diagnostic_request_logs dr WHERE dr.device_id = d.uuid) as diagnostic_count\n"
    "FROM devices d\n"
    "JOIN device_software_dependencies ds ON d.uuid = ds.device_id\n"
    "WHERE ds.dependency_name LIKE '%firmware%'\n"
    "GROUP BY d.name\n"
    "ORDER BY diagnostic_count DESC"
)
ANSWER_FORMS = [
    PUBLISHED_ANSWER,
    PUBLISHED_ANSWER + ";",
    PUBLISHED_ANSWER + ";\n",
    "```sql\n" + PUBLISHED_ANSWER + "\n```",
    "```sql\n" + PUBLISHED_ANSWER + ";\n```\n",
    "```\n" + PUBLISHED_ANSWER + "\n```",
]


def test_the_models_calls_are_checked_strictly_and_the_tools_leniently_by_one_validator(chinook_db):
    """parse_call holds the model to what the grammar allows; the toolbox, like the training
    environment, fills defaults and clamps. One check (tools.arguments), one wording."""
    from edge_sql.tools import ReadOnlyDatabase, Toolbox

    limit = "sample_rows: limit must be an integer from 1 to 20"
    refused = {
        '{"tool": "sample_rows", "args": {"table_name": "Genre", "limit": 21}}': limit,
        '{"tool": "sample_rows", "args": {"table_name": "Genre", "limit": "2"}}': limit,
        '{"tool": "sample_rows", "args": {"table_name": "Genre", "limit": 2.0}}': limit,
        '{"tool": "sample_rows", "args": {"table_name": "Genre", "limit": null}}': limit,
        '{"tool": "describe_table", "args": {}}': "describe_table needs the argument 'table_name'",
        '{"tool": "list_tables", "args": {"x": 1}}': "list_tables got an unexpected argument 'x' (its arguments: none)",
        '{"tool": "run_query", "args": []}': "run_query expects its args as a JSON object",
    }
    with ReadOnlyDatabase(chinook_db) as database:
        toolbox = Toolbox(database)
        for line, message in refused.items():
            with pytest.raises(TurnParseError) as caught:
                parse_call(line)
            assert str(caught.value) == message
            call = json.loads(line)
            result = toolbox.call(call["tool"], call["args"])
            lenient = call["tool"] == "sample_rows"  # clamped, coerced or defaulted: the rows come back
            assert result.ok == lenient, (line, result.output)
            if not lenient:
                assert result.output == f"Error: {message}"
        assert toolbox.call("sample_rows", {"table_name": "Genre", "limit": 21}).output.count("\n") == 20


def test_parse_tool_turns_as_the_environment_found_calls():
    turn = parse_tool_turn(
        'look</think>\n\n{"tool": "list_tables", "args": {}}\n{"tool": "run_query", "args": {"sql": "SELECT 1"}}',
        think_end="</think>",
        after_think="\n\n",
    )
    assert turn.think == "look" and [c.tool for c in turn.calls] == ["list_tables", "run_query"]
    # JSON whitespace inside a call and blank lines between calls, as a JSON parser accepts them
    pretty = (
        'x</think>\n\n{\n  "tool": "describe_table",\n  "args": {"table_name": "Album"}\n}\n\n\n'
        '{"tool":"run_query","args":{"sql":"SELECT 1"}}\n'
    )
    calls = parse_tool_turn(pretty, think_end="</think>", after_think="\n\n").calls
    assert [(c.tool, c.args) for c in calls] == [
        ("describe_table", {"table_name": "Album"}),
        ("run_query", {"sql": "SELECT 1"}),
    ]
    assert calls[0].raw == '{\n  "tool": "describe_table",\n  "args": {"table_name": "Album"}\n}'
    for bad in (
        "no end of thinking",
        "x</think>\n\n",
        'x</think>\n\n{"tool": "list_tables", "args": {}} {"tool": "list_tables", "args": {}}',
        'x</think>\n\n{"tool": "list_tables", "args": {}}\nSELECT 1',
    ):
        with pytest.raises(TurnParseError):
            parse_tool_turn(bad, think_end="</think>", after_think="\n\n")


@pytest.mark.parametrize("answer", ANSWER_FORMS)
def test_final_answer_forms_give_the_same_statement(answer):
    final = parse_final_turn("checking</think>\n\n" + answer, think_end="</think>", after_think="\n\n")
    assert final.think == "checking" and final.sql == PUBLISHED_ANSWER


def test_final_answer_that_is_not_one_statement_is_refused():
    assert parse_final_turn(
        "</think>\n\nwith x as (select 1) select * from x", think_end="</think>", after_think="\n\n"
    ).sql.startswith("with x")
    for bad in (
        "",
        "   ",
        ";",
        '{"tool": "submit_sql", "args": {"sql": "SELECT 1"}}',
        "```sql\n```",
        "nothing here; nor here",
        "SELECT 1;\x00 SELECT 2",  # a random model wrote one (sqlite3.complete_statement raised ValueError)
        "SELECT\x00 1",
    ):
        with pytest.raises(TurnParseError):
            parse_final_turn("</think>\n\n" + bad, think_end="</think>", after_think="\n\n")


@pytest.mark.parametrize(
    "answer, sql",
    [
        ("SELECT 1; SELECT 2", "SELECT 2"),
        (
            "Here it is:\n```sql\nSELECT 1\n```\nor better:\n```sql\nSELECT a FROM t WHERE b = ';'\n```",
            "SELECT a FROM t WHERE b = ';'",
        ),
        ("Well:\n```sql\nSELECT name\nFROM t", "SELECT name\nFROM t"),  # a fence left open at the token bound
        ("The query is\nSELECT x FROM y\nwhich returns x.", "SELECT x FROM y"),
        ("The following are the results", "The following are the results"),  # no query at all: run as written
        ("SELECT nope FROM", "SELECT nope FROM"),  # a plain answer stays as it is, even broken
    ],
)
def test_a_final_answer_that_is_not_one_statement_gives_its_last_query(answer, sql):
    assert parse_final_turn("</think>\n\n" + answer, think_end="</think>", after_think="\n\n").sql == sql


# ---- the budget ------------------------------------------------------------------------------


def test_four_failed_queries_in_a_row_force_the_answer():
    counter = RoundCounter(Budget())
    for _ in range(3):
        counter.record_query("SELECT nope", ok=False)
    assert counter.force_reason is None
    counter.record_query("SELECT 1", ok=True)  # a success resets the streak
    for _ in range(3):
        counter.record_query("SELECT nope", ok=False)
    assert counter.force_reason is None and counter.last_good_sql == "SELECT 1"
    counter.record_query("SELECT nope", ok=False)
    assert counter.force_reason == "failed_queries"


def test_six_rounds_force_the_answer():
    counter = RoundCounter(Budget())
    for done in range(1, 6):
        counter.end_round()
        assert counter.turns_left == 6 - done and counter.force_reason is None
    counter.end_round()
    assert counter.turns_left == 0 and counter.force_reason == "max_rounds"


def test_budget_rejects_nonsense():
    with pytest.raises(ValueError):
        Budget(max_rounds=0)
    with pytest.raises(ValueError):
        Budget(max_tokens=100)


def test_budget_items_say_what_is_wrong_with_them():
    from edge_sql.agent.budget import parse_budget_items

    assert parse_budget_items(["max_sql_chars=500", "max_rounds=2"]) == {"max_sql_chars": 500, "max_rounds": 2}
    cases = {
        "max_sql_chars=-1": "max_sql_chars=-1 is out of range (at least 1)",
        "max_tokens=300": "max_tokens=300 is out of range (at least 512)",
        "max_sql_chars=many": "max_sql_chars takes a whole number, not 'many'",
        "max_sq_chars=5": "is not FIELD=N with FIELD one of:",
    }
    for item, message in cases.items():
        with pytest.raises(ValueError, match=re.escape(message)):
            parse_budget_items([item])


def test_a_minimum_above_its_maximum_is_refused():
    from edge_sql.agent.budget import parse_budget_items

    with pytest.raises(ValueError, match="min_think_tokens=500 is above max_think_tokens=8"):
        parse_budget_items(["max_think_tokens=8", "min_think_tokens=500"])
    with pytest.raises(ValueError, match=r"Budget.min_string_chars=64 is above Budget.max_sql_chars=24"):
        Budget(max_sql_chars=24, min_string_chars=64)
    # a minimum left at its default yields to a smaller maximum
    assert Budget(max_think_tokens=8).min_think_tokens == 16
    assert Budget(max_think_tokens=8, min_think_tokens=4, max_final_think_tokens=4).final_think_cap == 4


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
    return first_call_grammar(
        think_end_token=session.grammar_token("</think>"),
        think_end_text="</think>",
        after_think="\n\n",
        max_think_tokens=kw.pop("think", 32),
        **kw,
    ).lark


CALLS = [
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


@pytest.mark.parametrize("layout", ["json", "strict"])
def test_call_grammar_accepts_every_tool_with_typed_args(smol_session, layout):
    lark = _first(smol_session, layout=layout)
    for call in CALLS:
        assert _accepts(smol_session, lark, "thinking</think>\n\n" + call), call
        parse_call(call)  # and the parser agrees


def test_json_layout_accepts_json_whitespace_strict_does_not(smol_session):
    flexible, strict = _first(smol_session, layout="json"), _first(smol_session, layout="strict")
    layouts = [
        '{"tool":"list_tables","args":{}}',
        '{\n  "tool": "describe_table",\n  "args": {\n    "table_name": "Album"\n  }\n}',
        '{ "tool" : "sample_rows" , "args" : { "table_name" : "Album" , "limit" : 3 } }',
        '\n{"tool": "list_tables", "args": {}}',
    ]
    for call in layouts:
        assert _accepts(smol_session, flexible, "t</think>\n\n" + call), call
        assert not _accepts(smol_session, strict, "t</think>\n\n" + call), call
        parse_tool_turn("t</think>\n\n" + call, think_end="</think>", after_think="\n\n")
    too_wide = '{"tool":' + " " * 13 + '"list_tables", "args": {}}'  # a gap is bounded
    assert not _accepts(smol_session, flexible, "t</think>\n\n" + too_wide)


@pytest.mark.parametrize("layout", ["json", "strict"])
def test_call_grammar_rejects_what_the_tools_do_not_take(smol_session, layout):
    lark = _first(smol_session, layout=layout)
    bad = [
        '{"tool": "drop_table", "args": {}}',  # unknown tool
        '{"tool": "sample_rows", "args": {"table_name": "Album", "limit": 21}}',  # out of range
        '{"tool": "sample_rows", "args": {"table_name": "Album", "limit": "3"}}',  # wrong type
        '{"tool": "describe_table", "args": {}}',  # missing arg
        '{"tool": "describe_table", "args": {"table_name": "' + "x" * 17 + '"}}',  # over the bound
        '{"tool": "run_query", "args": {"sql": "SELECT \\u0041"}}',  # no \\u escapes
        '{"tool": "run_query", "args": {"sql": "line\nbreak"}}',  # raw newline
        '{"args": {}, "tool": "list_tables"}',  # key order
        'x</think>\n\n{"tool": "list_tables", "args": {}}',  # think text holds the end
    ]
    for call in bad:
        assert not _accepts(smol_session, lark, "t</think>\n\n" + call), call


def test_next_call_grammar_is_nothing_or_one_more_call(smol_session):
    nxt = next_call_grammar(bounds=StringBounds(40, 12)).lark
    assert _accepts(smol_session, nxt, "")  # the model may end its turn (a stop token)
    assert _accepts(smol_session, nxt, '\n{"tool": "list_tables", "args": {}}')
    assert _accepts(smol_session, nxt, '\n\n\n{"tool": "list_tables", "args": {}}')  # blank lines between calls
    assert _accepts(smol_session, nxt, "\n")  # trailing whitespace before the end of the turn
    assert not _accepts(smol_session, nxt, '{"tool": "list_tables", "args": {}}')  # a call starts a line
    assert not _accepts(smol_session, nxt, '\n{"tool": "list_tables", "args": {}}\n{"tool": "list_tables", "args": {}}')
    strict = next_call_grammar(bounds=StringBounds(40, 12), layout="strict").lark
    assert _accepts(smol_session, strict, '\n{"tool": "list_tables", "args": {}}')
    assert not _accepts(smol_session, strict, '\n\n{"tool": "list_tables", "args": {}}')


def _final(session: Session) -> str:
    return final_grammar(
        think_end_token=session.grammar_token("</think>"),
        think_end_text="</think>",
        after_think="\n\n",
        max_think_tokens=16,
        max_sql_tokens=256,
    ).lark


@pytest.mark.parametrize("answer", ANSWER_FORMS)
def test_final_grammar_accepts_what_the_model_wrote_in_training(smol_session, answer):
    assert _accepts(smol_session, _final(smol_session), "ok</think>\n\n" + answer)


def test_final_grammar_constrains_only_what_must_be(smol_session):
    lark = _final(smol_session)
    for sql in (
        "select 1",
        "WITH t AS (SELECT 1) SELECT * FROM t",
        "SELECT *\nFROM Track",
        " SELECT 1",
        "SELECT `Name` FROM Artist",
        "PRAGMA table_info(x)",
    ):  # the database refuses non-reads
        assert _accepts(smol_session, lark, "ok</think>\n\n" + sql), sql
    for sql in (
        "SELECT 1; DROP TABLE Album",
        '{"tool": "submit_sql", "args": {"sql": "SELECT 1"}}',
        "SELECT 1;;",
        ";",
        "",
    ):
        assert not _accepts(smol_session, lark, "ok</think>\n\n" + sql), sql


def test_final_grammar_bounds_the_blank_lines_before_the_answer(smol_session):
    """A random model once spent its whole SQL bound on newlines: an answer with no SQL."""
    lark = _final(smol_session)
    assert _accepts(smol_session, lark, "ok</think>\n\n" + "\n" * 12 + "SELECT 1")
    assert _accepts(smol_session, lark, "ok</think>\n\n```sql\n" + "\n" * 12 + "SELECT 1\n```")
    assert not _accepts(smol_session, lark, "ok</think>\n\n" + "\n" * 13 + "SELECT 1")
    assert not _accepts(smol_session, lark, "ok</think>\n\n```sql\n" + "\n" * 13 + "SELECT 1\n```")


@pytest.mark.parametrize("layout", ["json", "strict"])
def test_worst_case_token_bound_covers_the_longest_call(layout):
    bounds = StringBounds(sql_chars=10, name_chars=5)
    gap = " " * 12 if layout == "json" else " "
    longest = (
        "{"
        + gap
        + '"tool":'
        + gap
        + '"join_path",'
        + gap
        + '"args":'
        + gap
        + "{"
        + gap
        + '"table_a":'
        + gap
        + '"'
        + "\U0001f600" * 5
        + '",'
        + gap
        + '"table_b":'
        + gap
        + '"'
        + "\U0001f600" * 5
        + '"'
        + gap
        + "}"
        + gap
        + "}"
    )

    # the bound the room planner reserves for one more call (separator and call, every byte a token)
    def bound(b: StringBounds) -> int:
        return next_call_grammar(bounds=b, layout=layout).max_tokens

    assert bound(bounds) >= len(("\n" + longest).encode())
    run_query = '{"tool": "run_query", "args": {"sql": "' + "\U0001f600" * 10 + '"}}'
    assert bound(bounds) >= len(("\n" + run_query).encode())
    assert bound(StringBounds(60, 5)) - bound(StringBounds(50, 5)) == MAX_BYTES_PER_CHAR * 10


def test_grammar_names_match_the_tool_specs():
    for layout in ("json", "strict"):
        lark = first_call_grammar(
            think_end_token="<[1]>",
            think_end_text="</think>",
            after_think="\n\n",
            max_think_tokens=8,
            bounds=StringBounds(10, 10),
            layout=layout,
        ).lark
        names = set(re.findall(r"^call_([a-z_]+):", lark, re.MULTILINE))
        assert names == {spec.name for spec in TOOL_SPECS}
        for spec in TOOL_SPECS:
            assert json.dumps(json.dumps(spec.name)) in lark or json.dumps(spec.name).replace('"', '\\"') in lark


# ---- display ---------------------------------------------------------------------------------


def test_table_and_call_lines():
    text = table_text(["Name", "n"], [["AC/DC", 10], ["Aerosmith", None], ["x" * 60, 2]], max_rows=2)
    lines = text.splitlines()
    assert lines[0].startswith("Name") and lines[1].startswith("-----")
    assert lines[2].endswith("10") and "None" in lines[3] and lines[-1] == "... 1 more rows"
    ok = CallRecord("list_tables", {}, True, "Album\nArtist")
    assert "2 tables: Album, Artist" in call_line(ok)
    err = CallRecord("run_query", {"sql": "SELECT nope"}, False, "Error: no such column: nope")
    assert call_line(err).startswith('  err run_query(sql="SELECT nope")') and "error: no such column" in call_line(err)


def figures(
    *, rounds: int, calls: int = 0, wall_s: float = 0.0, generated_tokens: int = 0, decode_tok_s: float = 0.0
) -> EpisodeStats:
    """An answer's stats with these figures (the decode rate from tokens over seconds)."""
    timings = Timings(
        generated_tokens=generated_tokens, generate_s=generated_tokens / decode_tok_s if decode_tok_s else 0.0
    )
    return EpisodeStats(EpisodeFigures(timings=timings, rounds=rounds, calls=calls, wall_s=wall_s))


def test_answer_text_marks_forced_and_fallback():
    result = EpisodeResult(
        question="q",
        evidence=None,
        sql="SELECT 1",
        columns=["1"],
        rows=[[1]],
        truncated=False,
        forced=True,
        fallback=True,
        answer="SELECT nope",
        rounds=[],
        stats=figures(rounds=6),
        transcript="",
        stop="final_answer",
        force_reason="max_rounds",
    )
    text = answer_text(result)
    assert "forced final answer: tool rounds used up" in text and "fallback" in text and "SQL: SELECT 1" in text
    assert json.loads(json.dumps(result.to_json()))["fallback"] is True


def test_answer_text_without_an_answer_shows_the_failing_sql_and_the_stats():
    result = EpisodeResult(
        question="q",
        evidence=None,
        sql=None,
        columns=[],
        rows=[],
        truncated=False,
        forced=True,
        fallback=False,
        answer="SELECT * FROM <",
        rounds=[],
        stats=figures(rounds=3, calls=7, wall_s=4.25, generated_tokens=96, decode_tok_s=20.0),
        transcript="",
        stop="final_answer",
        force_reason="max_rounds",
        error='the answer failed to run: near "<": syntax error',
    )
    lines = answer_text(result).splitlines()
    assert lines == [
        "(forced final answer: tool rounds used up)",
        "SQL (did not run): SELECT * FROM <",
        'no answer: the answer failed to run: near "<": syntax error',
        "(no result; 3 rounds, 7 calls; 4.2 s; 96 tokens generated at 20.0 tok/s)",
    ]

    rambling = dataclasses.replace(result, answer="\n".join(f"line {i}" for i in range(30)))
    lines = answer_text(rambling).splitlines()
    assert lines[1:14] == [
        "SQL (did not run): line 0",
        *(f"line {i}" for i in range(1, 12)),
        "... 18 more lines (--json shows the whole answer)",
    ]


def test_counts_of_one_are_singular():
    """`1 round, 1 call`, not `1 rounds, 1 calls` (issue 40)."""
    result = EpisodeResult(
        question="q",
        evidence=None,
        sql="SELECT 1",
        columns=["1"],
        rows=[[1]],
        truncated=False,
        forced=False,
        fallback=False,
        answer="SELECT 1",
        rounds=[],
        stats=figures(rounds=1, calls=1, wall_s=1.0, generated_tokens=1, decode_tok_s=2.0),
        transcript="",
        stop="submitted",
    )
    assert answer_text(result).splitlines()[-1] == "(1 row; 1 round, 1 call; 1.0 s; 1 token generated at 2.0 tok/s)"
    listed = CallRecord("list_tables", {}, True, "Album\n")
    assert result_summary(listed) == "1 table: Album"


def test_a_model_not_trained_for_the_protocol_hears_once_which_bounds_suit_it(smollm2_gguf, tiny_gguf_fast):
    """SmolLM2 with the protocol's open bounds ran 134 list_tables calls in 11 minutes (issue 40):
    loading a model of another architecture says once which options bound it; the trained
    architecture, or a budget already bounded, hears nothing."""
    from edge_sql import Agent
    from edge_sql.agent.budget import small_model_note

    lines: list[str] = []
    with Agent(smollm2_gguf, tune=False, prefix_cache=False, n_threads=1, n_ctx=2048, log=lines.append):
        pass
    notes = [line for line in lines if line.startswith("note: ")]
    assert len(notes) == 1, lines
    assert notes[0].startswith(f"note: {smollm2_gguf.name} is a llama model (")
    assert (
        "--max-rounds 3 --calls-per-turn 2 --think-tokens 16 --budget max_final_sql_tokens=40 "
        "--budget max_name_chars=24 --budget max_sql_chars=80 --ctx 2048, which `--profile small` holds"
    ) in notes[0]
    assert "Budget(max_rounds=3, max_calls_per_turn=2, max_think_tokens=16" in notes[0]
    lines.clear()
    with Agent(tiny_gguf_fast, tune=False, prefix_cache=False, n_threads=1, n_ctx=2048, log=lines.append):
        pass
    assert not [line for line in lines if line.startswith("note: ")], lines
    assert small_model_note("m.gguf", "llama", None, Budget(max_think_tokens=16)) is None
    assert small_model_note("m.gguf", "llama", None, Budget(max_calls_per_turn=2)) is None
    assert small_model_note("m.gguf", "llama", None, Budget()).startswith("note: m.gguf is a llama model, not ")


def _settled_final_answer(text: str, db_path: Path):
    """A final answer's text as the episode settles it: taken out (`final_sql`), run read-only on
    the real database, and settled with no fallback (no query ran before it)."""
    from edge_sql.agent.parsing import final_sql
    from edge_sql.agent.result import settle_answer
    from edge_sql.tools import ReadOnlyDatabase, Toolbox

    answer = final_sql(text)
    with ReadOnlyDatabase(db_path) as database:
        ran = Toolbox(database).answer(answer, max_rows=10)
    return answer, settle_answer(answer, ran, None, None, error=None)


def test_a_final_answer_in_prose_is_said_to_be_not_sql(chinook_db):
    """Not SQLite's `near "The": syntax error`: the answer was prose, and its start is shown."""
    _, settled = _settled_final_answer("The Album table has 347 rows, as the query showed.", chinook_db)
    assert settled.sql is None
    assert settled.error == "the final answer was not SQL: 'The Album table has 347 rows, as the query showed.'"


def test_a_final_answer_in_quotes_is_unwrapped_and_its_missing_table_named(chinook_db):
    answer, settled = _settled_final_answer('"SELECT COUNT(*) FROM orders"', chinook_db)
    assert answer == "SELECT COUNT(*) FROM orders"
    assert settled.error == "the answer failed to run: no such table: orders"
    answer, settled = _settled_final_answer("'SELECT COUNT(*) FROM Album;'", chinook_db)
    assert answer == "SELECT COUNT(*) FROM Album" and settled.result is not None and settled.result.rows == [(347,)]
    answer, _ = _settled_final_answer('"Album"', chinook_db)
    assert answer == '"Album"'  # a quoted name alone is no query: it stays as written
