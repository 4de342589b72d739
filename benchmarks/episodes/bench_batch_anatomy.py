"""Where a batched step's time goes (issue 54): the agent's steps beside plain decode of the same
sequences, and episodes one at a time against several at once.

Three parts, one process, one model:
  1. `--parallel P` agent episodes at once (`Agent(parallel=P, tune=False, n_threads=2)`, think
     64, 2 rounds, the eight Chinook questions cycled, seed 0), every `BatchedDecoder._step`
     logged: sequences, tokens, the thread count it ran at, the deepest position and the mean
     one, the wall time of the step and llama.cpp's own time for it (`llama_perf_context`).
     What is left of the wall is the host's: sampling and grammar, tool calls, waits. Each
     one-token step of two or more sequences is then decoded *again at once*: the step's cells
     removed and the same batch decoded on the same context from the same thread, timed apart
     (the logits are the same; the episodes do not see it, and its time is taken out of the
     wall). That pair is plain decode of exactly those sequences at exactly their depths,
     minutes of machine drift ruled out: on a shared cloud machine a plain step measured
     minutes later came out 37% slower on its own.
  2. Plain decode in a context laid out as the agent's (P sequences, a KV stream each, flash
     attention off, 2 threads fixed), every sequence at one depth: the depth the agent's
     widest one-token steps held on average (what each stream's own cells cost) and their
     deepest (what a step pays: llama.cpp attends as many cells in every stream of a step as
     its longest holds, rounded up to 256). One token for each of w sequences, median of
     seven. `--all-layouts` adds flash attention on and one unified KV cache.
  3. The same questions one at a time (`parallel=1`), then P at once again: the gain is one at a
     time against the mean of the two runs at once, so that drift shows and cancels.

    python -m benchmarks.episodes.bench_batch_anatomy MODEL.gguf [--parallel 8] [--questions 16]

It prints the tables and the goals: P at once at least 2.0x one at a time; agent steps of w
one-token sequences at least 0.9x plain decode of those sequences (the pair); and the ceiling
the arithmetic leaves: plain decode of P sequences against one at the episodes' depth.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import llama_cpp
import numpy as np

import edge_sql.runtime.batching.batched as batched
from benchmarks.common.chinook_questions import QUESTIONS
from edge_sql import Agent
from edge_sql.agent.budget import Budget
from edge_sql.runtime import SessionOptions
from edge_sql.runtime.llama.batch import TokenBatch
from edge_sql.runtime.llama.decode_thread import run_decode
from edge_sql.runtime.llama.loading import open_model
from edge_sql.runtime.llama.shared_models import release

REPO = Path(__file__).resolve().parents[2]
CHINOOK = REPO / "edge_sql" / "data" / "chinook" / "chinook.sqlite"


@dataclasses.dataclass
class Step:
    width: int
    tokens: int
    longest: int
    threads: int
    depth: int
    mean_depth: float
    wall_ms: float
    llama_ms: float
    again_ms: float | None = None  # the same batch decoded again at once (one-token steps)


def _llama_ms(ptr: llama_cpp.llama_context_p) -> float:
    perf = llama_cpp.llama_perf_context(ptr)
    return float(perf.t_p_eval_ms + perf.t_eval_ms)


def decode_again(decoder: batched.BatchedDecoder) -> float:
    """Decode the batch of the step just run again at once (its cells removed first: the same
    tokens at the same positions give the same cells); ms. Holds the decoder's llama lock, as a
    step does, so no member's memory operation runs meanwhile."""
    with decoder._llama:
        batch = decoder._batch
        n = int(batch.batch.n_tokens)
        memory = decoder.context.memory
        for i in range(n):
            llama_cpp.llama_memory_seq_rm(memory, int(batch.batch.seq_id[i][0]), int(batch.batch.pos[i]), -1)
        tick = time.perf_counter()
        status = run_decode(lambda: llama_cpp.llama_decode(decoder.context.ptr, batch.batch))
        llama_cpp.llama_synchronize(decoder.context.ptr)  # its compute counted here, not in the next step's
        again = 1000 * (time.perf_counter() - tick)
    if status != 0:
        raise RuntimeError(f"decoding a step again failed with status {status}")
    return again


def logged_steps(*, paired: bool = True) -> list[Step]:
    """Wrap the decoder's step; each one is appended to the returned list (with `paired`, each
    one-token step of two or more sequences decoded again at once: `decode_again`)."""
    log: list[Step] = []
    step = batched.BatchedDecoder._step

    def timed(self: batched.BatchedDecoder, *, forced: bool) -> None:
        parts = self._plan()
        threads, before = self.context.threads.count, _llama_ms(self.context.ptr)
        tick = time.perf_counter()
        step(self, forced=forced)
        wall = 1000 * (time.perf_counter() - tick)
        ends = [r.start + first + n for r, first, n in parts]
        longest = max(n for _, _, n in parts)
        log.append(
            Step(
                width=len(parts),
                tokens=sum(n for _, _, n in parts),
                longest=longest,
                threads=threads,
                depth=max(ends),
                mean_depth=sum(ends) / len(ends),
                wall_ms=wall,
                llama_ms=_llama_ms(self.context.ptr) - before,
                again_ms=decode_again(self) if paired and longest == 1 and len(parts) > 1 else None,
            )
        )

    batched.BatchedDecoder._step = timed  # type: ignore[method-assign]
    return log


def episodes(model: Path, parallel: int, questions: list[str], ctx: int, log: list[Step] | None = None) -> dict:
    """Run the questions `parallel` at a time; wall time (less the steps decoded again, from
    `log`) and generated tokens."""
    budget = Budget(max_think_tokens=64, max_rounds=2, max_tokens=ctx)
    seen = len(log) if log is not None else 0
    with Agent(model, parallel=parallel, n_ctx=ctx, tune=False, n_threads=2, budget=budget) as agent:
        tick = time.perf_counter()
        results = agent.ask_many(questions, CHINOOK, seed=0)
        wall = time.perf_counter() - tick
    again = sum(s.again_ms or 0.0 for s in (log or [])[seen:]) / 1000
    wall -= again
    generated = sum(r.stats.to_json().get("generated_tokens") or 0 for r in results)
    threads: collections.Counter[str] = collections.Counter()  # decoded tokens by thread count
    for r in results:
        threads.update((r.stats.to_json().get("threads") or {}).get("decode", {}))
    return {
        "parallel": parallel,
        "decode_threads": dict(sorted(threads.items())),
        "wall_s": round(wall, 1),
        "again_s": round(again, 1),
        "generated": generated,
        "tok_s": round(generated / wall, 1),
        "load": round(os.getloadavg()[0], 2),
    }


def anatomy(log: list[Step], wall_s: float) -> list[dict]:
    """Steps grouped by kind ('tokens': one token a sequence; 'mixed': some sequence several)
    and width: steps, deepest and mean depth, mean ms (wall, llama.cpp's), share of the wall;
    for one-token steps the median of (step ms / the same batch decoded again at once)."""
    groups: dict[tuple[str, int], list[Step]] = collections.defaultdict(list)
    for s in log:
        groups["mixed" if s.longest > 1 else "tokens", s.width].append(s)
    rows = []
    for (kind, width), steps in sorted(groups.items()):
        n = len(steps)
        pairs = [s.again_ms / s.wall_ms for s in steps if s.again_ms]
        rows.append(
            {
                "kind": kind,
                "width": width,
                "steps": n,
                "at_2_threads": sum(s.threads == 2 for s in steps),
                "tokens": round(sum(s.tokens for s in steps) / n, 1),
                "depth": round(sum(s.depth for s in steps) / n),
                "mean_depth": round(sum(s.mean_depth for s in steps) / n),
                "ms": round(sum(s.wall_ms for s in steps) / n, 1),
                "llama_ms": round(sum(s.llama_ms for s in steps) / n, 1),
                "share": round(sum(s.wall_ms for s in steps) / 1000 / wall_s, 3),
                "pair": round(float(np.median(pairs)), 3) if pairs else None,
            }
        )
    return rows


LAYOUTS = {  # (flash attention, one unified KV cache)
    "streams, flash off (agent's)": (False, False),
    "streams, flash on": (True, False),
    "unified, prefix shared": (False, True),
}


def plain_steps(
    model: Path, n_seq: int, ctx: int, depth: int, prefix: int, widths: list[int], layouts: list[str]
) -> dict[str, dict[int, float]]:
    """Median ms of a plain step of w one-token sequences, each holding `depth` tokens of which
    the first `prefix` are common (the agent's system prompt), in a context laid out as the
    agent's (`create_context`'s parameters: a KV stream per sequence, flash attention off, ubatch
    256, 2 threads) and in two other layouts: flash attention on; one unified cache where the
    common prefix is held once (its cells shared by every sequence: `llama_memory_seq_cp`)."""
    loaded, own, _info = open_model(model, SessionOptions(n_ctx=ctx, n_threads=2, flash_attn=False), n_seq=1)
    own.close()
    out: dict[str, dict[int, float]] = {}
    try:
        with TokenBatch(512) as batch:
            for name in layouts:
                flash, unified = LAYOUTS[name]
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


def fresh_episodes(args: argparse.Namespace, parallel: int) -> dict:
    """Part 3's runs, each in a new process (no step log, nothing decoded again), so that no run
    inherits what an earlier one left: one at a time in the process that had run the steps came
    out 1.6x slower than in a new one (31.5 against 50.2 tok/s) while decodes still ran on the
    threads that called them (each left an OpenMP team behind: runtime/llama/decode_thread.py)."""
    command = [sys.executable, "-m", __spec__.name, str(args.model), "--episodes-only", "--parallel", str(parallel)]
    command += ["--questions", str(args.questions), "--ctx", str(args.ctx)]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path)
    parser.add_argument("--parallel", type=int, default=8)
    parser.add_argument("--questions", type=int, default=16)
    parser.add_argument("--ctx", type=int, default=2048)
    parser.add_argument("--skip-one", action="store_true", help="no one-at-a-time run (part 3)")
    parser.add_argument(
        "--all-layouts", action="store_true", help="plain decode also with flash attention and a unified cache"
    )
    parser.add_argument("--episodes-only", action="store_true", help=argparse.SUPPRESS)  # part 3's child
    args = parser.parse_args()
    questions = [QUESTIONS[i % len(QUESTIONS)] for i in range(args.questions)]
    if args.episodes_only:
        print(json.dumps(episodes(args.model, args.parallel, questions, args.ctx)))
        return
    print(f"load before: {os.getloadavg()[0]:.2f}", flush=True)
    log = logged_steps()
    at_once = episodes(args.model, args.parallel, questions, args.ctx, log)
    rows = anatomy(log, at_once["wall_s"])
    in_steps = sum(s.wall_ms for s in log) / 1000
    in_llama = sum(s.llama_ms for s in log) / 1000
    at_once["in_steps_s"], at_once["in_llama_s"] = round(in_steps, 1), round(in_llama, 1)
    print(json.dumps(at_once), flush=True)
    print(
        "\n| kind | width | steps | at 2 threads | tokens | deepest | mean depth | ms a step | llama.cpp ms | "
        "share of wall | step vs the same batch again |"
    )
    print("|--|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
    for r in rows:
        pair = "" if r["pair"] is None else f"{r['pair']:.2f}x"
        print(
            f"| {r['kind']} | {r['width']} | {r['steps']} | {r['at_2_threads']} | {r['tokens']} | {r['depth']} | "
            f"{r['mean_depth']} | {r['ms']} | {r['llama_ms']} | {100 * r['share']:.1f}% | {pair} |"
        )
    host = at_once["wall_s"] - in_steps
    print(f"\nwall {at_once['wall_s']} s: in steps {in_steps:.1f} s (llama.cpp {in_llama:.1f} s), host {host:.1f} s")
    paired = [s for s in log if s.again_ms and s.threads == 2]
    pair_goal = float(np.median([(s.again_ms or 0.0) / s.wall_ms for s in paired])) if paired else 0.0
    # plain decode at one depth: the widest one-token steps' mean depth (each stream's own
    # cells) and their deepest (what llama.cpp attends in each stream of such a step)
    widest = [s for s in log if s.longest == 1 and s.width == args.parallel] or [s for s in log if s.longest == 1]
    own, deepest = int(np.median([s.mean_depth for s in widest])), int(np.median([s.depth for s in widest]))
    prefix = min(s.depth for s in log if s.longest == 1) - 32  # about the system prompt every episode restores
    layouts = list(LAYOUTS) if args.all_layouts else [next(iter(LAYOUTS))]
    plain = {}
    for depth in sorted({own, deepest}):
        print(f"\nplain steps at depth {depth}, the first {prefix} tokens common to every sequence", flush=True)
        plain[depth] = plain_steps(args.model, args.parallel, args.ctx, depth, prefix, [1, args.parallel], layouts)
    print(f"\nload: {os.getloadavg()[0]:.2f}")
    print(
        "\n| depth | layout | 1 sequence ms | "
        + f"{args.parallel} sequences ms | {args.parallel} vs 1, tokens per second |"
    )
    print("|--:|--|--:|--:|--:|")
    for depth, by_layout in plain.items():
        for name, ms in by_layout.items():
            gain = args.parallel * ms[1] / ms[args.parallel]
            print(f"| {depth} | {name} | {ms[1]} | {ms[args.parallel]} | {gain:.2f}x |")
    agent_layout = next(iter(LAYOUTS))
    ceiling = args.parallel * plain[own][agent_layout][1] / plain[deepest][agent_layout][args.parallel]
    ideal = args.parallel * plain[own][agent_layout][1] / plain[own][agent_layout][args.parallel]
    print(
        f"\nceiling: plain decode of {args.parallel} sequences (deepest {deepest}) against one (depth {own}): "
        f"{ceiling:.2f}x tokens per second ({ideal:.2f}x were every stream attended only its own cells); "
        "prefill pieces (tool results) gain nothing from width"
    )
    print(
        f"goal: agent one-token steps >= 0.9x the same batch decoded again at once: {pair_goal:.2f}x "
        f"({len(paired)} steps at 2 threads): {'met' if pair_goal >= 0.9 else 'NOT met'}"
    )
    if not args.skip_one:
        runs = [fresh_episodes(args, p) for p in (args.parallel, 1, args.parallel)]
        for run in runs:
            print(json.dumps(run), flush=True)
        first, one, last = runs
        gain = (first["tok_s"] + last["tok_s"]) / 2 / one["tok_s"]
        print(
            f"\ngoal: {args.parallel} at once {gain:.2f}x one at a time (>= 2.0x; each run a new process, at once "
            f"before and after: {first['tok_s']} and {last['tok_s']} tok/s, one at a time {one['tok_s']}): "
            f"{'met' if gain >= 2.0 else 'NOT met'}"
        )
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
