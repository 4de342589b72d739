"""What a verify batch costs (bench_speculative.py's part 1): decode time per step when each step
verifies k drafts that are all rejected, against a plain decode; the rollback and a full
snapshot for comparison."""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import llama_cpp

from edge_sql.agent import load_prompt
from edge_sql.runtime import SamplingParams, Session


class WrongDrafter:
    """Always proposes k copies of one token the model does not write: every draft rolls back."""

    name = "wrong"

    def __init__(self, token: int) -> None:
        self.token = token

    def draft(self, context: Sequence[int], k: int) -> list[int]:
        return [self.token] * k

    def observe(self, accepted: int, proposed: int) -> None:
        pass

    def reset(self) -> None:
        pass


# ---- 1. cost ---------------------------------------------------------------------------------


def _opening_tokens(session: Session) -> list[int]:
    prompt = load_prompt()
    shared, own = prompt.opening("How many rows does the Album table have?", None, max_rounds=6)
    return [t for text, special in shared + own for t in session.tokenize(text, special=special)]


def verify_cost(model: Path, *, ks: Sequence[int], steps: int, repeats: int, threads: int) -> dict:
    """Seconds of decode per generated token with k always-rejected drafts per step."""
    times: dict[str, list[float]] = {}
    rollback_s: list[float] = []
    real_rm = llama_cpp.llama_memory_seq_rm

    def timed_rm(*args):
        tick = time.perf_counter()
        ok = real_rm(*args)
        rollback_s.append(time.perf_counter() - tick)
        return ok

    with (
        Session(model, n_ctx=2048, n_threads=threads) as plain,
        Session(model, n_ctx=2048, n_threads=threads, speculate="lookup", draft_max=max(ks)) as spec,
    ):
        prompt = _opening_tokens(plain)
        wrong = plain.tokenize("~")[0]
        llama_cpp.llama_memory_seq_rm = timed_rm
        try:
            for _ in range(repeats):
                for label, session, k in [("off", plain, 0)] + [(f"k={k}", spec, k) for k in [0, *ks]]:
                    if session is spec:
                        if k:
                            spec.use_drafters([WrongDrafter(wrong)], max_k=k, adaptive=False)
                        else:
                            spec.use_drafters([])
                    session.reset()
                    session.eval(prompt)
                    completion = session.generate(params=SamplingParams(greedy=True), max_tokens=steps)
                    times.setdefault(label, []).append(completion.timings.decode_s / len(completion.tokens))
                    print(f"{model.name} {label}: {1e3 * times[label][-1]:.2f} ms/token", file=sys.stderr)
        finally:
            llama_cpp.llama_memory_seq_rm = real_rm
        session = spec
        session.reset()
        session.eval(prompt)
        snap_s, restore_s = [], []
        for _ in range(5):
            tick = time.perf_counter()
            snapshot = session.snapshot()
            snap_s.append(time.perf_counter() - tick)
            tick = time.perf_counter()
            assert session.restore(snapshot)
            restore_s.append(time.perf_counter() - tick)
        info, plain_info = spec.info, plain.info
    median = {label: statistics.median(values) for label, values in times.items()}
    base = median["k=0"]
    return {
        "model": model.name,
        "context": len(prompt),
        "steps": steps,
        "repeats": repeats,
        "decode_s": median,
        "relative": {label: value / base for label, value in median.items()},
        "rollback_ms_median": 1e3 * statistics.median(rollback_s) if rollback_s else None,
        "snapshot_ms": 1e3 * statistics.median(snap_s),
        "restore_ms": 1e3 * statistics.median(restore_s),
        "state_bytes": len(snapshot.state),
        "rollback": info.rollback,
        "buffers_spec": info.buffers,
        "buffers_plain": plain_info.buffers,
        "draft_max": info.draft_max,
    }
