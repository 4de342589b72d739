"""Does a stretched context decode like a filled one? (The quick calibration's premise.)

Usage: python benchmarks/bench_stretched_state.py MODEL.gguf [--point 1024] [--rounds 2]

For flash attention on and off: fills a context to `--point` tokens for real (timed), and
stretches the state of its first 64 tokens to the same length (`runtime/state/stretched_state.py`);
one session (n_ubatch 64) then restores each in turn and times 16 single-token decodes (median),
alternating `--rounds` times so that the machine's drift falls on both. Prints one line per
measurement and the machine.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from edge_sql.bench.machine import machine_description
from edge_sql.runtime import Session
from edge_sql.runtime.state.stretched_state import stretch_snapshot

BASE = 64


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--point", type=int, default=1024)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    print(json.dumps(machine_description()))
    rng = np.random.default_rng(0)
    pool = np.arange(100_000)
    kwargs = {"n_ctx": max(12288, args.point + 64)} | ({"n_threads": args.threads} if args.threads else {})
    for flash_attn in (True, False):
        with Session(args.model, flash_attn=flash_attn, **kwargs) as base:
            base.eval(rng.choice(pool, BASE).tolist())
            short = base.snapshot()
            tick = time.perf_counter()
            base.eval(rng.choice(pool, args.point - BASE).tolist())
            fill_s = time.perf_counter() - tick
            filled = base.snapshot()
        stretched = stretch_snapshot(short, args.point)
        assert stretched is not None, "this llama.cpp's state format is not the one stretching knows"
        steps = rng.choice(pool, 17).tolist()
        with Session(args.model, flash_attn=flash_attn, n_ubatch=64, **kwargs) as session:
            for _ in range(args.rounds):
                for name, snapshot in (("filled", filled), ("stretched", stretched)):
                    assert session.restore(snapshot)
                    session.eval(steps[:1])  # first-touch costs
                    assert session.restore(snapshot)
                    ticks = []
                    for token in steps[1:]:
                        tick = time.perf_counter()
                        session.eval([token])
                        ticks.append(time.perf_counter() - tick)
                    print(
                        f"flash_attn={'on' if flash_attn else 'off'} {name:9} at {args.point} tokens: decode "
                        f"{1 / float(np.median(ticks)):.2f} tok/s (filling it for real took {fill_s:.1f} s)",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
