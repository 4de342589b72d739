"""`--vote auto`: the largest vote predicted within 2x one episode from the calibrated decode rates
(runtime/tuning/vote.py), in the API, `run` and `edge-sql tune`."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import edge_sql
from edge_sql.runtime.tuning import Settings, calibrate, save_calibration
from edge_sql.runtime.tuning.vote import VOTE_FACTOR, auto_vote, auto_vote_line, rate_at, vote_cost

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


def test_auto_comes_from_this_machines_calibration(tiny_gguf: Path, chinook_db: Path) -> None:
    """A calibration of the fixture with room for three sequences: the Agent's `auto_vote` is the
    K its measured rates give, every K up to it predicted within the factor, `run --vote auto`
    says so and votes with it; `tune`'s table has the line."""
    from edge_sql.cli import main
    from edge_sql.commands.tune import calibration_table

    settings = Settings(True, 32, 1)
    small = dict(n_ctx=1024, points=(64,), prefill_chunk=32, decode_tokens=4, process_bytes=0)
    bound = calibrate(tiny_gguf, settings=[settings], full=False, **small).chosen_measurement().memory_bytes
    from edge_sql.runtime.tuning.parallel import allocated_with

    per_sequence = allocated_with(tiny_gguf, settings, 1024, 2) - allocated_with(tiny_gguf, settings, 1024, 1)
    result = calibrate(tiny_gguf, settings=[settings], full=False, parallel_memory=bound + 5 * per_sequence // 2,
                       **small)
    save_calibration(result)
    rates, limit = result.parallel_rates, result.chosen.parallel_limit
    assert limit == 3 and [int(w) for w, _ in rates] == [1, 2, 3]
    expected = auto_vote(rates, limit)
    assert expected == max([k for k in (2, 3) if vote_cost(rates, k) <= VOTE_FACTOR], default=1)
    assert f"({auto_vote_line(rates, limit)})" in calibration_table(result)
    with edge_sql.Agent(tiny_gguf, n_ctx=1024, pull_if_missing=False, prefix_cache=False,
                        parallel=limit) as agent:
        assert agent.tuning == "cached"
        assert (agent.auto_vote, agent.auto_vote_line) == (expected, auto_vote_line(rates, limit))
    with edge_sql.Agent(tiny_gguf, n_ctx=1024, pull_if_missing=False, prefix_cache=False, tune=False) as untuned:
        assert untuned.auto_vote == 1 and "no decode rate" in untuned.auto_vote_line  # nothing measured
    out = CliRunner().invoke(main, ["run", "--db", str(chinook_db), "--model", str(tiny_gguf), "--ctx", "1024",
                                    "--question", "How many albums?", "--vote", "auto", "--seed", "1",
                                    "--max-rounds", "1", "--think-tokens", "8"])
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
