"""N episodes starting at once: the time until every one has evaluated its opening.

An episode opens with the shared system prompt and tool list, then its question. When N
sessions of a group (`bench --parallel`, `Agent.ask_many`, a vote) start together, the shared
part can be evaluated N times (each session evaluating it in the same batches) or once (one
session evaluates it, the others wait for its state and restore it: `PrefixCache.claim`).
This times both on the real opening of the agent's prompt, N questions over Chinook:

  - 'each':  no prefix declared, every session evaluates its whole opening (what the first
             episodes of a group cost before the claim);
  - 'once':  the prefix declared shared, as the agent declares it.

    python benchmarks/bench_group_start.py MODEL.gguf --parallel 16 [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path

from bench_parallel_agent import QUESTIONS  # this folder is on sys.path when run as a script
from edge_sql.agent import Budget, load_prompt
from edge_sql.api import load_settings
from edge_sql.runtime import Session
from edge_sql.runtime.batching.sequences import open_sessions


def opening(session: Session, question: str) -> tuple[list[int], list[int]]:
    """The shared prefix and the question's own tokens, as the episode builds them."""
    shared, own = load_prompt().opening(question, None, max_rounds=Budget().max_rounds)
    ids = lambda pieces: [t for text, special in pieces for t in session.tokenize(text, special=special)]
    return ids(shared), ids(own)


def start_all(sessions: list[Session], declare: bool) -> dict:
    """Every session resets and evaluates its opening, each in a thread, started together."""
    barrier = threading.Barrier(len(sessions))
    done: list[float] = [0.0] * len(sessions)

    def start(i: int, session: Session) -> None:
        prefix, own = opening(session, QUESTIONS[i % len(QUESTIONS)])
        session.reset()
        barrier.wait()
        if declare:
            session.shared_prefix(prefix)
        session.eval(prefix + own)
        done[i] = time.perf_counter()

    threads = [threading.Thread(target=start, args=(i, s)) for i, s in enumerate(sessions)]
    tick = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {
        "wall_s": round(max(done) - tick, 2),
        "prompt_tokens": sum(s.timings.prompt_tokens for s in sessions),
        "restored_tokens": sum(s.timings.restored_tokens for s in sessions),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path)
    parser.add_argument("--parallel", type=int, default=16)
    parser.add_argument("--ctx", type=int, default=12288, help="per sequence (the bench default)")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    settings, _how = load_settings(args.model, tune=True, n_gpu_layers=None, n_ctx=args.ctx, n_threads=args.threads)
    with open_sessions(args.model, settings.session_options("off", n_ctx=args.ctx), args.parallel) as group:
        sessions = list(group)
        report = {
            "parallel": args.parallel,
            "settings": settings.label,
            "each": start_all(sessions, declare=False),
            "once": start_all(sessions, declare=True),
        }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
