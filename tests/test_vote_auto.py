"""`--vote auto`: the largest vote predicted within 2x one episode from the calibrated decode rates
(runtime/tuning/auto_vote.py), in the API, `run` and `edge-sql tune`."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

import edge_sql
from edge_sql.runtime.tuning import Settings, calibrate, save_calibration
from edge_sql.runtime.tuning.auto_vote import VOTE_FACTOR, auto_vote, auto_vote_line, rate_at, vote_cost

# decode tok/s at 1, 2, 4, 8 sequences as a 2-core AVX-512 Xeon measured them (parallel.md's shape)
XEON = [[1, 9.4], [2, 13.0], [4, 19.0], [8, 22.0]]


def test_the_prediction_is_k_times_one_sequences_rate_over_k_sequences_rate() -> None:
    assert rate_at(XEON, 4) == 19.0 and rate_at(XEON, 3) == pytest.approx(16.0) and rate_at(XEON, 16) is None
    assert vote_cost(XEON, 4) == pytest.approx(4 * 9.4 / 19.0)
    assert vote_cost(XEON, 6) == pytest.approx(6 * 9.4 / 20.5)
    assert vote_cost([], 2) is None


def test_auto_is_the_largest_k_within_the_factor_and_the_limit() -> None:
    assert auto_vote(XEON, 8) == 4  # 1.98x; 5 would be 2.38x
    assert auto_vote(XEON, 3) == 3  # no more sequences than fit
    assert auto_vote([[1, 10.0], [2, 10.5]], 2) == 2  # 1.90x
    assert auto_vote([[1, 10.0], [2, 9.0]], 2) == 1  # a vote of 2 at 2.22x: no vote
    assert auto_vote([], 1) == 1
    assert "no vote (a vote of 2 is predicted at 2.22x one episode" in auto_vote_line([[1, 10.0], [2, 9.0]], 2)
    assert auto_vote_line(XEON, 8).startswith("--vote auto: 4 (a vote of 4 predicted at 1.98x one episode")


@pytest.fixture(scope="module")
def calibration(tiny_gguf: Path):
    """A calibration of the fixture with room for three sequences, saved where Agents find it."""
    settings = Settings(True, 32, 1)
    small = dict(n_ctx=1024, points=(64,), prefill_chunk=32, decode_tokens=4, process_bytes=0)
    bound = calibrate(tiny_gguf, settings=[settings], full=False, **small).chosen_measurement().memory_bytes
    from edge_sql.runtime.tuning.parallel import allocated_with

    per_sequence = allocated_with(tiny_gguf, settings, 1024, 2) - allocated_with(tiny_gguf, settings, 1024, 1)
    result = calibrate(
        tiny_gguf, settings=[settings], full=False, parallel_memory=bound + 5 * per_sequence // 2, **small
    )
    save_calibration(result)
    return result


def test_auto_comes_from_this_machines_calibration(tiny_gguf: Path, chinook_db: Path, calibration) -> None:
    """A calibration of the fixture with room for three sequences: the Agent's `auto_vote` is the
    K its measured rates give, every K up to it predicted within the factor, `run --vote auto`
    says so and votes with it; `tune`'s table has the line."""
    from edge_sql.cli import main
    from edge_sql.commands.tune import calibration_table

    result = calibration
    rates, limit = result.parallel_rates, result.chosen.parallel_limit
    assert limit == 3 and [int(w) for w, _ in rates] == [1, 2, 3]
    expected = auto_vote(rates, limit)
    assert expected == max([k for k in (2, 3) if vote_cost(rates, k) <= VOTE_FACTOR], default=1)
    assert f"({auto_vote_line(rates, limit)})" in calibration_table(result)
    with edge_sql.Agent(tiny_gguf, n_ctx=1024, pull_if_missing=False, prefix_cache=False, parallel=limit) as agent:
        assert agent.tuning == "cached"
        assert (agent.auto_vote, agent.auto_vote_line) == (expected, auto_vote_line(rates, limit))
    with edge_sql.Agent(tiny_gguf, n_ctx=1024, pull_if_missing=False, prefix_cache=False, tune=False) as untuned:
        assert untuned.auto_vote == 1 and "no decode rate" in untuned.auto_vote_line  # nothing measured
    out = CliRunner().invoke(
        main,
        [
            "run",
            "--db",
            str(chinook_db),
            "--model",
            str(tiny_gguf),
            "--ctx",
            "1024",
            "--question",
            "How many albums?",
            "--vote",
            "auto",
            "--seed",
            "1",
            "--max-rounds",
            "1",
            "--think-tokens",
            "8",
        ],
    )
    assert auto_vote_line(rates, limit) in out.output, out.output
    if expected >= 2:
        assert f"voting: {expected} sampled episodes at once" in out.output
    else:
        assert "voting:" not in out.output


def test_run_refuses_a_vote_that_is_neither_a_number_nor_auto(chinook_db: Path) -> None:
    from edge_sql.cli import main

    out = CliRunner().invoke(main, ["run", "--db", str(chinook_db), "--vote", "many", "--question", "q"])
    assert out.exit_code == 2 and "'many' is neither a number of episodes nor 'auto'" in out.output
    out = CliRunner().invoke(main, ["run", "--db", str(chinook_db), "--vote", "1", "--question", "q"])
    assert out.exit_code == 2 and "a vote needs at least 2 episodes, got 1" in out.output


# ---- `--vote auto` in the API's driver, serve and the bench ----------------------------------

TINY = edge_sql.Budget(
    max_rounds=1,
    max_think_tokens=8,
    max_final_think_tokens=8,
    max_calls_per_turn=1,
    max_final_sql_tokens=24,
    max_sql_chars=48,
    max_name_chars=24,
    max_tokens=2048,
)  # the calibration's 1024 tokens leave no room for a turn


@pytest.fixture(scope="module")
def voting(calibration):
    """The fixture's calibration with decode rates where a vote of 3 is predicted within the factor
    (a busy 2-core machine measures rates where no vote is): the K>=2 path, from saved figures."""
    rates = [[1, 10.0], [2, 18.0], [3, 25.0]]  # a vote of 3 predicted at 1.2x one episode
    save_calibration(replace(calibration, parallel_rates=rates))
    yield replace(calibration, parallel_rates=rates)
    save_calibration(calibration)


def _planned(tiny_gguf: Path) -> int:
    """What `vote_plan` gives from the saved calibration's figures (the most sequences that fit)."""
    from edge_sql.api import llama_settings, vote_plan
    from edge_sql.api.agent_settings import AgentSettings

    settings, how = llama_settings(tiny_gguf, AgentSettings(n_ctx=1024))
    assert how == "cached"
    return vote_plan(tiny_gguf, settings, how)[0]


def test_the_driver_resolves_auto_once_for_ask_and_each(tiny_gguf: Path, chinook_db: Path, voting) -> None:
    from edge_sql.api import Ask

    expected = _planned(tiny_gguf)
    assert expected == auto_vote(voting.parallel_rates, voting.chosen.parallel_limit) == 3
    with edge_sql.Agent(
        tiny_gguf, n_ctx=2048, pull_if_missing=False, prefix_cache=False, parallel=expected, budget=TINY
    ) as agent:
        assert agent.vote_k("auto") == (expected if expected >= 2 else None)
        assert agent.vote_k(2) == 2 and agent.vote_k(None) is None
        voted = agent.ask("How many albums?", chinook_db, vote="auto", seed=3)
        [(index, each)] = list(agent.each([Ask("How many albums?", chinook_db, seed=3, vote="auto")]))
    assert index == 0 and not isinstance(each, Exception)
    for result in (voted, each):
        if expected >= 2:
            vote = result.stats.vote
            assert vote is not None and vote.k == expected and vote.seeds is not None and vote.seeds[0] == 3
        else:
            assert result.stats.vote is None
    assert each.sql == voted.sql


def test_serve_takes_auto_from_a_request_and_opens_its_sequences(tiny_gguf: Path, voting) -> None:
    from edge_sql.agent.budget import Budget
    from edge_sql.api import plan_sessions
    from edge_sql.api.agent_settings import AgentSettings
    from edge_sql.commands.serve import ServeOptions
    from edge_sql.errors import BadRequest
    from edge_sql.serve.request import AskRequest

    request = AskRequest.from_json(b'{"question": "How many albums?", "database": "chinook", "vote": "auto"}')
    assert request.vote == "auto"
    assert AskRequest.from_arguments({"question": "q", "database": "d", "vote": 4}).vote == 4
    with pytest.raises(BadRequest, match="field 'vote' is neither a whole number nor 'auto'"):
        AskRequest.from_json(b'{"question": "q", "database": "d", "vote": "many"}')
    with pytest.raises(BadRequest, match="field 'vote' is out of range"):
        AskRequest.from_json(b'{"question": "q", "database": "d", "vote": 1}')
    options = ServeOptions(
        databases={},
        http=True,
        host="127.0.0.1",
        port=0,
        token=None,
        settings=AgentSettings(
            model=str(tiny_gguf), n_ctx=1024, budget=Budget(), max_waiting=1, vote="auto", pull_if_missing=False
        ),
        queue_timeout=1.0,
        max_body=1024,
        max_question=100,
        max_rows=10,
    )

    def sequences(o: ServeOptions) -> int:  # what `serve` opens: the Agent's plan of --parallel and --vote
        return plan_sessions(o.settings).sessions

    assert sequences(options) == max(_planned(tiny_gguf), 1)
    for vote, opened in ((2, 2), (None, 1)):
        assert sequences(replace(options, settings=options.settings.with_(vote=vote))) == opened


def test_serve_answers_an_auto_vote_at_the_planned_k(tiny_gguf: Path, chinook_db: Path, voting) -> None:
    """The service with `serve --vote auto`'s sequences: a request naming no vote gets the
    server's "auto", one naming "auto" the same K, one naming 2 a vote of 2."""
    from edge_sql.serve.request import AskRequest
    from edge_sql.serve.service import Limits, Service
    from edge_sql.tools import ReadOnlyDatabase

    expected = _planned(tiny_gguf)
    with edge_sql.Agent(
        tiny_gguf, n_ctx=2048, pull_if_missing=False, prefix_cache=False, parallel=max(expected, 2), budget=TINY
    ) as agent:
        service = Service(agent, {"chinook": chinook_db}, Limits(vote="auto"))
        try:
            with ReadOnlyDatabase(chinook_db) as db:
                ks = []
                for vote in (None, "auto", 2):
                    request = AskRequest(question="How many albums?", database="chinook", seed=1, vote=vote)
                    result = service._ask(request, db, lambda _e: None, lambda: False)
                    ks.append(result.stats.vote.k if result.stats.vote is not None else None)
        finally:
            service.close()
    planned = expected if expected >= 2 else None
    assert ks == [planned, planned, 2]


def test_bench_vote_auto_names_the_resolved_k(tiny_gguf: Path, tmp_path: Path, voting) -> None:
    from edge_sql.cli import main

    expected = _planned(tiny_gguf)
    out = tmp_path / "out"
    args = [
        "bench",
        "--base",
        str(tiny_gguf),
        "--variants",
        "BF16",
        "--limit",
        "1",
        "--modes",
        "withheld",
        "--threads",
        "1",
        "--ctx",
        "2048",
        "--out",
        str(out),
        "--seed",
        "2",
        "--vote",
        "auto",
        "--max-rounds",
        "1",
        "--think-tokens",
        "8",
        "--calls-per-turn",
        "1",
        "--episode-tokens",
        "2048",
        "--budget",
        "max_final_sql_tokens=24",
        "--budget",
        "max_final_think_tokens=8",
        "--budget",
        "max_sql_chars=48",
        "--budget",
        "max_name_chars=24",
    ]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "BF16: --vote auto: " in result.output or "BF16: no vote" in result.output, result.output
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    modes = sorted(r["mode"] for r in records if r["kind"] == "episode")
    settings = json.loads((out / "bench.json").read_text())["settings"]
    assert settings["vote_auto"] is True
    if expected >= 2:
        assert modes == ["withheld", f"withheld+vote{expected}"] and settings["vote"] == expected
        [voted] = [r for r in records if r.get("vote")]
        assert voted["vote"]["auto"] is True and voted["vote"]["k"] == expected
        assert voted["vote"]["seeds"] == list(range(2, 2 + expected))
    else:
        assert modes == ["withheld"] and settings["vote"] is None
