"""The prompt's commands in a real pseudo-terminal (benchmarks/transcripts/terminal.py): `:help` lists them
instead of asking the model, `:fix` and `:right` keep verified answers that are then reused at
once, `:note`/`:notes`, follow-up questions, and refusals that return to the prompt."""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path

import pytest

from benchmarks.transcripts.terminal import Terminal
from repl_bounds import PROMPT
from repl_bounds import SMALL as REPL_BOUNDS

SMALL = [*REPL_BOUNDS, "--seed", "3"]  # one reproducible episode for the follow-up


@pytest.fixture
def repl(tiny_gguf_fast: Path, chinook_db: Path, tmp_path_factory: pytest.TempPathFactory):
    home = tmp_path_factory.mktemp("home")
    env = {**os.environ, "EDGE_SQL_HOME": str(home), "TERM": "xterm", "PYTHONUNBUFFERED": "1"}
    args = [sys.executable, "-c", "from edge_sql.cli import main; main()", "run", "--db", str(chinook_db)]
    terminal = Terminal([*args, "--model", str(tiny_gguf_fast), *SMALL], env)
    terminal.wait_for(PROMPT)
    yield terminal, home
    terminal.kill()


def _after(lines: list[str], line: str) -> list[str]:
    """The screen's lines after the last one equal to `line`, up to the next prompt."""
    index = len(lines) - 1 - lines[::-1].index(line)
    shown = lines[index + 1 :]
    return shown[: shown.index(PROMPT)] if PROMPT in shown else shown


def test_help_lists_the_commands_and_is_never_a_question(repl):
    terminal, _ = repl
    banner = " ".join(terminal.screen())
    assert (
        "Questions go to the model; lines starting with `:` are this prompt's commands (`:help` lists them)" in banner
    )
    for count, word in enumerate((":help", "help", "?"), start=2):
        terminal.send(word + "\r")
        shown = _after(terminal.wait_for(PROMPT, count=count), PROMPT + word)
        assert shown[0] == "Commands (anything else is a question for the model):", shown
        assert [line.split()[0] for line in shown[1:]] == [
            ":help",
            ":right",
            ":fix",
            ":note",
            ":notes",
            ":new",
            ":fresh",
            ":quit",
        ]
    terminal.send(":bogus\r")
    assert _after(terminal.wait_for(PROMPT, count=5), PROMPT + ":bogus") == [
        "Error: unknown command :bogus (`:help` lists the commands)"
    ]
    assert not any(line.startswith("round ") for line in terminal.screen())  # the model was never asked
    terminal.send("exit\r")
    assert terminal.wait_exit() == 0


def test_fix_right_notes_and_follow_ups(repl):
    terminal, home = repl
    terminal.send(":right\r")
    assert _after(terminal.wait_for(PROMPT, count=2), PROMPT + ":right") == [
        "Error: no answer yet for :right to act on: ask a question first"
    ]
    terminal.send("How many albums?\r")
    assert _after(terminal.wait_for(PROMPT, count=3), PROMPT + "How many albums?")[0] == "round 1"
    terminal.send(":fix DELETE FROM Album\r")  # refused: it writes
    refused = _after(terminal.wait_for(PROMPT, count=4), PROMPT + ":fix DELETE FROM Album")
    assert refused == [
        "Error: refused: a verified answer must be one read-only SELECT, WITH or VALUES statement "
        "(this one starts with DELETE)"
    ]
    terminal.send(":fix SELECT COUNT(*) FROM Album\r")
    fixed = _after(terminal.wait_for(PROMPT, count=5), PROMPT + ":fix SELECT COUNT(*) FROM Album")
    assert fixed[0] == (
        'kept as verified (v1): "How many albums?" -> SELECT COUNT(*) FROM Album; '
        "the same question is answered at once from now on"
    )
    assert "     347" in fixed and fixed[-1].startswith("a verified answer from 20")
    terminal.send("how many ALBUMS\r")  # the same question: at once, no episode
    again = _after(terminal.wait_for(PROMPT, count=6), PROMPT + "how many ALBUMS")
    assert again[0] == "SQL: SELECT COUNT(*) FROM Album" and "round 1" not in again
    assert again[-2:] == ["(1 row; no episode: a verified answer)", again[-1]]
    terminal.send(":right\r")  # the same SQL again: nothing changes, v1 stays
    assert _after(terminal.wait_for(PROMPT, count=7), PROMPT + ":right") == [
        'already verified (v1), nothing changed: "How many albums?" -> SELECT COUNT(*) FROM Album'
    ]
    terminal.send(":note albums are records of an artist\r")
    assert _after(terminal.wait_for(PROMPT, count=8), PROMPT + ":note albums are records of an artist") == [
        "noted (note 1): the model reads it with every question about chinook.sqlite"
    ]
    terminal.send("And how many artists?\r")  # follows the last answer
    follow = _after(terminal.wait_for(PROMPT, count=9), PROMPT + "And how many artists?")
    assert follow[0] == "round 1" and follow[-1] == "given: 1 note, 1 verified example, the previous answer", follow
    terminal.send(":new\r")
    terminal.wait_for(PROMPT, count=10)
    terminal.send(":notes\r")
    listed = _after(terminal.wait_for(PROMPT, count=11), PROMPT + ":notes")
    assert listed == ["   1  albums are records of an artist", "  v1  How many albums? -> SELECT COUNT(*) FROM Album"]
    terminal.send(":quit\r")
    assert terminal.wait_exit() == 0
    with sqlite3.connect(home / "knowledge.sqlite") as conn:
        assert conn.execute("SELECT question, sql, follows FROM verified").fetchall() == [
            ("How many albums?", "SELECT COUNT(*) FROM Album", None)
        ]


def _answered(question: str, sql: str | None, follow_up=None):
    from edge_sql.agent.result import EpisodeResult
    from edge_sql.agent.stats import EpisodeStats
    from edge_sql.knowledge import Given

    result = EpisodeResult(question, None, sql, [], [], False, False, False, sql, [], EpisodeStats(), "", "submitted")
    result.given = Given(follow_up=follow_up)
    return result


def test_a_follow_up_of_a_follow_up_carries_only_the_last_pair():
    from edge_sql.commands.repl import Conversation
    from edge_sql.knowledge import FollowUp

    conversation = Conversation()
    assert conversation.follow_up() is None
    conversation.answered(_answered("Revenue per customer?", "SELECT 1"))
    first = conversation.follow_up()
    assert first == FollowUp("Revenue per customer?", "SELECT 1")
    conversation.answered(_answered("And by year?", "SELECT 2", follow_up=first))
    assert conversation.follow_up() == FollowUp("And by year?", "SELECT 2")  # not the first pair too
    conversation.answered(_answered("And by month?", None))  # no SQL: nothing to follow
    assert conversation.follow_up() is None
    conversation.answered(_answered("Top customer?", "SELECT 3"))
    conversation.follows = False  # :new
    assert conversation.follow_up() is None
