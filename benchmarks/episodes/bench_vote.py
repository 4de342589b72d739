"""Answering by vote against the machine's limit: one episode, votes of K before and after the
shared opening (issue 42, point 1) and the early stop (point 2), in one run of one process.

For each K, with the same question and seeds, `api.vote.run_vote` runs K sampled episodes at once in
the batched engine:

  - 'before':     every episode restores the prompt's state and evaluates the question itself,
                  and all K run to their end (a vote before issue 42);
  - 'opening':    the opening evaluated once and copied (state restored) into the others;
  - 'early':      that, and the episodes still running stopped once the vote is decided.

The limit a machine sets: K episodes of one episode's length decoding together at the width-K
aggregate rate, i.e. one episode's time * K * rate(1) / rate(K), the rates timed here as
calibration times them (`tuning.parallel.decode_rate`, the same settings). One episode's time
is the mean of the vote's own seeds run one at a time: sampled episodes of one question can
differ severalfold in length. Episodes are bounded
(--think-tokens, --max-rounds, --calls-per-turn) so that all do comparable work.

    python -m benchmarks.episodes.bench_vote MODEL.gguf [--k 2 4 8] [--think-tokens 64] [--max-rounds 2]
        [--calls-per-turn 2] [--sql-tokens 64] [--questions N] [--modes before opening early] [--out FILE.json]

With --fixture (the trained fixture model, whose episodes agree and disagree for real): only
votes with and without the early stop over --questions questions, how often it fired, the
episodes it stopped and the time it saved, and whether the winner stayed the same.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from benchmarks.common.bench_machine import write_results
from benchmarks.common.chinook_questions import QUESTIONS
from edge_sql import Agent
from edge_sql.agent import Budget
from edge_sql.api.asks import Ask
from edge_sql.api.vote import run_vote
from edge_sql.bench.machine import cpu_model
from edge_sql.runtime.tuning.parallel import decode_rate
from tests.fixture_budget import TRAINED_LIMITS

REPO = Path(__file__).resolve().parents[2]
CHINOOK = REPO / "edge_sql" / "data" / "chinook" / "chinook.sqlite"
FIXTURE_BUDGET = Budget(**TRAINED_LIMITS)  # where the trained fixture's episodes write SQL that runs
FIXTURE_QUESTIONS = ["Which customer spent the most money?", *QUESTIONS]
MODES = {
    "before": dict(share_opening=False, early_stop=False),
    "opening": dict(share_opening=True, early_stop=False),
    "early": dict(share_opening=True, early_stop=True),
}


def vote_row(agent: Agent, question: str, k: int, seed: int, mode: str) -> dict:
    """One vote of `k` through `run_vote` over the Agent's driver, as `Agent.ask(vote=k)` runs it;
    'before' has the driver start each episode from the prompt's state (no shared opening)."""
    share, early = MODES[mode]["share_opening"], MODES[mode]["early_stop"]

    def driver(items: list[Ask], **kwargs: Any) -> Any:
        return agent._each(items, **{**kwargs, "share_opening": share})

    tick = time.perf_counter()
    result = run_vote(
        driver,
        question,
        CHINOOK,
        k,
        evidence=None,
        seed=seed,
        greedy=False,
        should_stop=None,
        max_rows=agent.budget.max_result_rows,
        early_stop=early,
    )
    vote = result.stats.to_json()["vote"]
    return {
        "k": k,
        "mode": mode,
        "wall_s": round(time.perf_counter() - tick, 2),
        "prompt_tokens": vote.get("prompt_tokens_evaluated"),
        "finished": vote["finished"],
        "agreed": vote["agreed"],
        "voters": vote["voters"],
        "rows": sorted(map(repr, map(tuple, result.rows)))[:20],
    }


def shape_bench(args: argparse.Namespace, agent: Agent) -> dict:
    """One episode for each seed a vote uses, then each K in each mode, on one question; the
    rates; the limits. A vote of K runs seeds seed..seed+K-1, whose sampled episodes differ in
    length; its limit takes one episode as the mean of those K seeds' episodes run alone."""
    question = QUESTIONS[1]
    agent.ask(question, CHINOOK, seed=args.seed)  # warm: the prompt's state in memory, grammar built
    singles = []
    for seed in range(args.seed, args.seed + max(args.k)):
        tick = time.perf_counter()
        one = agent.ask(question, CHINOOK, seed=seed)
        stats = one.stats.to_json()
        single = {"seed": seed, "wall_s": round(time.perf_counter() - tick, 2)}
        single |= {"generated": stats["generated_tokens"], "prompt_tokens": stats["prompt_tokens_evaluated"]}
        singles.append(single)
        print(json.dumps(single), flush=True)
    options = agent.sessions[0].options
    rates = {w: round(decode_rate(agent.model_path, options, w), 2) for w in sorted({1, *args.k})}
    print(json.dumps({"rates": rates}), flush=True)
    rows = []
    for k in args.k:
        one_s = sum(single["wall_s"] for single in singles[:k]) / k
        limit = one_s * k * rates[1] / rates[k]
        for mode in args.modes:
            row = vote_row(agent, question, k, args.seed, mode)
            row.update(
                one_s=round(one_s, 2),
                x_one=round(row["wall_s"] / one_s, 2),
                limit_s=round(limit, 2),
                x_limit=round(row["wall_s"] / limit, 2),
            )
            rows.append(row)
            print(json.dumps(row), flush=True)
    return {
        "one_episode_s": singles[0]["wall_s"],
        "one_generated_tokens": singles[0]["generated"],
        "one_prompt_tokens": singles[0]["prompt_tokens"],
        "singles": singles,
        "rates": rates,
        "votes": rows,
    }


def fixture_bench(args: argparse.Namespace, agent: Agent) -> dict:
    """Votes of each K with and without the early stop over several questions."""
    agent.ask(FIXTURE_QUESTIONS[0], CHINOOK, seed=args.seed)  # warm
    rows = []
    for k in args.k:
        for i, question in enumerate((FIXTURE_QUESTIONS * 4)[: args.questions]):
            seed = args.seed + 10 * i
            full, early = vote_row(agent, question, k, seed, "opening"), vote_row(agent, question, k, seed, "early")
            row = {
                "k": k,
                "question": question,
                "seed": seed,
                "full_s": full["wall_s"],
                "early_s": early["wall_s"],
                "stopped": k - early["finished"],
                "agreed": full["agreed"],
                "voters": full["voters"],
                "same_winner": full["rows"] == early["rows"] or full["voters"] == 0,
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    fired = [r for r in rows if r["stopped"]]
    summary = {
        "votes": len(rows),
        "fired": len(fired),
        "episodes_stopped": sum(r["stopped"] for r in rows),
        "full_s": round(sum(r["full_s"] for r in rows), 2),
        "early_s": round(sum(r["early_s"] for r in rows), 2),
        "same_winner": all(r["same_winner"] for r in rows),
    }
    print(json.dumps(summary), flush=True)
    return {"rows": rows, "summary": summary}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--k", type=int, nargs="+", default=[2, 4, 8])
    parser.add_argument("--modes", nargs="+", choices=list(MODES), default=list(MODES))
    parser.add_argument("--think-tokens", type=int, default=64)
    parser.add_argument("--max-rounds", type=int, default=2)
    parser.add_argument("--calls-per-turn", type=int, default=2)
    parser.add_argument(
        "--sql-tokens",
        type=int,
        default=64,
        help="most tokens of the final SQL (and 4x as "
        "many characters of a call's): random weights write until the bound",
    )
    parser.add_argument("--n-ctx", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=33)
    parser.add_argument("--questions", type=int, default=8)
    parser.add_argument("--fixture", action="store_true", help="the trained fixture: how often the early stop fires")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    budget = (
        FIXTURE_BUDGET
        if args.fixture
        else Budget(
            max_tokens=args.n_ctx,
            max_rounds=args.max_rounds,
            max_think_tokens=args.think_tokens,
            max_final_think_tokens=args.think_tokens,
            max_calls_per_turn=args.calls_per_turn,
            max_final_sql_tokens=args.sql_tokens,
            max_sql_chars=4 * args.sql_tokens,
        )
    )
    head = {"cpu": cpu_model(), "model": args.model.name, "args": {k: str(v) for k, v in vars(args).items()}}
    print(json.dumps(head), flush=True)
    with Agent(
        args.model,
        n_ctx=args.n_ctx,
        n_threads=args.threads,
        budget=budget,
        parallel=max(args.k),
        pull_if_missing=False,
        tune=False,
        prefix_cache=False,
    ) as agent:
        head["settings"] = agent.info.settings
        result = fixture_bench(args, agent) if args.fixture else shape_bench(args, agent)
    if args.out:
        write_results(args.out, json.dumps({**head, **result}, indent=1))


if __name__ == "__main__":
    main()
