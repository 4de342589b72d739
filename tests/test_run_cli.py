"""`edge-sql run` through click's CliRunner (and one real process for Ctrl-C)."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from edge_sql.cli import main
from edge_sql.commands.progress import RATE_AFTER_TOKENS
from edge_sql.commands.run import EXIT_NO_ANSWER

SMALL = [
    "--no-tune",
    "--threads",
    "1",
    "--ctx",
    "2048",
    "--think-tokens",
    "8",
    "--calls-per-turn",
    "2",
    "--max-rounds",
    "3",
    "--budget",
    "max_sql_chars=24",
    "--budget",
    "max_name_chars=16",
    "--budget",
    "max_final_sql_tokens=24",
    "--budget",
    "min_string_chars=8",
]
JSON_FIELDS = {"sql", "columns", "rows", "forced", "fallback", "rounds", "stats", "stop", "error"}
STATS_FIELDS = {"prompt_tokens_evaluated", "generated_tokens", "transcript_tokens", "wall_s", "decode_tok_s"}


def run(*args: str, input: str | None = None):
    return CliRunner().invoke(main, ["run", *args], input=input, catch_exceptions=False)


def exit_code_for(answer: dict) -> int:
    """What `run --question` exits with for this answer: 0 with SQL that ran, else EXIT_NO_ANSWER."""
    return 0 if answer["sql"] is not None else EXIT_NO_ANSWER


def test_question_json_prints_one_object_with_every_field(tiny_gguf_fast, chinook_db):
    result = run(
        "--db",
        str(chinook_db),
        "--model",
        str(tiny_gguf_fast),
        "--question",
        "How many albums?",
        "--json",
        "--seed",
        "5",
        *SMALL,
    )
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, result.output
    data = json.loads(lines[0])
    assert result.exit_code == exit_code_for(data), result.output
    assert JSON_FIELDS <= set(data) and STATS_FIELDS <= set(data["stats"])
    assert "transcript" not in data
    assert isinstance(data["forced"], bool) and data["rounds"]
    for round_ in data["rounds"]:
        for call in round_["calls"]:
            assert {"tool", "args", "ok", "output"} <= set(call)
    stats = data["stats"]
    assert stats["transcript_tokens"] == (
        stats["prompt_tokens_evaluated"] + stats["generated_tokens"] + stats["prefix_tokens_restored"]
    )


def test_live_view_and_trace(tiny_gguf_fast, northwind_db):
    result = run(
        "--db",
        str(northwind_db),
        "--model",
        str(tiny_gguf_fast),
        "--question",
        "How many orders?",
        "--trace",
        "--seed",
        "9",
        *SMALL,
    )
    out = result.stdout
    assert result.exit_code == (0 if "\nSQL: " in out else EXIT_NO_ANSWER), result.output
    assert out.startswith("round 1\n")
    assert "--- transcript ---\n<|im_start|>system\n" in out
    assert "<|im_start|>user\nHow many orders?<|im_end|>" in out
    assert f"loaded {tiny_gguf_fast.name}" in result.stderr


def test_no_answer_exits_3_and_shows_the_failing_sql_and_the_stats(tiny_gguf_fast, chinook_db):
    """The random fixture model's final answers never run (seed 5: words that are not SQL, said so)."""
    args = [
        "--db",
        str(chinook_db),
        "--model",
        str(tiny_gguf_fast),
        "--question",
        "How many albums?",
        "--seed",
        "5",
        "--greedy",
        *SMALL,
    ]
    as_json = run(*args, "--json")
    data = json.loads(as_json.stdout)
    assert data["sql"] is None and data["answer"]
    assert data["error"].startswith(("the answer failed to run: ", "the final answer was not SQL: ")), data["error"]
    assert as_json.exit_code == EXIT_NO_ANSWER == 3
    live = run(*args)
    assert live.exit_code == EXIT_NO_ANSWER
    tail = live.stdout.split("final answer (forced)\n", 1)[1].splitlines()
    assert tail[:4] == [
        "(forced final answer: tool rounds used up)",
        f"SQL (did not run): {data['answer']}",
        f"no answer: {data['error']}",
        tail[3],
    ]
    assert re.fullmatch(r"\(no result; 3 rounds, \d+ calls?; [\d.]+ s; \d+ tokens generated at [\d.]+ tok/s\)", tail[3])
    assert "3    --question ended with no answer" in run("--help").stdout


def test_prompt_file_replaces_the_template(tiny_gguf_fast, chinook_db, tmp_path):
    from edge_sql.agent.prompt import DEFAULT_PROMPT_FILE

    custom = tmp_path / "mine.toml"
    custom.write_text(
        DEFAULT_PROMPT_FILE.read_text(encoding="utf-8")
        .replace('version = "sqale-v2"', 'version = "mine-1"')
        .replace('user_template = "{question}{evidence}"', 'user_template = "Please answer: {question}{evidence}"'),
        encoding="utf-8",
    )
    result = run(
        "--db",
        str(chinook_db),
        "--model",
        str(tiny_gguf_fast),
        "--question",
        "How many albums?",
        "--json",
        "--trace",
        "--prompt-file",
        str(custom),
        "--seed",
        "4",
        *SMALL,
    )
    data = json.loads(result.stdout)
    assert result.exit_code == exit_code_for(data), result.output
    assert data["prompt_version"] == "mine-1"
    assert "<|im_start|>user\nPlease answer: How many albums?<|im_end|>" in data["transcript"]


def test_interactive_prompt_answers_until_exit(tiny_gguf_fast, chinook_db):
    result = run(
        "--db",
        str(chinook_db),
        "--model",
        str(tiny_gguf_fast),
        "--json",
        "--seed",
        "1",
        *SMALL,
        input="How many albums?\nHow many artists?\nexit\nnever asked\n",
    )
    assert result.exit_code == 0, result.output
    answers = [json.loads(line) for line in result.stdout.strip().splitlines()]
    assert [a["question"] for a in answers] == ["How many albums?", "How many artists?"]
    assert "edge-sql>" not in result.output and "Ask about" not in result.output  # stdin is no terminal


def test_interactive_empty_line_and_eof_quit(tiny_gguf_fast, chinook_db):
    for text in ("\n", ""):
        result = run("--db", str(chinook_db), "--model", str(tiny_gguf_fast), *SMALL, input=text)
        assert result.exit_code == 0, result.output
        assert "round" not in result.stdout


def _empty_db(tmp_path: Path) -> Path:
    path = tmp_path / "empty.sqlite"
    sqlite3.connect(path).close()
    with sqlite3.connect(path) as conn:  # a real SQLite file with a header and no tables
        conn.execute("PRAGMA user_version = 1")
    return path


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing_db", "database file not found"),
        ("not_sqlite", "not a SQLite database"),
        ("empty_db", "has no tables"),
        ("empty_question", "empty question"),
        ("missing_model", "no such model file"),
        ("bad_gguf", "is not a GGUF file"),
        ("bad_budget", "max_rounds"),
        ("bad_prompt_file", "prompt file not found"),
    ],
)
def test_bad_input_exits_non_zero_with_one_line(case, message, tmp_path, chinook_db, tiny_gguf_fast):
    db, model, extra = str(chinook_db), str(tiny_gguf_fast), ["--question", "How many?"]
    if case == "missing_db":
        db, model = str(tmp_path / "nope.sqlite"), str(tmp_path / "nope.gguf")  # the db is checked first
    elif case == "not_sqlite":
        (tmp_path / "notes.sqlite").write_text("hello, not a database")
        db = str(tmp_path / "notes.sqlite")
    elif case == "empty_db":
        db = str(_empty_db(tmp_path))
    elif case == "empty_question":
        extra = ["--question", "  "]
    elif case == "missing_model":
        model = str(tmp_path / "nope.gguf")
    elif case == "bad_gguf":
        (tmp_path / "bad.gguf").write_bytes(b"GGUF" + b"\x00" * 12)
        model = str(tmp_path / "bad.gguf")
    elif case == "bad_budget":
        extra += ["--budget", "max_rounds=zero"]
    elif case == "bad_prompt_file":
        extra += ["--prompt-file", str(tmp_path / "nope.toml")]
    result = run("--db", db, "--model", model, *extra, *SMALL)
    assert result.exit_code != 0
    lines = [line for line in result.stderr.splitlines() if line.strip() and not line.startswith("loading")]
    assert len(lines) == 1 or case == "bad_budget", result.stderr
    assert message.lower() in result.stderr.lower()
    assert "Traceback" not in result.output
    if case in ("missing_db", "not_sqlite", "empty_db", "empty_question"):
        assert "loading" not in result.stderr  # refused before the model loads


@pytest.mark.parametrize(
    ("signum", "code", "says"),
    [
        (signal.SIGINT, 130, "stopped"),
        (signal.SIGTERM, 143, "stopped: terminated by SIGTERM"),
        (signal.SIGHUP, 129, "stopped: terminated by SIGHUP"),
    ],
)
def test_a_signal_stops_the_episode_cleanly(tiny_gguf_fast, chinook_db, signum, code, says):
    """A real process: SIGINT during the episode ends it with status 130, SIGTERM and SIGHUP with
    128 + N (as docs/architecture.md says), each with no traceback."""
    args = [
        sys.executable,
        "-c",
        "from edge_sql.cli import main; main()",
        "run",
        "--db",
        str(chinook_db),
        "--model",
        str(tiny_gguf_fast),
        "--question",
        "How many albums?",
        "--seed",
        "2",
        "--threads",
        "1",
        "--ctx",
        "4096",
        "--think-tokens",
        "2000",
        "--budget",
        "max_tokens=4096",
        "--no-tune",
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 120
    line = ""
    while time.monotonic() < deadline and "round 1" not in line:  # the episode has started
        line = process.stdout.readline()
    time.sleep(1.0)  # now inside a 2000-token think block
    process.send_signal(signum)
    out, err = process.communicate(timeout=120)
    assert process.returncode == code, (out, err)
    assert says in out + err
    assert "Traceback" not in err


def test_first_run_calibrates_then_reuses_its_settings_and_prompt_state(
    tiny_gguf_fast, chinook_db, tmp_path, monkeypatch
):
    """Tuning on (the default): the first run calibrates with a progress line, the next reuses it."""
    monkeypatch.setenv("EDGE_SQL_HOME", str(tmp_path / "home"))
    tuned = [arg for arg in SMALL if arg != "--no-tune"]
    first = run(
        "--db",
        str(chinook_db),
        "--model",
        str(tiny_gguf_fast),
        "--question",
        "How many albums?",
        "--json",
        "--seed",
        "5",
        *tuned,
    )
    answer = json.loads(first.stdout.strip().splitlines()[-1])
    assert first.exit_code == exit_code_for(answer), first.output
    assert (
        "quick calibration" in first.stderr
        and f"calibrating {tiny_gguf_fast.name}: timing setting 1 of " in first.stderr
    )
    stats = answer["stats"]
    assert stats["tuning"] == "calibrated" and stats["llama_settings"].startswith("flash_attn=")
    assert "n_threads=1" in stats["llama_settings"]  # --threads wins over the calibrated count
    assert stats["prefix_tokens_restored"] == 0  # nothing saved yet: evaluated, then saved to disk
    assert list((tmp_path / "home" / "prefix-states").glob("*.state"))

    second = run(
        "--db",
        str(chinook_db),
        "--model",
        str(tiny_gguf_fast),
        "--question",
        "How many albums?",
        "--json",
        "--seed",
        "5",
        *tuned,
    )
    answer_again = json.loads(second.stdout.strip().splitlines()[-1])
    assert second.exit_code == exit_code_for(answer_again), second.output
    assert "calibrating" not in second.stderr and "settings (cached)" in second.stderr
    again = answer_again["stats"]
    assert again["llama_settings"] == stats["llama_settings"]
    assert again["prefix_tokens_restored"] > 300  # a fresh process skips the shared prompt
    assert again["transcript_tokens"] == stats["transcript_tokens"]  # same seed, same episode


@pytest.mark.parametrize("command", ["run", "bench", "serve"])
def test_context_and_episode_ranges_agree_across_commands(command):
    from edge_sql.agent.budget import MIN_EPISODE_TOKENS
    from edge_sql.commands.options import MIN_CONTEXT_TOKENS

    assert MIN_CONTEXT_TOKENS == MIN_EPISODE_TOKENS
    for option in ("--ctx", "--episode-tokens"):
        below = CliRunner().invoke(main, [command, option, str(MIN_CONTEXT_TOKENS - 1)])
        assert below.exit_code == 2, below.output
        assert (
            f"Invalid value for '{option}': {MIN_CONTEXT_TOKENS - 1} is not in the range x>={MIN_CONTEXT_TOKENS}."
            in below.output
        )


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (["--budget", "max_sql_chars=-1"], "max_sql_chars=-1 is out of range (at least 1)"),
        (
            ["--budget", "min_think_tokens=500", "--think-tokens", "8"],
            "min_think_tokens=500 is above max_think_tokens=8: a minimum must not exceed its maximum "
            "(--think-tokens sets max_think_tokens)",
        ),
    ],
)
def test_budget_values_are_refused_with_what_is_wrong(items, message, tmp_path):
    result = run("--db", str(tmp_path / "never-opened.sqlite"), *items)
    assert result.exit_code == 2
    assert message in result.stderr and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("room", "names"),
    [
        (
            ["--ctx", "1024"],
            "in the 1024-token context; use a larger context (--ctx, n_ctx), up to the episode's 12288",
        ),
        (
            ["--ctx", "32768", "--episode-tokens", "1024"],
            "in the 1024-token episode budget; raise --episode-tokens (Budget.max_tokens), up to the context's 32768",
        ),
        (
            ["--ctx", "1024", "--episode-tokens", "1024"],
            "in the 1024-token context and episode budget; raise both --ctx and --episode-tokens (n_ctx, Budget.max_tokens)",
        ),
    ],
)
def test_a_question_over_the_room_names_the_option_that_binds(room, names, tiny_gguf_fast, chinook_db):
    long_question = "How many albums are there, counting every album of every artist? " * 60
    result = run("--db", str(chinook_db), "--model", str(tiny_gguf_fast), "--question", long_question, *SMALL, *room)
    assert result.exit_code == 1
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("Error: the prompt and question need about ") and error.endswith(names), error


def test_vote_runs_k_episodes_and_says_how_many_agreed(tiny_gguf_fast, chinook_db):
    """`--vote 2`: two sampled episodes (seeds 3 and 4) at once, each listed with its group, then
    the agreement line; the random fixture's answers never run, so no episode votes."""
    args = [
        "--db",
        str(chinook_db),
        "--model",
        str(tiny_gguf_fast),
        "--question",
        "How many albums?",
        "--seed",
        "3",
        "--vote",
        "2",
        *SMALL,
    ]
    as_json = run(*args, "--json")
    data = json.loads(as_json.stdout)
    assert as_json.exit_code == exit_code_for(data), as_json.output
    vote = data["stats"]["vote"]
    assert vote["k"] == 2 and vote["seeds"] == [3, 4] and len(vote["episodes"]) == 2
    assert (vote["voters"], vote["agreed"], vote["chosen"], vote["agreement"]) == (0, 0, 0, 0.0)
    live = run(*args)
    assert live.exit_code == EXIT_NO_ANSWER
    lines = live.stdout.splitlines()
    assert lines[0] == "voting: 2 sampled episodes at once"
    assert lines[1].startswith("* episode 1 (seed 3, ") and lines[2].startswith("  episode 2 (seed 4, ")
    assert re.fullmatch(
        r"0 of 2 episodes agreed \(2 without an answer that runs\); the answer is episode 1's "
        r"\([\d.]+ s for all 2\)",
        lines[3],
    ), lines[3]
    assert "round 1" not in live.stdout  # two episodes' rounds would interleave: not shown


def test_vote_refuses_greedy_and_a_question_over_the_room(tiny_gguf_fast, chinook_db, tmp_path):
    greedy = run("--db", str(tmp_path / "never-opened.sqlite"), "--question", "How many?", "--vote", "3", "--greedy")
    assert greedy.exit_code == 2
    assert "--vote samples K episodes and --greedy would make them all the same" in greedy.stderr
    assert run("--db", str(chinook_db), "--vote", "1").exit_code == 2
    long_question = "How many albums are there, counting every album of every artist? " * 60
    result = run(
        "--db",
        str(chinook_db),
        "--model",
        str(tiny_gguf_fast),
        "--question",
        long_question,
        "--vote",
        "2",
        *SMALL,
        "--ctx",
        "1024",
    )
    assert result.exit_code == 1
    assert result.stderr.strip().splitlines()[-1].startswith("Error: the prompt and question need about ")


def test_the_interactive_prompt_votes_on_every_question(tiny_gguf_fast, chinook_db):
    result = run(
        "--db",
        str(chinook_db),
        "--model",
        str(tiny_gguf_fast),
        "--json",
        "--seed",
        "1",
        "--vote",
        "2",
        *SMALL,
        input="How many albums?\nHow many artists?\n",
    )
    assert result.exit_code == 0, result.output
    answers = [json.loads(line) for line in result.stdout.strip().splitlines()]
    assert [a["question"] for a in answers] == ["How many albums?", "How many artists?"]
    assert [a["stats"]["vote"]["seeds"] for a in answers] == [[1, 2], [1, 2]]
    assert all(len(a["stats"]["vote"]["episodes"]) == 2 for a in answers)


def test_ctrl_c_stops_every_episode_of_a_vote(tiny_gguf_fast, chinook_db):
    """A real process: SIGINT while two episodes think stops both and exits 130, no traceback."""
    args = [
        sys.executable,
        "-c",
        "from edge_sql.cli import main; main()",
        "run",
        "--db",
        str(chinook_db),
        "--model",
        str(tiny_gguf_fast),
        "--question",
        "How many albums?",
        "--seed",
        "2",
        "--vote",
        "2",
        "--threads",
        "1",
        "--ctx",
        "4096",
        "--think-tokens",
        "2000",
        "--budget",
        "max_tokens=4096",
        "--no-tune",
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    assert process.stdout.readline() == "voting: 2 sampled episodes at once\n"
    time.sleep(2.0)  # now inside the 2000-token think blocks
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 130, (out, err)
    assert out == "stopped.\n" and "Traceback" not in err


def _run_process(args: list[str], *, stderr_terminal: bool, timeout_s: float = 300) -> tuple[int, str, bytes]:
    """`edge-sql run` in a real process, stdout to a pipe, stderr to a pseudo-terminal or a pipe:
    (exit status, stdout, every byte stderr wrote)."""
    import pty
    import select

    cli = [sys.executable, "-c", "from edge_sql.cli import main; main()", "run"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200", "TERM": "xterm"}
    if not stderr_terminal:
        done = subprocess.run([*cli, *args], capture_output=True, env=env, timeout=timeout_s, stdin=subprocess.DEVNULL)
        return done.returncode, done.stdout.decode(), done.stderr
    master, slave = pty.openpty()
    process = subprocess.Popen([*cli, *args], stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL, env=env)
    os.close(slave)
    err = bytearray()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed its end (Linux: EIO)
                break
            if not chunk:
                break
            err += chunk
        elif process.poll() is not None:
            break
    out = process.stdout.read().decode()
    os.close(master)
    return process.wait(timeout=60), out, bytes(err)


STATUS = re.compile(rb"\r\x1b\[2K(round \d+): (\d+) tokens?(, [\d.]+ tok/s)?, \d+ s")


@pytest.mark.parametrize("as_json", [False, True])
def test_a_terminal_sees_a_live_status_line_that_is_gone_when_the_answer_prints(tiny_gguf_fast, chinook_db, as_json):
    """stderr a real pty: round, tokens, tok/s and elapsed redrawn in place, erased before the
    answer; stdout (a pipe) gets the rounds and the answer only, `--json` one object."""
    args = [
        "--db",
        str(chinook_db),
        "--model",
        str(tiny_gguf_fast),
        "--question",
        "How many albums?",
        "--seed",
        "3",
        *SMALL,
        *(["--json"] if as_json else []),
    ]
    code, out, err = _run_process(args, stderr_terminal=True)
    assert code in (0, EXIT_NO_ANSWER), (out, err)
    shown = STATUS.findall(err)
    assert shown, err
    assert any(int(tokens) > 0 for _, tokens, _ in shown)  # tokens counted while the model writes
    # a rate once it means something: never over the first few tokens ("1 token, 1080.8 tok/s")
    assert not any(rate for _, tokens, rate in shown if int(tokens) < RATE_AFTER_TOKENS), shown
    assert err.rstrip(b"\r\n").endswith(b"\r\x1b[2K")  # erased: the last thing on the line
    assert "\x1b" not in out and "tok/s," not in out
    if as_json:
        assert json.loads(out)["question"] == "How many albums?"
    else:
        assert out.startswith("round 1\n") and "generated at" in out.splitlines()[-1]


def test_no_status_line_when_stderr_is_not_a_terminal(tiny_gguf_fast, chinook_db):
    args = [
        "--db",
        str(chinook_db),
        "--model",
        str(tiny_gguf_fast),
        "--question",
        "How many albums?",
        "--seed",
        "3",
        *SMALL,
    ]
    code, out, err = _run_process(args, stderr_terminal=False)
    assert code in (0, EXIT_NO_ANSWER), (out, err)
    assert b"\x1b" not in err and b"\r" not in err and not STATUS.search(err) and b"tok/s," not in err
    assert out.startswith("round 1\n")


def test_questions_from_a_pipe_print_each_answer_after_its_question(tiny_gguf_fast, chinook_db):
    result = run(
        "--db",
        str(chinook_db),
        "--model",
        str(tiny_gguf_fast),
        "--seed",
        "1",
        *SMALL,
        input="How many albums?\nHow many artists?\n",
    )
    assert result.exit_code == 0, result.output
    blocks = result.stdout.split("question: ")
    assert blocks[0] == "" and [b.splitlines()[0] for b in blocks[1:]] == ["How many albums?", "How many artists?"]
    for block in blocks[1:]:  # each question's rounds, then its answer's stats line
        lines = block.splitlines()
        assert lines[1] == "round 1" and " generated at " in lines[-1]


def test_the_status_line_says_what_it_waits_for_before_the_first_round(monkeypatch):
    import io

    from edge_sql.commands import progress
    from edge_sql.commands.progress import StatusLine

    monkeypatch.setattr(progress, "TICK_S", 3600.0)  # no redraw by the clock: the lines below are all

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Terminal()
    with StatusLine(stream, what="voting (4 episodes)") as status:
        assert re.fullmatch(r"voting \(4 episodes\), \d+ s", status.text())
        status.update(round=2, tokens=40, tok_s=3.25)
        assert re.fullmatch(r"round 2: 40 tokens, 3\.2 tok/s, \d+ s", status.text())
        with status.above():
            stream.write("a line\n")
        status.update()  # redrawn below the line
    shown = stream.getvalue()
    assert re.fullmatch(
        r"\r\x1b\[2Kvoting \(4 episodes\), \d+ s"
        r"\r\x1b\[2Kround 2: 40 tokens, 3\.2 tok/s, \d+ s\r\x1b\[2Ka line\n"
        r"\r\x1b\[2Kround 2: 40 tokens, 3\.2 tok/s, \d+ s\r\x1b\[2K",
        shown,
    ), shown
    assert not StatusLine(io.StringIO()).enabled  # not a terminal: nothing is drawn
    early = StatusLine(stream)
    early.update(round=1, tokens=1, tok_s=1080.8)  # one token timed over one decode: no rate yet
    assert re.fullmatch(r"round 1: 1 token, \d+ s", early.text())


def test_keys_typed_during_a_run_are_not_echoed_into_the_status_line(tiny_gguf_fast, chinook_db):
    """stdin and stderr one real pty, as at a terminal: text typed while the model works does not
    appear on the screen (the line discipline would echo it into the status line), and the
    terminal echoes again once the answer is printed."""
    import pty
    import select
    import termios

    master, slave = pty.openpty()
    args = ["--db", str(chinook_db), "--model", str(tiny_gguf_fast), "--question", "How many albums?", *SMALL]
    cli = [sys.executable, "-c", "from edge_sql.cli import main; main()", "run", *args]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200", "TERM": "xterm"}
    process = subprocess.Popen(cli, stdin=slave, stdout=subprocess.PIPE, stderr=slave, env=env)
    screen, typed = bytearray(), False
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        if select.select([master], [], [], 0.2)[0]:
            screen += os.read(master, 65536)
        if not typed and b"reading the question" in screen:  # the status line is up: keys are not echoed
            os.write(master, b"typed meanwhile")
            typed = True
    out = process.stdout.read().decode()
    assert process.wait(timeout=60) in (0, EXIT_NO_ANSWER), (out, bytes(screen))
    while select.select([master], [], [], 0.2)[0]:
        screen += os.read(master, 65536)
    assert typed and b"typed meanwhile" not in screen, bytes(screen)
    assert termios.tcgetattr(slave)[3] & termios.ECHO  # echo is back for whatever comes next
    os.close(slave)
    os.close(master)


def test_help_says_that_db_takes_data_files_too():
    """A new user reads `edge-sql --help` and `run --help` first: both say that --db takes a CSV
    (or another data file) as well as a SQLite database, and how to try edge-sql offline."""
    top = CliRunner().invoke(main, ["--help"])
    run_help = CliRunner().invoke(main, ["run", "--help"])
    assert top.exit_code == run_help.exit_code == 0
    top_text, run_text = " ".join(top.output.split()), " ".join(run_help.output.split())
    assert "or a data file (CSV, TSV, JSON Lines, Excel, Parquet)" in top_text
    assert "edge-sql run --db sales.csv" in top_text and "--profile small" in top_text
    assert run_text.split("Options:")[0].count("a data file (CSV, TSV, JSON Lines, Excel, Parquet)") == 1


def test_run_looks_a_verified_answer_up_once_before_the_model(tiny_gguf_fast, chinook_db, tmp_path, monkeypatch):
    """Issue 63: `run --question` takes the knowledge's first step (`answers.at_once`) before
    loading a model; when it finds nothing the Agent does not look again; a verified answer that
    no longer holds is looked up again by the Agent, whose result says why it was not used."""
    from edge_sql.knowledge import Knowledge, answers
    from edge_sql.tools import ReadOnlyDatabase

    monkeypatch.setenv("EDGE_SQL_HOME", str(tmp_path / "home"))
    looks: list[str] = []
    at_once = answers.at_once
    monkeypatch.setattr(
        answers,
        "at_once",
        lambda kb, db, question, *a, **k: looks.append(question) or at_once(kb, db, question, *a, **k),
    )
    common = ["--db", str(chinook_db), "--model", str(tiny_gguf_fast), "--seed", "1", *SMALL]
    plain = run(*common, "--question", "How many artists?")
    assert plain.exit_code in (0, EXIT_NO_ANSWER) and looks == ["How many artists?"], plain.output
    with Knowledge.open() as kb, ReadOnlyDatabase(chinook_db) as db:
        kept = kb.verify(
            db, "How many customers live in Brazil?", "SELECT COUNT(*) FROM Customer WHERE Country = 'Brazil'"
        )
    with sqlite3.connect(chinook_db) as conn:
        conn.execute("UPDATE Customer SET Country = 'Brasil' WHERE Country = 'Brazil'")
    conn.close()
    looks.clear()
    stale = run(*common, "--question", "How many customers live in Brazil?")
    assert looks == ["How many customers live in Brazil?"] * 2  # run's, then the Agent's (it says why)
    assert (
        f"note: the verified answer v{kept.id} was not used: the database no longer holds "
        "Customer.Country = 'Brazil'; it is marked stale and the model is asked"
    ) in stale.stdout.splitlines(), stale.output
