"""What one decode step costs by its shape on this machine: sequences x tokens each.

The batched engine's gain is bounded by these curves: where a step of 16 sequences costs 16
steps of one, batching buys nothing. First table: one token each for 1..16 sequences (sampled
steps), each width on sequences 0..w-1 of one context of 16 (each holding `--fill` tokens
first), best of three. Second table: prompt pieces, the same tokens spread over more or fewer
sequences (one micro-batch of `--ubatch` tokens; logits of each sequence's last token), best
of two.

    python benchmarks/bench_step_widths.py MODEL.gguf [--ubatch 64] [--threads 2]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from edge_sql.runtime import SessionOptions
from edge_sql.runtime.llama.batch import TokenBatch
from edge_sql.runtime.llama.loading import open_model
from edge_sql.runtime.llama.shared_models import release

WIDTHS = (1, 2, 4, 6, 7, 8, 9, 11, 12, 14, 16)
N_SEQ = 16
PIECES = ((1, 64), (2, 32), (4, 16), (8, 8), (16, 4))  # 64 tokens, one micro-batch at --ubatch 64


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path)
    parser.add_argument("--ubatch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--fill", type=int, default=200, help="tokens each sequence holds before the steps")
    args = parser.parse_args()
    options = SessionOptions(
        n_ctx=args.fill + 512, n_batch=512, n_ubatch=args.ubatch, n_threads=args.threads, flash_attn=False
    )
    loaded, context, _info = open_model(args.model, options, n_seq=N_SEQ)
    rng = np.random.default_rng(0)
    try:
        with TokenBatch(512) as batch:
            for seq in range(N_SEQ):
                for start in range(0, args.fill, 100):
                    n = min(100, args.fill - start)
                    batch.fill_parts([(seq, rng.integers(100, 50_000, n).astype(np.int32), start, np.zeros(n, bool))])
                    batch.decode(context.ptr)
            position = args.fill
            one = None
            print("| sequences | ms a step | ms a token | tokens/s vs one |")
            print("|--:|--:|--:|--:|")
            for width in WIDTHS:
                times = []
                for rep in range(3):
                    batch.fill_parts(
                        [
                            (seq, np.array([1000 + rep], np.int32), position + rep, np.ones(1, bool))
                            for seq in range(width)
                        ]
                    )
                    tick = time.perf_counter()
                    batch.decode(context.ptr)
                    times.append(time.perf_counter() - tick)
                # the others catch up, so every width steps at the same context length
                if width < N_SEQ:
                    batch.fill_parts(
                        [(seq, np.full(3, 7, np.int32), position, np.zeros(3, bool)) for seq in range(width, N_SEQ)]
                    )
                    batch.decode(context.ptr)
                position += 3
                ms = 1000 * min(times)
                one = one or ms
                print(f"| {width} | {ms:.1f} | {ms / width:.1f} | {one * width / ms:.2f}x |", flush=True)
            at = [position] * N_SEQ
            print("\n| sequences x tokens each | ms a step | ms a token |")
            print("|--|--:|--:|")
            for n, each in PIECES:
                times = []
                for _rep in range(2):
                    last = np.zeros(each, bool)
                    last[-1] = True
                    batch.fill_parts(
                        [(seq, rng.integers(100, 50_000, each).astype(np.int32), at[seq], last) for seq in range(n)]
                    )
                    tick = time.perf_counter()
                    batch.decode(context.ptr)
                    times.append(time.perf_counter() - tick)
                    for seq in range(n):  # the low sequences run ahead by at most 256 tokens
                        at[seq] += each
                ms = 1000 * min(times)
                print(f"| {n} x {each} | {ms:.1f} | {ms / (n * each):.1f} |", flush=True)
    finally:
        context.close()
        release(loaded)


if __name__ == "__main__":
    main()
