"""MTP head cost: one MTP draft step against one target decode, and the memory the drafter adds.

    .venv/bin/python -m benchmarks.runtime.bench_mtp MODEL.gguf [MODEL.gguf ...] --threads 2 \\
        --out benchmarks/results/mtp.md

Each model (a GGUF converted with its MTP head) runs in its own child process: load it with a
12,288-token context, prefill a prompt, then interleave, `--rounds` times,
* `--steps` single-token target decodes (`Session.eval` of one token: one llama_decode), with
  no drafter attached;
* the same with an `MTPDrafter` attached (each decode is then mirrored into the MTP context:
  the extra cost every decode pays while drafting is on);
* `--steps` MTP draft steps (`draft(context, 1)`: one one-token MTP decode with its
  full-vocabulary output projection).
Reported: median milliseconds per target decode, per mirrored decode and per draft step, their
ratio, the MTP context's buffers (from llama.cpp's log) and the RSS growth after attaching and
drafting (VmRSS of the child). Ratios from one run compare; absolute times drift on a shared
machine.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common.bench_machine import machine_detail, write_results

REPO = Path(__file__).resolve().parents[2]

N_CTX = 12288


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def measure(model: Path, threads: int, prompt_tokens: int, steps: int, rounds: int) -> dict:
    """One model, in this process: see the module docstring."""
    import numpy as np

    from edge_sql.runtime import Session
    from edge_sql.runtime.speculation.mtp import MTPDrafter

    rng = np.random.default_rng(7)
    with Session(model, n_ctx=N_CTX, n_threads=threads, mtp=True) as session:
        vocab = min(session.n_vocab, 248044)  # ordinary tokens only
        session.eval(rng.integers(0, vocab, prompt_tokens).tolist())
        rss_loaded = _rss_mib()
        decode, mirrored, draft = [], [], []
        drafter = None
        for _ in range(rounds):
            for sink, attach in ((decode, False), (mirrored, True)):
                if attach and drafter is None:
                    drafter = MTPDrafter(session.context)
                    rss_attached = _rss_mib()
                if not attach and drafter is not None:
                    drafter.close()
                    drafter = None
                for token in rng.integers(0, vocab, steps).tolist():
                    tick = time.perf_counter()
                    session.eval([token])
                    sink.append(time.perf_counter() - tick)
            context = session.tokens
            for token in rng.integers(0, vocab, steps).tolist():
                tick = time.perf_counter()
                drafter.draft(context + [token], 1)
                draft.append(time.perf_counter() - tick)
            buffers = drafter.buffers
        rss_drafting = _rss_mib()
        drafter.close()
        return {
            "model": str(model),
            "file_bytes": model.stat().st_size,
            "threads": threads,
            "prompt_tokens": prompt_tokens,
            "n_past": session.n_past,
            "decode_ms": 1000 * statistics.median(decode),
            "mirrored_ms": 1000 * statistics.median(mirrored),
            "draft_step_ms": 1000 * statistics.median(draft),
            "samples": len(draft),
            "buffers": buffers,
            "rss_loaded_mib": rss_loaded,
            "rss_attached_mib": rss_attached,
            "rss_drafting_mib": rss_drafting,
            "session_buffers": session.info.buffers,
        }


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def report(results: list[dict], command: str) -> str:
    from importlib.metadata import version

    lines = [
        "# MTP head: one draft step against one target decode",
        "",
        f"Run {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC with `{command}`;",
        f"llama-cpp-python {version('llama-cpp-python')}, Python {platform.python_version()}, context {N_CTX} "
        "tokens, repack off (the default). The machine was shared with other work while this ran: "
        "absolute times drift, the ratios within one model's run are what to compare.",
        "",
        "| model | file | target decode | decode with drafter attached | MTP draft step | step / decode |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    for r in results:
        lines.append(
            f"| {Path(r['model']).name} | {r['file_bytes'] / 1e9:.2f} GB | {r['decode_ms']:.2f} ms | "
            f"{r['mirrored_ms']:.2f} ms | {r['draft_step_ms']:.2f} ms | {r['draft_step_ms'] / r['decode_ms']:.2f} |"
        )
    lines += ["", "Memory the MTP drafter adds (its own llama.cpp context; the weights are the session's):", ""]
    for r in results:
        kinds = ", ".join(f"{k} {_mib(v)}" for k, v in sorted(r["buffers"].items()))
        session_kv = {k: v for k, v in r["session_buffers"].items() if k.endswith((" KV", " RS"))}
        lines.append(
            f"- {Path(r['model']).name}: MTP context buffers {kinds} (total {_mib(sum(r['buffers'].values()))}); "
            f"the session's own cache: {', '.join(f'{k} {_mib(v)}' for k, v in sorted(session_kv.items()))}; "
            f"RSS {r['rss_loaded_mib']:.0f} MiB loaded and prefilled, {r['rss_attached_mib']:.0f} MiB with the "
            f"drafter attached, {r['rss_drafting_mib']:.0f} MiB after {r['samples']} draft steps and "
            f"{2 * r['samples']} decodes ({r['n_past']} tokens in context)."
        )
    lines += ["", "## Machine", "", "```", machine_detail(), "```", ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", type=Path, nargs="+")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.models[0], args.threads, args.prompt_tokens, args.steps, args.rounds)))
        return 0
    results = []
    for model in args.models:
        child = [
            sys.executable,
            "-m",
            __spec__.name,
            str(model),
            "--child",
            "--threads",
            str(args.threads),
            "--prompt-tokens",
            str(args.prompt_tokens),
            "--steps",
            str(args.steps),
            "--rounds",
            str(args.rounds),
        ]
        done = subprocess.run(child, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{model}: the measuring child failed:\n{done.stderr[-2000:]}")
        results.append(json.loads(done.stdout.strip().splitlines()[-1]))
    text = report(results, shlex.join(["python", "benchmarks/runtime/bench_mtp.py", *sys.argv[1:]]))
    print(text)
    if args.out:
        write_results(args.out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
