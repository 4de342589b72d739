"""Several episodes at once on a GPU, where each step's wall goes, and one episode against plain
decode: the parallel step of benchmarks/gpu/check.py (issue 54's GPU goals).

Two children (each its own process, run by check.py's `Run.child`), on the Q4_K_M variant
of the measured shape with every layer offloaded when there is a GPU:

1. `--parallel P` episodes at once (`Agent(parallel=P).ask_many`, think 64, 2 rounds, seed 0)
   over `--questions` Chinook questions (chinook_questions.py's eight, cycled);
2. the same questions one at a time (`parallel=1`), then, in that Agent's own session (same
   model, placement and context), plain greedy decode at the episodes' median depth.

A `Probe` times, in the child only, what the wall is made of by wrapping (never editing) the
runtime: `TokenBatch.decode` (llama_decode, then `llama_synchronize`, so that a GPU's
asynchronous compute is counted here and not in the logits read after it), the batched
decoder's `_step` and `_pack` (a step's wall beyond its decode: the batch filled, the logits
rows read, states moved), the grammar (`GrammarConstraint`: masks, forced tokens, consuming)
and sampling (`sample`, `sample_allowed`), and each `_sample_step` of `generate` (one sampled
token: its decode, mask and draw). Shares of the wall are measured as time covered: grammar
and sampling count only where no step runs, so the shares add up to at most 1, the rest being
the host's other work (tools, prompts, Python, waits).

The goals, printed and recorded: P at once at least 6x one at a time (generated tokens per
second of wall); one episode's one-token steps (sampled tokens over the wall of their
`_sample_step`s, host work included) at least 0.9x plain decode's, measured the same way at
the episodes' median depth.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

from benchmarks.common.chinook_questions import QUESTIONS
from benchmarks.gpu.machine import gpu_memory_mib

HERE = Path(__file__).resolve().parent
CHINOOK = HERE.parents[1] / "edge_sql" / "data" / "chinook" / "chinook.sqlite"
N_CTX = 2048  # tokens per episode: the short budget below never needs more
THINK_TOKENS, ROUNDS = 64, 2
SPEEDUP_GOAL, PLAIN_GOAL = 6.0, 0.9

Interval = tuple[float, float]


def chinook_questions(n: int) -> list[str]:
    """`n` questions: chinook_questions.py's eight, cycled (the figures compare across scripts)."""
    return [QUESTIONS[i % len(QUESTIONS)] for i in range(n)]


def filler_tokens(session: Any, n: int) -> list[int]:
    """`n` tokens of the agent's system prompt (repeated): a context filled with real text."""
    from edge_sql.agent import load_prompt

    tokens = session.tokenize(load_prompt(None).system_text(max_rounds=6))
    while len(tokens) < n:
        tokens = tokens + tokens
    return list(tokens[:n])


# ---- time covered by intervals ----------------------------------------------------------------


def merged(intervals: Iterable[Interval]) -> list[Interval]:
    """The union of `intervals` as sorted disjoint intervals (empty ones dropped)."""
    out: list[list[float]] = []
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(s, e) for s, e in out]


def covered(intervals: Iterable[Interval], without: Iterable[Interval] = ()) -> float:
    """Seconds inside the union of `intervals` and outside every interval of `without`: what
    several threads' overlapping calls cost the wall, not the sum of their durations."""
    holes, i, total = merged(without), 0, 0.0
    for start, end in merged(intervals):
        total += end - start
        while i < len(holes) and holes[i][1] <= start:
            i += 1
        j = i
        while j < len(holes) and holes[j][0] < end:
            total -= min(end, holes[j][1]) - max(start, holes[j][0])
            j += 1
    return total


# ---- the probe ----------------------------------------------------------------------------------


class Probe:
    """Timings of decodes, batched steps, grammar and sampling, recorded by wrappers that
    `install` puts on the runtime's classes (this process only) and `close` takes off."""

    def __init__(self) -> None:
        self.decodes: list[tuple[float, float, int, int]] = []  # start, end, tokens, first position
        self.steps: list[tuple[float, float, int]] = []  # a batched step: start, end, sequences
        self.moves: list[Interval] = []  # the decoder giving a step's sequences consecutive ids
        self.grammar: list[Interval] = []
        self.sampling: list[Interval] = []
        # one sampled token of `generate`: start, end, and the decodes it ran (indices into `decodes`)
        self.sample_steps: list[tuple[float, float, int, int]] = []
        self._undo: list[tuple[Any, str, Any]] = []

    def clear(self) -> None:
        for records in (self.decodes, self.steps, self.moves, self.grammar, self.sampling, self.sample_steps):
            records.clear()

    def _patch(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        original = getattr(owner, name, None)
        if original is None:  # the runtime changed shape: that part goes unmeasured, nothing breaks
            return
        self._undo.append((owner, name, original))
        setattr(owner, name, make(original))

    def _timed(self, sink: list[Interval]) -> Callable[[Any], Any]:
        def make(original: Any) -> Any:
            def timed(*args: Any, **kwargs: Any) -> Any:
                tick = time.perf_counter()
                try:
                    return original(*args, **kwargs)
                finally:
                    sink.append((tick, time.perf_counter()))

            return timed

        return make

    def install(self) -> Probe:
        import llama_cpp

        from edge_sql.runtime import generation
        from edge_sql.runtime.batching.batched import BatchedDecoder
        from edge_sql.runtime.llama.batch import TokenBatch
        from edge_sql.runtime.text.constrained import GrammarConstraint

        def decode(original: Any) -> Any:
            def timed(batch: Any, ctx: Any, *args: Any, **kwargs: Any) -> Any:
                tick = time.perf_counter()
                try:
                    return original(batch, ctx, *args, **kwargs)
                finally:
                    llama_cpp.llama_synchronize(ctx)  # a GPU computes asynchronously: wait for it here
                    n = int(batch.batch.n_tokens)
                    self.decodes.append((tick, time.perf_counter(), n, int(batch.batch.pos[0]) if n else -1))

            return timed

        def step(original: Any) -> Any:
            def timed(decoder: Any, *args: Any, **kwargs: Any) -> Any:
                before, tick = decoder.counts.sequences, time.perf_counter()
                try:
                    return original(decoder, *args, **kwargs)
                finally:
                    self.steps.append((tick, time.perf_counter(), decoder.counts.sequences - before))

            return timed

        def sample_step(original: Any) -> Any:
            def timed(*args: Any, **kwargs: Any) -> Any:
                first, tick = len(self.decodes), time.perf_counter()
                try:
                    return original(*args, **kwargs)
                finally:
                    self.sample_steps.append((tick, time.perf_counter(), first, len(self.decodes)))

            return timed

        self._patch(TokenBatch, "decode", decode)
        self._patch(BatchedDecoder, "_step", step)
        self._patch(BatchedDecoder, "_pack", self._timed(self.moves))
        for name in ("start", "compute_mask", "forced_tokens", "consume"):
            self._patch(GrammarConstraint, name, self._timed(self.grammar))
        for name in ("sample", "sample_allowed"):  # generate's own references to them
            self._patch(generation, name, self._timed(self.sampling))
        self._patch(generation.GeneratingContext, "_sample_step", sample_step)
        return self

    def close(self) -> None:
        for owner, name, original in reversed(self._undo):
            setattr(owner, name, original)
        self._undo = []

    def anatomy(self, t0: float, t1: float) -> dict:
        """How the wall t0..t1 split: llama_decode (with the GPU's wait), the rest of the batched
        steps (batch filled, logits rows read; `state_moves` apart), then, outside the steps,
        grammar and sampling, and the host's other work. One at a time a step is a decode."""
        inside: Callable[[Any], bool] = lambda r: t0 <= r[0] and r[1] <= t1
        decodes = [r for r in self.decodes if inside(r)]
        steps = [(s, e) for s, e, _ in self.steps if inside((s, e))] or [(s, e) for s, e, _, _ in decodes]
        widths = [w for s, e, w in self.steps if inside((s, e))] or [1] * len(decodes)
        moves = [r for r in self.moves if inside(r)]
        grammar, sampling = [r for r in self.grammar if inside(r)], [r for r in self.sampling if inside(r)]
        wall = t1 - t0
        in_steps = covered(steps)
        decode_s = sum(e - s for s, e, _, _ in decodes)
        moves_s = covered(moves)
        seconds = {
            "llama_decode": decode_s,
            "logits_and_batch": max(0.0, in_steps - decode_s - moves_s),
            "state_moves": moves_s,
            "grammar": covered(grammar, without=steps),
            "sampling": covered(sampling, without=steps + grammar),
        }
        shares = {k: round(v / wall, 4) for k, v in seconds.items()}
        shares["other_host"] = round(1 - sum(seconds.values()) / wall, 4)
        return {
            "wall_s": round(wall, 2),
            "steps": len(steps),
            "mean_width": round(sum(widths) / len(widths), 2) if widths else 0.0,
            "step_ms": round(1000 * in_steps / len(steps), 2) if steps else None,
            "decode_ms": round(1000 * decode_s / len(steps), 2) if steps else None,
            "shares": shares,
            "calls": {"grammar": len(grammar), "sampling": len(sampling)},
            # each sequence's own cost: its share of a step beyond the decode (its logits row read,
            # its tokens put in the batch), and the mean grammar and sampling call, whatever ran beside it
            "logits_ms_per_sequence": round(1000 * seconds["logits_and_batch"] / sum(widths), 4) if widths else None,
            "call_ms": {
                "grammar": round(1000 * sum(e - s for s, e in grammar) / len(grammar), 4) if grammar else None,
                "sampling": round(1000 * sum(e - s for s, e in sampling) / len(sampling), 4) if sampling else None,
            },
        }

    def one_token_steps(self, since: int = 0) -> dict:
        """The sampled tokens of `generate` (from `sample_steps[since]` on) whose step decoded one
        token alone: how many, their median depth, their rate over the steps' wall (decode, mask,
        draw) and over their decodes alone. One thread's steps only (one episode at a time)."""
        picked = [
            (end - start, self.decodes[first])
            for start, end, first, after in self.sample_steps[since:]
            if after == first + 1 and self.decodes[first][2] == 1
        ]
        wall = sum(w for w, _ in picked)
        decode = sum(d[1] - d[0] for _, d in picked)
        return {
            "steps": len(picked),
            "depth": int(statistics.median(d[3] for _, d in picked)) if picked else None,
            "tok_s": round(len(picked) / wall, 1) if wall else None,
            "decode_tok_s": round(len(picked) / decode, 1) if decode else None,
        }


# ---- the children -------------------------------------------------------------------------------


def plain_decode(session: Any, probe: Probe, depth: int, tokens: int) -> dict:
    """Plain greedy decode (no grammar) of `tokens` tokens in `session`, filled to `depth` first:
    its one-token steps, measured as the episode's are."""
    from edge_sql.runtime import SamplingParams

    depth = max(16, min(depth, session.n_ctx - tokens - 1))
    session.reset()
    session.eval(filler_tokens(session, depth))
    mark = len(probe.sample_steps)
    completion = session.generate(params=SamplingParams(greedy=True), max_tokens=tokens)
    return probe.one_token_steps(mark) | {
        "filled_to": depth,
        "generated": completion.timings.generated_tokens,
        "generate_tok_s": round(completion.timings.decode_tok_s, 1),
    }


def child_parallel(cfg: dict) -> dict:
    """`cfg["questions"]` Chinook questions, `cfg["parallel"]` at a time, on the GPU (every layer
    offloaded when there is one); with parallel 1 also plain decode of `cfg["decode"]` tokens."""
    import os

    from edge_sql import Agent
    from edge_sql.agent import Budget

    probe = Probe().install()
    budget = Budget(max_think_tokens=THINK_TOKENS, max_rounds=ROUNDS, max_tokens=cfg["n_ctx"])
    peak = [0.0]
    done = threading.Event()

    def watch() -> None:  # the most GPU memory held while the episodes run
        while not done.wait(0.5):
            held = gpu_memory_mib(os.getpid())
            if held:
                peak[0] = max(peak[0], held)

    try:
        with Agent(
            cfg["model"],
            parallel=cfg["parallel"],
            n_ctx=cfg["n_ctx"],
            budget=budget,
            tune=False,
            prefix_cache=False,
            pull_if_missing=False,
        ) as agent:
            threading.Thread(target=watch, daemon=True).start()
            probe.clear()
            tick = time.perf_counter()
            results = agent.ask_many(chinook_questions(cfg["questions"]), CHINOOK, seed=0)
            tock = time.perf_counter()
            done.set()
            stats = [r.stats.to_json() for r in results]
            generated = sum(s.get("generated_tokens") or 0 for s in stats)
            row: dict[str, Any] = {
                "parallel": cfg["parallel"],
                "backend": agent.info.backend,
                "episodes": len(results),
                "wall_s": round(tock - tick, 2),
                "generated_tokens": generated,
                "forced_tokens": sum(s.get("forced_tokens") or 0 for s in stats),
                "tok_s": round(generated / (tock - tick), 1),
                "generate_tok_s": round(generated / max(1e-9, sum(s.get("generate_s") or 0 for s in stats)), 1),
                "stops": [r.stop for r in results],
                "gpu_memory_peak_mib": peak[0] or None,
                "anatomy": probe.anatomy(tick, tock),
            }
            if cfg["parallel"] == 1:
                row["one_token_steps"] = probe.one_token_steps()
                depth = row["one_token_steps"]["depth"] or cfg["n_ctx"] // 2
                row["plain_decode"] = plain_decode(agent.session, probe, depth, cfg["decode"])
    finally:
        probe.close()
    return row


# ---- the parent's part --------------------------------------------------------------------------


class ChildRunner(Protocol):
    """What check.py's `Run` offers this step."""

    def child(self, kind: str, cfg: dict, *, need_s: float) -> dict | None: ...

    def save(self) -> None: ...


def judged(rows: list[dict]) -> dict:
    """The goals from the rows (P at once, then one at a time): `parallel_speedup`,
    `one_episode_vs_plain` and the goal lines, each where its rows are there."""
    out: dict[str, Any] = {"goals": []}
    many = next((r for r in rows if r["parallel"] > 1), None)
    one = next((r for r in rows if r["parallel"] == 1), None)
    if many and one and one["tok_s"]:
        speedup = round(many["tok_s"] / one["tok_s"], 2)
        out["parallel_speedup"] = speedup
        out["goals"].append(
            f"{many['parallel']} at once {speedup:.2f}x one at a time (goal >= {SPEEDUP_GOAL:g}x): "
            + ("met" if speedup >= SPEEDUP_GOAL else "NOT met")
        )
    episode, plain = (one or {}).get("one_token_steps") or {}, (one or {}).get("plain_decode") or {}
    if episode.get("tok_s") and plain.get("tok_s"):
        ratio = round(episode["tok_s"] / plain["tok_s"], 2)
        out["one_episode_vs_plain"] = {
            "ratio": ratio,
            "depth": episode["depth"],
            "episode_tok_s": episode["tok_s"],
            "plain_tok_s": plain["tok_s"],
        }
        out["goals"].append(
            f"one episode {ratio:.2f}x plain decode at depth {episode['depth']} (goal >= {PLAIN_GOAL:g}x): "
            + ("met" if ratio >= PLAIN_GOAL else "NOT met")
        )
    return out


def measure(run: ChildRunner, model: Path, report: dict, *, parallel: int, questions: int, decode: int) -> None:
    """Run both children into `report["parallel"]` and add what `judged` finds."""
    report["parallel"] = []
    for n in dict.fromkeys((parallel, 1)):
        cfg = {"model": str(model), "parallel": n, "n_ctx": N_CTX, "questions": questions, "decode": decode}
        row = run.child("parallel", cfg | {"label": f"x{n}"}, need_s=60)
        if row is not None:
            report["parallel"].append(row)
        run.save()
    report.update(judged(report["parallel"]))


def summary_lines(report: dict) -> list[str]:
    """The runs, where their wall went, one-token steps against plain decode, and the goals."""
    rows = report.get("parallel", [])
    lines = [
        f"parallel {r['parallel']}: {r['episodes']} episodes in {r['wall_s']} s, {r['tok_s']} generated tok/s, "
        f"peak GPU {r['gpu_memory_peak_mib']} MiB"
        for r in rows
    ]
    if rows:
        names = list(rows[0]["anatomy"]["shares"])
        lines.append("wall share " + " ".join(f"{n:>{len(n)}}" for n in names) + "  steps width ms/step")
        for r in rows:
            a = r["anatomy"]
            cells = " ".join(f"{100 * a['shares'][n]:>{len(n) - 1}.1f}%" for n in names)
            lines.append(
                f"{'x' + str(r['parallel']):10} {cells} {a['steps']:6} {a['mean_width']:5} {a['step_ms']!s:>7}"
            )
    one = next((r for r in rows if r["parallel"] == 1 and "plain_decode" in r), None)
    if one:
        e, p = one["one_token_steps"], one["plain_decode"]
        lines.append(
            f"one-token steps: episode {e['tok_s']} tok/s (decode alone {e['decode_tok_s']}) at depth {e['depth']}, "
            f"plain {p['tok_s']} tok/s (decode alone {p['decode_tok_s']}) from depth {p['filled_to']}"
        )
    return lines + [f"goal: {g}" for g in report.get("goals", [])]
