"""Several episodes at once (issue 25): aggregate throughput and peak memory for N sequences.

The three published SQaLe episodes are replayed as the speculation bench replays them
(speculative_published.replay_measured): prompt and tool-result pieces evaluated as prompt, each
model-written piece through `Session.generate` with a sampler that returns the published token,
so every decode step, prompt chunk and prefix restore is the real one, whatever the weights.
`--episodes` replays (the three, cycled) are spread over N sessions of one context
(`open_sessions`), each driven by a thread of its own taking the next episode as it finishes
one: episodes join and leave at any step. Each N runs in a process of its own (peak RSS);
the shared system prompt's state is saved once and restored into every sequence.

Also: the raw step, N sequences at a 1,024-token context decoding one token each (the issue's
table), and the time to an answer by `--vote 4` against one episode (four replays of one
episode at once against it alone).

    python -m benchmarks.runtime.bench_parallel MODEL.gguf --ns 1,2,4,8 --episodes 8 --out benchmarks/results/parallel.md
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from benchmarks.common.bench_machine import machine_line, write_results
from benchmarks.runtime.speculative_published import _model_segments, published_pieces
from edge_sql.runtime import PrefixCache, SamplingParams
from edge_sql.runtime.batching.sequences import open_sessions
from edge_sql.runtime.tuning.parallel import decode_together

GREEDY = SamplingParams(greedy=True)


def _forced_sampler():
    """`sample` replaced by the published token of the calling thread's own queue."""
    import edge_sql.runtime.generation as session_module

    local = threading.local()

    def published_token(_logits, _params, _rng) -> int:
        return local.queue.pop(0)

    session_module.sample = published_token
    return local


def replay(model: Path, n: int, episodes: int, threads: int, n_ctx: int, same: bool = False) -> dict:
    """`episodes` published replays over `n` sequences (the three cycled, or with `same` the
    first one every time: a vote's K episodes of one question); wall time, tokens, batch widths."""
    local = _forced_sampler()
    cache = PrefixCache()
    with open_sessions(model, n=n, n_ctx=n_ctx, n_threads=threads, prefix_cache=cache) as group:
        pieces = published_pieces()
        first = group.sessions[0]
        segments = [_model_segments(first, p) for _eid, p in pieces]
        shared = next(first.tokenize(t, special=s) for t, s, _k in pieces[0][1][:1])
        first.shared_prefix(shared)
        first.eval(shared)  # saved once: every episode restores it
        first.reset()
        work = [segments[0 if same else i % len(segments)] for i in range(episodes)]
        lock = threading.Lock()
        walls: list[float] = []
        tokens = {"prompt": 0, "generated": 0}

        def worker(session) -> None:
            local.queue = []
            while True:
                with lock:
                    if not work:
                        return
                    episode = work.pop(0)
                tick = time.perf_counter()
                session.reset()
                session.shared_prefix(shared)
                for kind, ids in episode:
                    if kind is None:
                        session.eval(ids)
                        continue
                    local.queue[:] = ids
                    completion = session.generate(max_tokens=len(ids), params=GREEDY)
                    assert completion.tokens == ids and not local.queue, "the replay must append the published tokens"
                with lock:
                    walls.append(time.perf_counter() - tick)
                    tokens["prompt"] += session.timings.prompt_tokens
                    tokens["generated"] += session.timings.generated_tokens

        started = time.perf_counter()
        pool = [threading.Thread(target=worker, args=(s,)) for s in group]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
        wall = time.perf_counter() - started
        counts = group.counts
        info = group.info
    return {
        "n": n,
        "episodes": episodes,
        "wall_s": wall,
        "episode_s": walls,
        "tokens": tokens,
        "steps": counts.steps,
        "mean_width": counts.mean_width,
        "forced_steps": counts.forced,
        "buffer_mib": info.buffer_bytes / 2**20,
        "peak_rss_mib": _peak_rss_mib(),
        "settings": info.settings,
    }


def raw_step(model: Path, n: int, threads: int, context: int = 1024, steps: int = 16, speculate: str = "off") -> dict:
    """ms per step and aggregate tok/s: n sequences at `context` tokens, one token each per step.
    `speculate="lookup"`: the context keeps recurrent snapshots (n_rs_seq) for verify batches;
    random prompt tokens give lookup nothing to draft, so every step is still one token each."""
    with open_sessions(model, n=n, n_ctx=context + steps + 8, n_threads=threads, speculate=speculate) as group:
        rng = np.random.default_rng(0)
        for session in group:
            session.eval(rng.integers(1000, 100000, size=context).tolist())
        wall = decode_together(group.sessions, steps)
        return {
            "n": n,
            "ms_per_step": 1000 * wall / steps,
            "tok_s": n * steps / wall,
            "mean_width": group.counts.mean_width,
            "speculate": speculate,
            "n_rs_seq": group.sessions[0].context.n_rs_seq,
            "drafted": sum(s.timings.draft_tokens for s in group),
        }


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _child(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, "-m", __spec__.name, *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def report(
    model: Path,
    ns: list[int],
    steps: list[dict],
    runs: list[dict],
    vote: dict,
    command: str,
    rs_steps: list[dict] | None = None,
) -> str:
    base = runs[0]
    lines = [
        f"# Several episodes at once: {model.name}",
        "",
        f"Machine: {machine_line()}. Command: `{command}`. Settings: {base['settings']}.",
        "",
        "## Raw step: N sequences at a 1,024-token context, one token each per step",
        "",
        "| N | ms per step | aggregate tok/s | vs N = 1 |",
        "|--:|--:|--:|--:|",
    ]
    for s in steps:
        lines.append(
            f"| {s['n']} | {s['ms_per_step']:.1f} | {s['tok_s']:.1f} | {s['tok_s'] / steps[0]['tok_s']:.2f}x |"
        )
    if rs_steps:
        lines += [
            "",
            "With recurrent snapshots for speculation (`speculate=lookup`, n_rs_seq "
            f"{rs_steps[0]['n_rs_seq']}; nothing drafted: each step is still one token per sequence):",
            "",
            "| N | ms per step | aggregate tok/s | vs N = 1 | vs the same N without snapshots |",
            "|--:|--:|--:|--:|--:|",
        ]
        for s, plain in zip(rs_steps, steps):
            lines.append(
                f"| {s['n']} | {s['ms_per_step']:.1f} | {s['tok_s']:.1f} | {s['tok_s'] / rs_steps[0]['tok_s']:.2f}x | "
                f"{s['tok_s'] / plain['tok_s']:.2f}x |"
            )
    lines += [
        "",
        f"## Published episodes replayed: {base['episodes']} replays over N sequences",
        "",
        "| N | wall s | vs N = 1 | mean episode s | steps | mean sequences per step | forced steps "
        "| llama.cpp buffers MiB | peak RSS MiB |",
        "|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in runs:
        lines.append(
            f"| {r['n']} | {r['wall_s']:.1f} | {base['wall_s'] / r['wall_s']:.2f}x | "
            f"{np.mean(r['episode_s']):.1f} | {r['steps']} | {r['mean_width']:.2f} | {r['forced_steps']} | "
            f"{r['buffer_mib']:.0f} | {r['peak_rss_mib']:.0f} |"
        )
    lines += [
        "",
        "## Time to an answer: `--vote 4` (four episodes of one question at once) against one episode",
        "",
        f"one episode alone: {vote['one']['wall_s']:.1f} s; four at once: {vote['four']['wall_s']:.1f} s "
        f"({vote['four']['wall_s'] / vote['one']['wall_s']:.2f}x the time for 4x the episodes)",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path)
    parser.add_argument("--ns", default="1,2,4,8", help="sequences for the replay")
    parser.add_argument("--step-ns", default="1,2,4,8", help="sequences for the raw step")
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--n-ctx", type=int, default=8192)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", choices=["replay", "step"])
    parser.add_argument("--n", type=int, default=1)
    parser.add_argument("--same", action="store_true", help="for --child replay: the first episode every time")
    parser.add_argument("--speculate", default="off", help="for --child step: off or lookup")
    args = parser.parse_args()
    if args.child == "replay":
        print(json.dumps(replay(args.model, args.n, args.episodes, args.threads, args.n_ctx, args.same)))
        return
    if args.child == "step":
        print(json.dumps(raw_step(args.model, args.n, args.threads, speculate=args.speculate)))
        return
    ns = [int(n) for n in args.ns.split(",")]
    common = [str(args.model), "--threads", str(args.threads), "--n-ctx", str(args.n_ctx)]
    step_ns = [int(n) for n in args.step_ns.split(",")]
    steps = [_child([*common, "--child", "step", "--n", str(n)]) for n in step_ns]
    rs_steps = [_child([*common, "--child", "step", "--n", str(n), "--speculate", "lookup"]) for n in step_ns]
    for s in steps:
        print(f"step N={s['n']}: {s['ms_per_step']:.1f} ms, {s['tok_s']:.1f} tok/s", file=sys.stderr)
    runs = []
    for n in ns:
        runs.append(_child([*common, "--child", "replay", "--n", str(n), "--episodes", str(args.episodes)]))
        print(f"replay N={n}: {runs[-1]['wall_s']:.1f} s", file=sys.stderr)
    vote = {
        "one": _child([*common, "--child", "replay", "--n", "1", "--episodes", "1"]),
        "four": _child([*common, "--child", "replay", "--n", "4", "--episodes", "4", "--same"]),
    }
    command = "python -m benchmarks.runtime.bench_parallel " + " ".join(sys.argv[1:])
    text = report(args.model, ns, steps, runs, vote, command, rs_steps)
    print(text)
    if args.out:
        write_results(args.out, text)
        (args.out.with_suffix(".json")).write_text(
            json.dumps({"steps": steps, "rs_steps": rs_steps, "runs": runs, "vote": vote}, indent=1)
        )


if __name__ == "__main__":
    main()
