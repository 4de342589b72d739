"""Where a batched step's time goes (issue 54): the agent's steps beside plain decode of the same
widths at the same depth, and episodes one at a time against several at once.

Three parts, one process, one model:
  1. `--parallel P` agent episodes at once (`Agent(parallel=P, tune=False, n_threads=2)`, think
     64, 2 rounds, the eight Chinook questions cycled, seed 0), every `BatchedDecoder._step`
     logged: sequences, tokens, the thread count it ran at, the deepest position, the wall time
     of the step and llama.cpp's own time for it (`llama_perf_context`). What is left of the
     wall is the host's: sampling and grammar of each sequence, tool calls, waits.
  2. Plain decode in a context laid out as the agent's (P sequences, a KV stream each, flash
     attention off, 2 threads fixed), every sequence holding the depth the agent's one-token
     steps of that width ran at: one token for each of w sequences, best of five. Beside it
     the same steps with flash attention on and with one unified KV cache.
  3. The same questions one at a time (`parallel=1`).

    python benchmarks/episodes/bench_batch_anatomy.py MODEL.gguf [--parallel 8] [--questions 16]

It prints the tables and the goals: P at once at least 2.0x one at a time; agent steps of w
one-token sequences at least 0.9x plain decode of w sequences at that depth.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import llama_cpp
import numpy as np

import edge_sql.runtime.batching.batched as batched
from edge_sql import Agent
from edge_sql.agent.budget import Budget
from edge_sql.runtime import SessionOptions
from edge_sql.runtime.llama.batch import TokenBatch
from edge_sql.runtime.llama.loading import open_model
from edge_sql.runtime.llama.shared_models import release

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the shared helpers
from chinook_questions import QUESTIONS

REPO = Path(__file__).resolve().parents[2]
CHINOOK = REPO / "edge_sql" / "data" / "chinook" / "chinook.sqlite"


@dataclasses.dataclass
class Step:
    width: int
    tokens: int
    longest: int
    threads: int
    depth: int
    wall_ms: float
    llama_ms: float


def _llama_ms(ptr: llama_cpp.llama_context_p) -> float:
    perf = llama_cpp.llama_perf_context(ptr)
    return float(perf.t_p_eval_ms + perf.t_eval_ms)


def logged_steps() -> list[Step]:
    """Wrap the decoder's step; each one is appended to the returned list."""
    log: list[Step] = []
    step = batched.BatchedDecoder._step

    def timed(self: batched.BatchedDecoder, *, forced: bool) -> None:
        parts = self._plan()
        threads, before = self.context.threads.count, _llama_ms(self.context.ptr)
        tick = time.perf_counter()
        step(self, forced=forced)
        wall = 1000 * (time.perf_counter() - tick)
        log.append(
            Step(
                width=len(parts),
                tokens=sum(n for _, _, n in parts),
                longest=max(n for _, _, n in parts),
                threads=threads,
                depth=max(r.start + first + n for r, first, n in parts),
                wall_ms=wall,
                llama_ms=_llama_ms(self.context.ptr) - before,
            )
        )

    batched.BatchedDecoder._step = timed  # type: ignore[method-assign]
    return log


def episodes(model: Path, parallel: int, questions: list[str], ctx: int) -> dict:
    """Run the questions `parallel` at a time; wall time and generated tokens."""
    budget = Budget(max_think_tokens=64, max_rounds=2, max_tokens=ctx)
    with Agent(model, parallel=parallel, n_ctx=ctx, tune=False, n_threads=2, budget=budget) as agent:
        tick = time.perf_counter()
        results = agent.ask_many(questions, CHINOOK, seed=0)
        wall = time.perf_counter() - tick
    generated = sum(r.stats.to_json().get("generated_tokens") or 0 for r in results)
    return {"parallel": parallel, "wall_s": round(wall, 1), "generated": generated, "tok_s": round(generated / wall, 1)}


def anatomy(log: list[Step], wall_s: float) -> list[dict]:
    """Steps grouped by kind ('tokens': one token a sequence; 'mixed': some sequence several)
    and width: steps, mean depth, mean ms (wall, llama.cpp's, the rest of the step), share of the wall."""
    groups: dict[tuple[str, int], list[Step]] = collections.defaultdict(list)
    for s in log:
        groups["mixed" if s.longest > 1 else "tokens", s.width].append(s)
    rows = []
    for (kind, width), steps in sorted(groups.items()):
        n = len(steps)
        rows.append(
            {
                "kind": kind,
                "width": width,
                "steps": n,
                "at_2_threads": sum(s.threads == 2 for s in steps),
                "tokens": round(sum(s.tokens for s in steps) / n, 1),
                "depth": round(sum(s.depth for s in steps) / n),
                "ms": round(sum(s.wall_ms for s in steps) / n, 1),
                "llama_ms": round(sum(s.llama_ms for s in steps) / n, 1),
                "share": round(sum(s.wall_ms for s in steps) / 1000 / wall_s, 3),
            }
        )
    return rows


def plain_steps(
    model: Path, n_seq: int, ctx: int, depth: int, prefix: int, widths: list[int]
) -> dict[str, dict[int, float]]:
    """Median ms of a plain step of w one-token sequences, each holding `depth` tokens of which
    the first `prefix` are common (the agent's system prompt), in a context laid out as the
    agent's (`create_context`'s parameters: a KV stream per sequence, flash attention off, ubatch
    256, 2 threads) and in two other layouts: flash attention on; one unified cache where the
    common prefix is held once (its cells shared by every sequence: `llama_memory_seq_cp`)."""
    layouts = {
        "streams, flash off (agent's)": (False, False),
        "streams, flash on": (True, False),
        "unified, prefix shared": (False, True),
    }
    loaded, own, _info = open_model(model, SessionOptions(n_ctx=ctx, n_threads=2, flash_attn=False), n_seq=1)
    own.close()
    out: dict[str, dict[int, float]] = {}
    try:
        with TokenBatch(512) as batch:
            for name, (flash, unified) in layouts.items():
                params = llama_cpp.llama_context_default_params()
                params.n_ctx, params.n_batch, params.n_ubatch = ctx * n_seq, 512, 256
                params.n_seq_max, params.kv_unified, params.n_outputs_max = n_seq, unified, n_seq
                params.n_threads = params.n_threads_batch = 2
                params.op_offload = False
                params.flash_attn_type = (
                    llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
                )
                ptr = llama_cpp.llama_init_from_model(loaded.model, params)
                try:
                    out[name] = _time_widths(ptr, batch, n_seq, depth, prefix, widths)
                finally:
                    llama_cpp.llama_free(ptr)
    finally:
        release(loaded)
    return out


def _time_widths(
    ptr: llama_cpp.llama_context_p, batch: TokenBatch, n_seq: int, depth: int, prefix: int, widths: list[int]
) -> dict[int, float]:
    """Fill sequence 0 with `prefix` tokens, copy it to every sequence (a unified cache shares
    the cells, streams copy them), give each its own tokens up to `depth`; then the median ms
    of seven steps of one token for each of w sequences, the widths interleaved."""
    memory, rng = llama_cpp.llama_get_memory(ptr), np.random.default_rng(0)

    def decode(seq: int, start: int, end: int) -> None:
        for at in range(start, end, 256):
            n = min(256, end - at)
            batch.fill_parts([(seq, rng.integers(100, 40_000, n).astype(np.int32), at, np.zeros(n, bool))])
            batch.decode(ptr)

    decode(0, 0, prefix)
    for seq in range(1, n_seq):
        llama_cpp.llama_memory_seq_cp(memory, 0, seq, -1, -1)
    for seq in range(n_seq):
        decode(seq, prefix, depth)
    times: dict[int, list[float]] = {w: [] for w in widths}
    for rep in range(7):
        for width in widths:
            batch.fill_parts([(s, np.array([500 + rep], np.int32), depth, np.ones(1, bool)) for s in range(width)])
            tick = time.perf_counter()
            batch.decode(ptr)
            times[width].append(1000 * (time.perf_counter() - tick))
            llama_cpp.llama_memory_seq_rm(memory, -1, depth, -1)
    return {w: round(float(np.median(t)), 1) for w, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path)
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--questions", type=int, default=16)
    parser.add_argument("--ctx", type=int, default=2048)
    parser.add_argument("--skip-one", action="store_true", help="no one-at-a-time run (part 3)")
    args = parser.parse_args()
    questions = [QUESTIONS[i % len(QUESTIONS)] for i in range(args.questions)]
    print(f"load before: {os.getloadavg()[0]:.2f}", flush=True)
    log = logged_steps()
    at_once = episodes(args.model, args.parallel, questions, args.ctx)
    rows = anatomy(log, at_once["wall_s"])
    in_steps = sum(s.wall_ms for s in log) / 1000
    in_llama = sum(s.llama_ms for s in log) / 1000
    at_once["in_steps_s"], at_once["in_llama_s"] = round(in_steps, 1), round(in_llama, 1)
    print(json.dumps(at_once), flush=True)
    print("\n| kind | width | steps | at 2 threads | tokens | depth | ms a step | llama.cpp ms | share of wall |")
    print("|--|--:|--:|--:|--:|--:|--:|--:|--:|")
    for r in rows:
        print(
            f"| {r['kind']} | {r['width']} | {r['steps']} | {r['at_2_threads']} | {r['tokens']} | {r['depth']} | "
            f"{r['ms']} | {r['llama_ms']} | {100 * r['share']:.1f}% |"
        )
    host = at_once["wall_s"] - in_steps
    print(f"\nwall {at_once['wall_s']} s: in steps {in_steps:.1f} s (llama.cpp {in_llama:.1f} s), host {host:.1f} s")
    # agent one-token steps at 2 threads, by width: mean depth and best-quartile ms
    tokens = collections.defaultdict(list)
    for s in log:
        if s.longest == 1 and s.threads == 2:
            tokens[s.width].append(s)
    widths = {w: v for w, v in tokens.items() if len(v) >= 5 and w in (1, 2, 4, args.parallel)}
    depth = int(np.median([s.depth for v in widths.values() for s in v]))
    prefix = min(s.depth for s in log if s.longest == 1) - 32  # about the system prompt every episode restores
    print(f"\nplain steps at depth {depth}, the first {prefix} tokens common to every sequence", flush=True)
    plain = plain_steps(args.model, args.parallel, args.ctx, depth, prefix, sorted(widths))
    print(f"\nload: {os.getloadavg()[0]:.2f}")
    names = list(plain)
    print(
        "\n| width | depth | agent ms (median, 2 threads) | "
        + " | ".join(f"plain ms: {n}" for n in names)
        + " | agent vs plain |"
    )
    print("|--:|--:|--:|" + "--:|" * len(names) + "--:|")
    goal_steps = True
    for w in sorted(widths):
        agent_ms = float(np.median([s.wall_ms for s in widths[w]]))
        ratio = plain[names[0]][w] / agent_ms
        goal_steps = goal_steps and ratio >= 0.9
        cells = " | ".join(f"{plain[n][w]}" for n in names)
        mean_depth = round(sum(s.depth for s in widths[w]) / len(widths[w]))
        print(f"| {w} | {mean_depth} | {agent_ms:.1f} | {cells} | {ratio:.2f}x |")
    if not args.skip_one:
        one = episodes(args.model, 1, questions, args.ctx)
        print(json.dumps(one), flush=True)
        gain = at_once["tok_s"] / one["tok_s"]
        print(
            f"\ngoal: {args.parallel} at once {gain:.2f}x one at a time (>= 2.0x): {'met' if gain >= 2.0 else 'NOT met'}"
        )
    print(f"goal: agent one-token steps >= 0.9x plain at that depth: {'met' if goal_steps else 'NOT met'}")
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
