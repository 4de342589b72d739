"""`edge-sql run`'s interactive prompt in a real pseudo-terminal (benchmarks/transcripts/terminal.py): line editing
and history, errors that return to the prompt, Ctrl-C; asserted on what the screen shows."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from benchmarks.transcripts.terminal import Terminal
from repl_bounds import PROMPT, SMALL

UP, LEFT, KILL_LINE = "\x1b[A", "\x1b[D", "\x15"


@pytest.fixture
def repl(tiny_gguf_fast: Path, chinook_db: Path, tmp_path: Path):
    """Starts `edge-sql run` at a terminal (no --question) with a fresh model store."""
    started: list[Terminal] = []
    env = {**os.environ, "EDGE_SQL_HOME": str(tmp_path / "home"), "TERM": "xterm", "PYTHONUNBUFFERED": "1"}

    def start(*options: str) -> Terminal:
        terminal = Terminal(
            [
                sys.executable,
                "-c",
                "from edge_sql.cli import main; main()",
                "run",
                "--db",
                str(chinook_db),
                "--model",
                str(tiny_gguf_fast),
                *options,
            ],
            env,
        )
        started.append(terminal)
        terminal.wait_for(PROMPT)
        return terminal

    yield start
    for terminal in started:
        terminal.kill()


def _after(lines: list[str], line: str) -> list[str]:
    """The screen's lines after the last one equal to `line`."""
    index = len(lines) - 1 - lines[::-1].index(line)
    return lines[index + 1 :]


def test_arrow_keys_edit_the_line_and_recall_questions_kept_in_the_store(repl, tmp_path):
    terminal = repl(*SMALL, "--seed", "3")
    terminal.send("How many albums?\r")
    terminal.wait_for(PROMPT, count=2)
    terminal.send(UP + LEFT * len("albums?") + "rock \r")  # the last question, edited in place
    screen = terminal.wait_for(PROMPT, count=3)
    assert PROMPT + "How many rock albums?" in screen
    assert not any("^[" in line or "\x1b" in line for line in screen)
    terminal.send("exit\r")
    assert terminal.wait_exit() == 0
    history = (tmp_path / "home" / "run-history").read_text(encoding="utf-8").splitlines()
    assert history[-3:] == ["How many albums?", "How many rock albums?", "exit"]

    again = repl(*SMALL)  # a new session starts with the questions of the last
    again.send(UP + UP)
    assert again.wait_for(PROMPT + "How many rock albums?")[-1] == PROMPT + "How many rock albums?"
    again.send(KILL_LINE + "exit\r")
    assert again.wait_exit() == 0


def test_a_question_too_long_for_the_episode_prints_the_error_and_returns_to_the_prompt(repl):
    terminal = repl(*SMALL, "--ctx", "1024", "--seed", "3")
    terminal.send("How many albums are there, counting every album of every artist? " * 30 + "\r")
    screen = terminal.wait_for(PROMPT, count=2)
    error = _after(screen, next(line for line in screen if line.startswith(PROMPT + "How many albums are there")))
    assert error[0].startswith("Error: the prompt and question need about ") and error[1] == PROMPT, error
    terminal.send("How many albums?\r")  # the model is still loaded
    screen = terminal.wait_for(PROMPT, count=3)
    assert _after(screen, PROMPT + "How many albums?")[0] == "round 1"
    terminal.send("exit\r")
    assert terminal.wait_exit() == 0


def test_ctrl_c_stops_the_question_with_one_clean_line(repl):
    terminal = repl(
        "--no-tune",
        "--threads",
        "1",
        "--ctx",
        "4096",
        "--think-tokens",
        "2000",
        "--budget",
        "max_tokens=4096",
        "--seed",
        "2",
    )
    terminal.send("How many albums?\r")
    terminal.wait_for("round 1")
    time.sleep(1.0)  # now inside a 2000-token think block
    terminal.send("\x03")
    screen = terminal.wait_for(PROMPT, count=2)
    shown = _after(screen, PROMPT + "How many albums?")
    assert shown[0] == "round 1" and shown[-2:] == ["stopped; ask another question", PROMPT], shown
    assert not any("^C" in line for line in shown)
    terminal.send("exit\r")
    assert terminal.wait_exit() == 0


def test_sigterm_at_the_prompt_ends_the_session_with_143_and_keeps_the_history(repl, tmp_path):
    terminal = repl(*SMALL, "--seed", "3")
    terminal.send("How many albums?\r")
    terminal.wait_for(PROMPT, count=2)
    os.kill(terminal.pid, signal.SIGTERM)
    assert terminal.wait_exit() == 143
    assert "stopped: terminated by SIGTERM" in terminal.screen()
    assert (tmp_path / "home" / "run-history").read_text(encoding="utf-8").splitlines() == ["How many albums?"]
