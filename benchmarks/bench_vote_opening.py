"""A vote's K episodes share their whole opening: three ways to put it into K sequences, timed.

Each episode of a vote opens with the system prompt and tool list (whose state is saved) and the
same question. Until the first generated token of every sequence, with the prompt's state at
hand, this times on one context of K sequences (the batched engine's):

  - 'each':    every sequence restores the prompt's state and evaluates the question itself, the
               K questions in one batch (what a vote did before issue 42);
  - 'state':   sequence 0 restores it and evaluates the question; the others get sequence 0's
               state (llama_state_seq_get/set_data), what `Session.shared_prefix(opening=...)` does;
  - 'seq_cp':  the same, copied with llama.cpp's own `llama_memory_seq_cp` (attention cells of a
               non-unified cache: the whole stream buffer of `n_ctx` cells is copied at the next
               decode; recurrent state: the cell is shared and copied to a free cell when a
               sequence decodes, src/llama-memory-recurrent.cpp `find_slot`);

then one decode step of a token in every sequence (its logits must be the same in all three).

    python benchmarks/bench_vote_opening.py MODEL.gguf --k 4 8 [--threads 2] [--n-ctx 12288]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import llama_cpp
import numpy as np

from edge_sql.agent import Budget, load_prompt
from edge_sql.bench.machine import cpu_model
from edge_sql.runtime.batching.sequences import open_sessions
from edge_sql.runtime.llama.batch import TokenBatch
from edge_sql.runtime.llama.context import read_sequence_state, write_sequence_state
from edge_sql.runtime.llama.state_streams import for_streams, portable
from edge_sql.runtime.options import SessionOptions

QUESTION = "Which genre has the most tracks, and how many tracks does it have?"
MODES = ("each", "state", "seq_cp")


def run(model: Path, k: int, options: SessionOptions, repeats: int) -> dict:
    with open_sessions(model, options, k) as group:
        session = group.sessions[0]
        shared, own = load_prompt().opening(QUESTION, None, max_rounds=Budget().max_rounds)
        ids = lambda pieces: [t for text, special in pieces for t in session.tokenize(text, special=special)]
        prefix, question = ids(shared), ids(own)
        context = group._decoder.context  # the shared context: this bench drives it directly
        ptr, memory = context.ptr, context.memory
        batch = TokenBatch(context.n_batch)

        def clear() -> None:
            llama_cpp.llama_memory_clear(memory, True)

        def decode(parts: list[tuple[int, list[int], int]]) -> None:
            batch.fill_parts(
                [
                    (seq, np.asarray(tokens, np.int32), start, np.zeros(len(tokens), bool))
                    for seq, tokens, start in parts
                ]
            )
            batch.decode(ptr)

        clear()  # the prompt's saved state, as a single session would restore it
        for start in range(0, len(prefix), context.n_batch):
            decode([(0, prefix[start : start + context.n_batch], start)])
        saved = portable(read_sequence_state(ptr, 0))
        assert saved is not None

        def first_step() -> np.ndarray:
            at = len(prefix) + len(question)
            batch.fill_parts([(s, np.asarray([question[-1]], np.int32), at, np.ones(1, bool)) for s in range(k)])
            batch.decode(ptr)
            return np.stack(
                [
                    np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ptr, i), shape=(context.n_vocab,)).copy()
                    for i in range(k)
                ]
            )

        def opening(mode: str) -> None:
            clear()
            sequences = range(k) if mode == "each" else [0]
            for s in sequences:
                assert write_sequence_state(ptr, s, for_streams(saved, k))
            decode([(s, question, len(prefix)) for s in sequences])
            if mode == "state":
                state = read_sequence_state(ptr, 0)
                for s in range(1, k):
                    assert write_sequence_state(ptr, s, state)
            elif mode == "seq_cp":
                for s in range(1, k):
                    llama_cpp.llama_memory_seq_cp(memory, 0, s, -1, -1)

        rows: dict[str, dict] = {}
        logits: dict[str, np.ndarray] = {}
        for mode in MODES:
            opening_s, step_s = [], []
            for _ in range(repeats):
                tick = time.perf_counter()
                opening(mode)
                tock = time.perf_counter()
                logits[mode] = first_step()
                opening_s.append(tock - tick)
                step_s.append(time.perf_counter() - tock)
            evaluated = len(question) * (k if mode == "each" else 1)
            rows[mode] = {
                "opening_s": round(min(opening_s), 3),
                "first_step_s": round(min(step_s), 3),
                "to_first_token_s": round(min(a + b for a, b in zip(opening_s, step_s)), 3),
                "question_tokens_evaluated": evaluated,
            }
        batch.close()
    for mode in MODES[1:]:
        rows[mode]["max_abs_logit_diff_vs_each"] = float(np.max(np.abs(logits[mode] - logits["each"])))
    return {
        "k": k,
        "prefix_tokens": len(prefix),
        "question_tokens": len(question),
        "state_bytes": len(saved),
        "modes": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--k", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--n-ctx", type=int, default=12288)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    options = SessionOptions(n_ctx=args.n_ctx, n_threads=args.threads)
    print(json.dumps({"cpu": cpu_model(), "model": args.model.name, "n_ctx": args.n_ctx}))
    for k in args.k:
        result = run(args.model, k, options, args.repeats)
        print(json.dumps(result))
        for mode, row in result["modes"].items():
            print(
                f"K={k} {mode:7s} opening {row['opening_s']:7.3f} s  first step {row['first_step_s']:6.3f} s  "
                f"to first token {row['to_first_token_s']:7.3f} s  question tokens {row['question_tokens_evaluated']}"
                + (f"  |dlogit| {row['max_abs_logit_diff_vs_each']:.3g}" if mode != "each" else "")
            )


if __name__ == "__main__":
    main()
