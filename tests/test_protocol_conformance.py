"""Conformance replay: the published SQaLe episodes, call by call, through our real tools.

The page (`edge_sql/data/sqale_published/`) shows what the training environment's tools answered.
We rebuild each episode's database (`benchmarks/sqale/replay.py`), replay every published call through
`Toolbox` (each collapsed call `n` times) and require the published text wherever the page did
not clip it. These assertions are written to the published truth, not to our current output.

The `*_database_*` tests check the rebuilt databases with plain sqlite3, independently of how
the tools format their output.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest

from benchmarks.sqale.page import CLIP, compare_to_published, one_line_ddl, parse_published_result, render_cell
from benchmarks.sqale.replay import build_database
from edge_sql.evaluation.sqale_published import call_args, episode, load_episodes, published_calls
from edge_sql.tools import ReadOnlyDatabase, Toolbox

EPISODES = load_episodes()
EPISODE_IDS = [ep["id"] for ep in EPISODES]


def _call_params(tools: set[str] | None = None) -> list:
    params = []
    for ep in EPISODES:
        for r_index, c_index, call in published_calls(ep):
            if call["tool"] == "answer":  # the forced final turn's SQL: see the final-rows test
                continue
            if tools is None or call["tool"] in tools:
                params.append(
                    pytest.param(
                        ep["id"],
                        r_index,
                        c_index,
                        id=f"{ep['id']}-r{r_index + 1}c{c_index + 1}-{call['tool']}",
                    )
                )
    return params


def _call(episode_id: str, r_index: int, c_index: int) -> dict:
    return episode(episode_id)["rounds"][r_index]["calls"][c_index]


@pytest.fixture(scope="module")
def databases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("sqale_published")
    return {episode_id: build_database(episode_id, folder) for episode_id in EPISODE_IDS}


@pytest.fixture(scope="module")
def toolboxes(databases: dict[str, Path]):
    opened = {episode_id: ReadOnlyDatabase(path) for episode_id, path in databases.items()}
    yield {episode_id: Toolbox(db) for episode_id, db in opened.items()}
    for db in opened.values():
        db.close()


# -- the published data --------------------------------------------------------------------


@pytest.mark.parametrize("episode_id", EPISODE_IDS)
def test_published_data_is_consistent(episode_id):
    """The copied JSON agrees with itself as the page's data did: table counts, call counts
    per round (the forced answer counts as none), and each call's touched tables (`t`)."""
    ep = episode(episode_id)
    assert len(ep["tables"]) == len(set(ep["tables"])) == ep["nTables"]
    for round_ in ep["rounds"]:
        calls = sum(call["n"] for call in round_["calls"])
        assert round_["nCalls"] == (0 if round_["forced"] else calls)
        for call in round_["calls"]:
            for index in call["t"]:
                assert ep["tables"][index] in call["args"]


# -- the replay -----------------------------------------------------------------------------


@pytest.mark.parametrize("episode_id, r_index, c_index", _call_params())
def test_published_call_gives_the_published_output(toolboxes, episode_id, r_index, c_index):
    """Every published call runs (n times, as in the episode) and, where the page shows its
    output, gives that output: byte for byte, clipped lines as prefixes."""
    call = _call(episode_id, r_index, c_index)
    args = call_args(call["tool"], call["args"])
    for repeat in range(call["n"]):
        result = toolboxes[episode_id].call(call["tool"], args)
        assert result.ok, f"call {repeat + 1}/{call['n']} failed: {result.output}"
        if call["out"] is not None:
            problems = compare_to_published(result.output, call["out"])
            assert not problems, (
                f"{call['tool']}({call['args']}), call {repeat + 1}/{call['n']}:\n"
                + "\n".join(problems)
                + f"\n--- ours ---\n{result.output}"
            )


@pytest.mark.parametrize("episode_id", EPISODE_IDS)
def test_list_tables_names_the_published_schema(toolboxes, episode_id):
    """`list_tables` output is not published, but the page lists each schema's tables."""
    ep = episode(episode_id)
    result = toolboxes[episode_id].call("list_tables", {})
    assert result.ok
    named = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", result.output))
    assert set(ep["tables"]) <= named
    assert len(ep["tables"]) == ep["nTables"]


@pytest.mark.parametrize("episode_id", EPISODE_IDS)
def test_final_sql_returns_the_published_rows(databases, episode_id):
    """The episode's final SQL (submitted, or written as text on the forced final turn) returns
    exactly the published final rows."""
    final = episode(episode_id)["final"]
    with ReadOnlyDatabase(databases[episode_id]) as db:
        result = db.execute(final["sql"], max_rows=None)
    assert result.columns == final["columns"]
    assert [[render_cell(v) for v in row] for row in result.rows] == final["rows"]
    assert final["more"] is False


def test_forced_answer_is_the_final_sql():
    """The forced final turn's pseudo-call holds the SQL that the episode's final rows come from."""
    ep = episode("q_0086702")
    answers = [call for _, _, call in published_calls(ep) if call["tool"] == "answer"]
    assert [a["args"] for a in answers] == [ep["final"]["sql"]]
    assert ep["rounds"][-1]["forced"] is True


# -- the rebuilt databases, checked with plain sqlite3 ----------------------------------------


def _rows_check(conn: sqlite3.Connection, sql: str, published_text: str) -> list[str]:
    """What in the rows `sql` returns contradicts the published result (empty: it matches)."""
    published = parse_published_result(published_text)
    cursor = conn.execute(sql)
    columns = [d[0] for d in cursor.description]
    rows = [[render_cell(v) for v in row] for row in cursor.fetchall()]
    problems = []
    if columns != published.columns:
        problems.append(f"columns {columns} != published {published.columns}")
    shown = len(published.rows)
    if published.more_rows or published.lines_cut:
        if len(rows) <= shown:
            problems.append(f"{len(rows)} rows, but the page shows {shown} and says more exist")
    elif len(rows) != shown:
        problems.append(f"{len(rows)} rows != published {shown}")
    for i, (pub, clipped) in enumerate(zip(published.rows, published.clipped)):
        if i >= len(rows):
            break
        ours = rows[i]
        if clipped:
            last = len(pub) - 1
            ok = ours[:last] == pub[:last] and ours[last].startswith(pub[last])
        else:
            ok = ours == pub
        if not ok:
            problems.append(f"row {i + 1}: {ours} != published {pub}{' (clipped)' * clipped}")
    return problems


@pytest.mark.parametrize("episode_id, r_index, c_index", _call_params({"run_query", "sample_rows"}))
def test_database_returns_the_published_rows(databases, episode_id, r_index, c_index):
    """Each published query (and sample_rows, as `SELECT * FROM t LIMIT n`) run with plain
    sqlite3 returns the published rows: the builder is right whatever the tools print."""
    call = _call(episode_id, r_index, c_index)
    args = call_args(call["tool"], call["args"])
    if call["tool"] == "sample_rows":
        sql = f'SELECT * FROM "{args["table_name"]}" LIMIT {args["limit"]}'
    else:
        sql = args["sql"]
    conn = sqlite3.connect(f"file:{databases[episode_id]}?mode=ro", uri=True)
    try:
        problems = _rows_check(conn, sql, call["out"])
    finally:
        conn.close()
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("episode_id, r_index, c_index", _call_params({"describe_table"}))
def test_database_holds_the_published_ddl(databases, episode_id, r_index, c_index):
    """The DDL in sqlite_master is multi-line, and on one line it is the published output."""
    call = _call(episode_id, r_index, c_index)
    table = call_args("describe_table", call["args"])["table_name"]
    conn = sqlite3.connect(f"file:{databases[episode_id]}?mode=ro", uri=True)
    try:
        (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()
    finally:
        conn.close()
    assert "\n" in sql
    assert one_line_ddl(sql) == call["out"]


# -- the page's clipping rules, as the comparison applies them ----------------------------------


def test_compare_to_published_applies_the_clipping_rules():
    published = f"a | b\n1 | lon{CLIP}\n2 | x\n{CLIP}"
    assert compare_to_published("a | b\n1 | long\n2 | x\n3 | y", published) == []
    assert compare_to_published("a | b\n1 | lon\n2 | x\n3 | y", published)  # not longer
    assert compare_to_published("a | b\n1 | lin\n2 | x\n3 | y", published)  # not a prefix
    assert compare_to_published("a | b\n1 | long\n2 | x", published)  # nothing was cut
    assert compare_to_published("a | b\n1 | long\n2 | X\n3 | y", published)  # changed line
    assert compare_to_published("a\n1\n2", "a\n1") and compare_to_published("a\n1", "a\n1\n2")
    assert compare_to_published("a\n1", "a\n1") == []


def test_args_are_read_by_the_tool_argument_order():
    assert call_args("sample_rows", '"AlertLogs", 10') == {"table_name": "AlertLogs", "limit": 10}
    assert call_args("describe_table", '"users"') == {"table_name": "users"}
    assert call_args("run_query", "SELECT 1, 2") == {"sql": "SELECT 1, 2"}
    assert call_args("list_tables", "") == {}
