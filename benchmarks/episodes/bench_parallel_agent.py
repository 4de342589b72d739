"""Real agent episodes several at once: wall time of `Agent.ask_many` and what each batched step cost.

bench_parallel.py times raw steps and published replays; this one runs the agent itself
(grammar, sampling, tools against Chinook, prefix restore) with the bench's short budget, and
wraps `BatchedDecoder._step` to log every step: how many sequences, how many tokens, the
longest piece, the weight passes llama.cpp cut it into and the states moved to pack it. Steps
are grouped as 'tokens' (one token per sequence) and 'mixed' (some sequence decoded several:
forced grammar tokens, a tool result, the prompt), so a step that costs more than its width
explains shows.

    python -m benchmarks.episodes.bench_parallel_agent MODEL.gguf --parallel 16 --questions 16
    python -m benchmarks.episodes.bench_parallel_agent MODEL.gguf --parallel 1 --questions 16   # one at a time
"""

from __future__ import annotations

import argparse
import collections
import json
import time
from pathlib import Path

import edge_sql.runtime.batching.batched as batched
from benchmarks.common.chinook_questions import QUESTIONS
from edge_sql import Agent
from edge_sql.agent.budget import Budget

REPO = Path(__file__).resolve().parents[2]
CHINOOK = REPO / "edge_sql" / "data" / "chinook" / "chinook.sqlite"


def logged_steps() -> list[tuple[int, int, int, int, int, float]]:
    """Wrap the decoder's step: (sequences, tokens, longest piece, weight passes, states moved,
    seconds) of each, appended."""
    log: list[tuple[int, int, int, int, int, float]] = []
    step = batched.BatchedDecoder._step

    def timed(self: batched.BatchedDecoder, *, forced: bool) -> None:
        parts = self._plan()
        before = (self.counts.passes, self.counts.moves)
        tick = time.perf_counter()
        step(self, forced=forced)
        seconds = time.perf_counter() - tick
        log.append(
            (
                len(parts),
                sum(n for _, _, n in parts),
                max(n for _, _, n in parts),
                self.counts.passes - before[0],
                self.counts.moves - before[1],
                seconds,
            )
        )

    batched.BatchedDecoder._step = timed
    return log


def summary(log: list[tuple[int, int, int, int, int, float]]) -> list[dict]:
    """Steps grouped by kind and width: count, mean ms, mean tokens, mean passes, moves, total s."""
    groups: dict[tuple[str, int], list[tuple[float, int, int, int]]] = collections.defaultdict(list)
    for width, tokens, longest, passes, moves, seconds in log:
        groups["mixed" if longest > 1 and width > 1 else "tokens", width].append((seconds, tokens, passes, moves))
    return [
        {
            "kind": kind,
            "sequences": width,
            "steps": len(v),
            "mean_ms": round(1000 * sum(s for s, *_ in v) / len(v)),
            "mean_tokens": round(sum(t for _, t, _, _ in v) / len(v), 1),
            "mean_passes": round(sum(p for *_, p, _ in v) / len(v), 2),
            "moves": sum(m for *_, m in v),
            "total_s": round(sum(s for s, *_ in v), 1),
        }
        for (kind, width), v in sorted(groups.items())
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path)
    parser.add_argument("--parallel", type=int, default=16)
    parser.add_argument("--questions", type=int, default=16, help="the eight questions, cycled (seed 0 each)")
    parser.add_argument("--ctx", type=int, default=2048)
    args = parser.parse_args()
    log = logged_steps()
    questions = [QUESTIONS[i % len(QUESTIONS)] for i in range(args.questions)]
    budget = Budget(max_think_tokens=64, max_rounds=2, max_tokens=args.ctx)
    with Agent(args.model, parallel=args.parallel, n_ctx=args.ctx, budget=budget) as agent:
        tick = time.perf_counter()
        results = agent.ask_many(questions, CHINOOK, seed=0)
        wall = time.perf_counter() - tick
    generated = [r.stats.to_json().get("generated_tokens") for r in results]
    passes = sum(entry[3] for entry in log)
    print(
        json.dumps(
            {
                "parallel": args.parallel,
                "wall_s": round(wall, 1),
                "generated": generated,
                "total_generated": sum(g or 0 for g in generated),
                "batched_steps": len(log),
                "passes": passes,
                "moves": sum(entry[4] for entry in log),
                "stops": [r.stop for r in results],
                "steps": summary(log),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
