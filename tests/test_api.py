"""`edge_sql.Agent`: one load, many questions, and safe concurrent use."""

from __future__ import annotations

import threading

import pytest

import edge_sql
from edge_sql.agent import Budget
from edge_sql.errors import DatabaseError, EdgeSqlError, ModelFileError
from edge_sql.tools import ReadOnlyDatabase

SMALL = Budget(
    max_tokens=2048,
    max_rounds=3,
    max_think_tokens=8,
    max_final_think_tokens=8,
    max_sql_chars=24,
    max_name_chars=16,
    min_string_chars=8,
    min_think_tokens=4,
    max_final_sql_tokens=24,
    max_calls_per_turn=2,
)
FIELDS = {"sql", "columns", "rows", "forced", "fallback", "rounds", "stats", "stop", "error", "answer"}


@pytest.fixture(scope="module")
def agent(tiny_gguf_fast):
    with edge_sql.Agent(
        tiny_gguf_fast, n_ctx=2048, n_threads=1, budget=SMALL, pull_if_missing=False, tune=False, prefix_cache=False
    ) as agent:
        yield agent


def test_agent_is_exported_lazily():
    assert edge_sql.Agent.__name__ == "Agent"
    with pytest.raises(AttributeError):
        edge_sql.NotAThing  # noqa: B018 - the access is what raises


def test_one_load_answers_several_questions(agent, tiny_gguf_fast, chinook_db, northwind_db):
    session = agent.session
    results = [
        agent.ask("How many albums are there?", chinook_db, seed=1),
        agent.ask("How many orders were shipped to France?", northwind_db, seed=2, evidence="France is a country"),
        agent.ask("Which artist has the most albums?", ReadOnlyDatabase(chinook_db), greedy=True),
    ]
    assert agent.session is session and agent.model_path == tiny_gguf_fast
    for result in results:
        data = result.to_json()
        assert FIELDS <= set(data)
        assert result.rounds and all(call.tool for r in result.rounds for call in r.calls)
        stats = result.stats.to_json()
        assert stats["transcript_tokens"] == (
            stats["prompt_tokens_evaluated"] + stats["generated_tokens"] + stats["prefix_tokens_restored"]
        )
    # the shared prompt prefix is evaluated for the first question only, then restored
    assert results[0].stats.to_json()["prefix_tokens_restored"] in (
        0,
        results[1].stats.to_json()["prefix_tokens_restored"],
    )
    assert (
        results[1].stats.to_json()["prefix_tokens_restored"]
        == results[2].stats.to_json()["prefix_tokens_restored"]
        > 100
    )
    assert results[0].stats.to_json()["tuning"] == "off"  # tune=False: safe defaults, named in the stats
    assert (
        results[0].stats.to_json()["llama_settings"]
        == "flash_attn=auto n_ubatch=256 n_threads=1 repack=off gpu_layers=0"
    )
    assert "How many orders were shipped to France?, evidence: France is a country<|im_end|>" in results[1].transcript
    assert results[0].question == "How many albums are there?"


def test_same_seed_same_episode(agent, chinook_db):
    first = agent.ask("List the genres.", chinook_db, seed=7)
    second = agent.ask("List the genres.", chinook_db, seed=7)
    assert (
        first.transcript == second.transcript
        and first.to_json(transcript=False)["rounds"] == second.to_json(transcript=False)["rounds"]
    )


def test_two_threads_get_their_own_results(agent, chinook_db, northwind_db):
    jobs = {
        "a": ("Which customer spent the most?", chinook_db, 11),
        "b": ("How many products are discontinued?", northwind_db, 12),
    }
    expected = {name: agent.ask(q, db, seed=seed).transcript for name, (q, db, seed) in jobs.items()}
    events: list[tuple[str, str]] = []
    got: dict[str, object] = {}

    def work(name: str) -> None:
        question, db, seed = jobs[name]
        got[name] = agent.ask(question, db, seed=seed, on_event=lambda e: events.append((name, type(e).__name__)))

    threads = [threading.Thread(target=work, args=(name,)) for name in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    assert {name: result.transcript for name, result in got.items()} == expected
    assert got["a"].question == jobs["a"][0] and got["b"].question == jobs["b"][0]
    # the lock serialises episodes: one episode's events all come before the other's
    order = [name for name, _ in events]
    first = order[0]
    assert order == [first] * order.count(first) + [n for n in order if n != first]


def test_bad_inputs_raise_clear_errors(agent, tmp_path):
    with pytest.raises(DatabaseError, match="database file not found"):
        agent.ask("How many?", tmp_path / "missing.sqlite")
    with pytest.raises(EdgeSqlError, match="empty question"):
        agent.ask("   ", tmp_path / "missing.sqlite")


def test_missing_model_and_closed_agent(tiny_gguf_fast, tmp_path, monkeypatch, chinook_db):
    with pytest.raises(ModelFileError, match="no such model file"):
        edge_sql.Agent(tmp_path / "nope.gguf")
    monkeypatch.setenv("EDGE_SQL_HOME", str(tmp_path / "store"))
    with pytest.raises(ModelFileError, match="edge-sql pull"):
        edge_sql.Agent(None, pull_if_missing=False)
    closed = edge_sql.Agent(
        tiny_gguf_fast, n_ctx=1024, n_threads=1, budget=SMALL, pull_if_missing=False, tune=False, prefix_cache=False
    )
    closed.close()
    closed.close()
    with pytest.raises(EdgeSqlError, match="closed"):
        closed.ask("How many?", chinook_db)


def test_an_agent_that_calibrates_says_so_through_its_logger(tiny_gguf, tmp_path, monkeypatch, caplog):
    """`Agent()` on a file this machine has not calibrated: the quick calibration's lines go to
    the `edge_sql.api` logger (an application sees why the first load takes longer)."""
    import shutil

    from edge_sql.runtime.tuning import Settings, calibration

    monkeypatch.setenv("EDGE_SQL_HOME", str(tmp_path / "home"))
    two = [Settings(True, 64, 1), Settings(False, 64, 1)]  # two candidates: a short calibration
    monkeypatch.setattr(calibration, "candidates", lambda n_threads=None: two)
    model = tmp_path / "model.gguf"
    shutil.copyfile(tiny_gguf, model)
    with caplog.at_level("INFO", logger="edge_sql.api"):
        with edge_sql.Agent(model, n_ctx=1024, n_threads=1, pull_if_missing=False, prefix_cache=False) as agent:
            assert agent.tuning == "calibrated"
    messages = [r.getMessage() for r in caplog.records if r.name == "edge_sql.api"]
    assert messages[0].startswith("first run of model.gguf on this machine: a quick calibration")
    assert any(m.startswith("calibrated in ") for m in messages)
    caplog.clear()
    with caplog.at_level("INFO", logger="edge_sql.api"):
        with edge_sql.Agent(model, n_ctx=1024, n_threads=1, pull_if_missing=False, prefix_cache=False) as agent:
            assert agent.tuning == "cached"
    assert not [r for r in caplog.records if r.name == "edge_sql.api"]  # nothing to say once cached
