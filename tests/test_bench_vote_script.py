"""benchmarks/episodes/bench_vote.py runs its three kinds of vote through the Agent's own vote
(`api.vote.run_vote` over the Agent's driver) on the trained fixture: the shared opening
evaluates fewer prompt tokens than episodes that each evaluate the question, and the early stop
keeps the winner. (The script had called a private method that a refactor removed.)"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType

import pytest

from edge_sql import Agent


@pytest.fixture(scope="module")
def bench_vote() -> ModuleType:
    return importlib.import_module("benchmarks.episodes.bench_vote")


def test_votes_before_and_after_the_shared_opening_and_the_early_stop(
    bench_vote: ModuleType, tiny_trained_gguf: Path
) -> None:
    question = bench_vote.FIXTURE_QUESTIONS[1]
    with Agent(
        tiny_trained_gguf,
        n_ctx=2048,
        n_threads=1,
        budget=bench_vote.FIXTURE_BUDGET,
        parallel=3,
        pull_if_missing=False,
        tune=False,
        prefix_cache=False,
    ) as agent:
        rows = {mode: bench_vote.vote_row(agent, question, 3, 33, mode) for mode in ("before", "opening", "early")}
    for mode, row in rows.items():
        assert row["k"] == 3 and row["mode"] == mode
        assert 1 <= row["finished"] <= 3 and 0 <= row["voters"] <= 3
    assert rows["before"]["finished"] == rows["opening"]["finished"] == 3  # no early stop: all run to the end
    assert rows["opening"]["prompt_tokens"] < rows["before"]["prompt_tokens"]  # the question evaluated once
    assert rows["early"]["rows"] == rows["opening"]["rows"] == rows["before"]["rows"]  # same seeds, same winner
