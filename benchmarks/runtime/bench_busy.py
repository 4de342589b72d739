"""Decode speed on a busy machine: llama.cpp's threads against other programs holding cores.

    python -m benchmarks.runtime.bench_busy MODEL.gguf [MODEL.gguf ...] [--busy 0 1 2] [--out FILE.md]

For each model, each candidate (how llama.cpp's worker threads wait, and how many there are)
and each load (0, 1, 2 other processes spinning on a core each, started and stopped by this
script), a fresh child process loads the model and measures:

* decode: greedy single-token decodes through `Session` after a prompt of `--depth` tokens
  (64 by default; tok/s);
* episode (with --episode): one bounded greedy agent episode on Chinook (`Agent.ask`: think
  64 tokens, 2 rounds, 2 calls a turn), generated tokens over generation time.

Candidates are set the way a user would: environment variables read by libgomp when llama.cpp
loads (the bundled llama-cpp-python build runs ggml's threads through OpenMP), and
`n_threads`. "libgomp default" pins GOMP_SPINCOUNT=300000, which is what libgomp uses when
neither it nor OMP_WAIT_POLICY is set (its env.c: about 3 ms of spinning at every barrier
before sleeping). Every row but "edge-sql" keeps its thread count fixed (`adapt_threads=False`);
"edge-sql" clears both variables and leaves the rest to edge-sql itself: its own short spin
(set when edge_sql is imported) and the thread count that follows the load
(runtime/llama/threads.py), adaptation included in its figure; it runs without flash attention
(an adapting session does: from 257 tokens on, flash attention's sums depend on the thread
count), where the fixed rows keep llama.cpp's choice (on) unless their name says "flash off".
The report says, per flash-attention value, whether every row decoded the same tokens.

Each figure is the median of `--repeat` children (1 by default); the candidates are measured in
turn (each load's candidates back to back, then again), so ratios within a load compare like
with like on a machine whose speed drifts. The CPU and load average go in the report.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common.bench_machine import machine_line, write_results

HERE = Path(__file__).resolve().parent
CHINOOK = HERE.parents[1] / "edge_sql" / "data" / "chinook" / "chinook.sqlite"
QUESTION = "Which country's customers spent the most money in total?"
SPIN_DEFAULT = "300000"  # libgomp's spin count when neither GOMP_SPINCOUNT nor OMP_WAIT_POLICY is set

# name -> (environment for the child, n_threads or None for every CPU, thread count adapts,
# flash attention: None as llama.cpp decides (on for the CPU), or forced)
CANDIDATES: dict[str, tuple[dict[str, str], int | None, bool, bool | None]] = {
    "libgomp default": ({"GOMP_SPINCOUNT": SPIN_DEFAULT}, None, False, None),
    "1 thread": ({"GOMP_SPINCOUNT": SPIN_DEFAULT}, 1, False, None),
    "OMP_WAIT_POLICY=PASSIVE": ({"OMP_WAIT_POLICY": "PASSIVE"}, None, False, None),
    "GOMP_SPINCOUNT=100000": ({"GOMP_SPINCOUNT": "100000"}, None, False, None),
    "GOMP_SPINCOUNT=10000": ({"GOMP_SPINCOUNT": "10000"}, None, False, None),
    "GOMP_SPINCOUNT=1000": ({"GOMP_SPINCOUNT": "1000"}, None, False, None),
    "GOMP_SPINCOUNT=10000, flash off": ({"GOMP_SPINCOUNT": "10000"}, None, False, False),
    "1 thread, flash off": ({"GOMP_SPINCOUNT": "10000"}, 1, False, False),
    "edge-sql": ({}, None, True, None),
}
_CLEARED = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY")  # the parent's own values never leak into a child


def child(cfg: dict) -> dict:
    """One measurement in this (fresh) process: load (an Agent, with the candidate's session
    options), decode on its session, and optionally an episode through the Agent."""
    from edge_sql.agent import Budget
    from edge_sql.api import Agent
    from edge_sql.runtime import SamplingParams

    out: dict = {}
    n_ctx = max(4096, cfg["depth"] + cfg["tokens"] + 64)
    options = {"n_threads": cfg["threads"], "adapt_threads": cfg["adapt"], "flash_attn": cfg["flash"]}
    budget = Budget(max_think_tokens=64, max_rounds=2, max_calls_per_turn=2)
    with Agent(
        cfg["model"],
        n_ctx=n_ctx,
        tune=False,
        prefix_cache=False,
        pull_if_missing=False,
        budget=budget,
        session_settings=options,
    ) as agent:
        session = agent.session
        assert session is not None
        out["threads"] = session.info.n_threads
        out["flash_attn"] = session.info.flash_attn
        text = "<|im_start|>system\nYou are a careful data analyst. "
        prompt = session.tokenize(text * (cfg["depth"] // 8 + 8))[: cfg["depth"]]
        session.eval(prompt)
        session.generate(params=SamplingParams(greedy=True), max_tokens=4)  # warm-up
        session.reset()
        session.eval(prompt)
        completion = session.generate(params=SamplingParams(greedy=True), max_tokens=cfg["tokens"])
        t = completion.timings
        out["decode_tok_s"] = round(t.generated_tokens / t.generate_s, 2)
        out["tokens"] = completion.tokens
        out["decode_threads"] = completion.timings.threads_json().get("decode", {})
        if cfg["episode"]:
            result = agent.ask(QUESTION, CHINOOK, greedy=True, knowledge=False)  # resets the session first
            out["episode_tok_s"] = round(session.timings.generated_tokens / session.timings.generate_s, 2)
            out["episode_tokens"] = session.timings.generated_tokens
            out["episode_sql"] = result.sql
            out["episode_threads"] = result.stats.to_json().get("threads")
    return out


def measure(model: Path, name: str, args: argparse.Namespace) -> dict:
    env_extra, threads, adapt, flash = CANDIDATES[name]
    env = {k: v for k, v in os.environ.items() if k not in _CLEARED} | env_extra
    cfg = {"model": str(model), "threads": threads, "adapt": adapt, "flash": flash}
    cfg |= {"tokens": args.tokens, "depth": args.depth, "episode": args.episode}
    cmd = [sys.executable, "-m", __spec__.name, "--child", json.dumps(cfg)]
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {args.timeout:.0f} s"}
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1][:200]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def combined(runs: list[dict]) -> dict:
    """One candidate's repeats as one row: the run of median decode rate, with each rate the
    median over the runs and every run's figures kept (`runs`); an error when any run failed."""
    failed = [run for run in runs if "error" in run]
    if failed:
        return failed[0]
    ordered = sorted(runs, key=lambda run: run["decode_tok_s"])
    row = dict(ordered[(len(ordered) - 1) // 2])
    for kind in ("decode_tok_s", "episode_tok_s"):
        if kind in row:
            row[kind] = round(statistics.median(run[kind] for run in runs), 2)
    row["runs"] = [{k: v for k, v in run.items() if k not in ("tokens", "episode_sql")} for run in runs]
    row["tokens_same_in_every_run"] = len({json.dumps(run.get("tokens")) for run in runs}) == 1
    return row


def report(results: dict, args: argparse.Namespace) -> str:
    lines = [
        f"# Decode on a busy machine ({time.strftime('%Y-%m-%d')})",
        "",
        f"Machine: {machine_line()}.",
        "",
        "Command: `python -m benchmarks.runtime.bench_busy " + shlex.join(sys.argv[1:]) + "`",
        "",
    ]
    for model, by_load in results.items():
        loads = sorted(by_load)
        kinds = ["decode_tok_s"] + (["episode_tok_s"] if args.episode else [])
        for kind in kinds:
            lines += [
                f"## {Path(model).name}: {kind.replace('_tok_s', '')} tok/s",
                "",
                "| candidate | " + " | ".join(f"{n} busy" for n in loads) + " |",
                "|---|" + "--:|" * len(loads),
            ]
            for name in args.candidates:
                cells = []
                for n in loads:
                    row = by_load[n].get(name, {})
                    cells.append("error" if "error" in row else f"{row.get(kind, float('nan')):.2f}")
                lines.append(f"| {name} | " + " | ".join(cells) + " |")
            lines.append("")
        adapted = [
            f"{n} busy: {by_load[n]['edge-sql'].get('decode_threads')}"
            for n in loads
            if "decode_threads" in by_load[n].get("edge-sql", {})
        ]
        if adapted:
            lines += ["edge-sql's decode tokens per thread count: " + "; ".join(adapted) + ".", ""]
        decoded_rows = [(name, row) for rows in by_load.values() for name, row in rows.items() if "tokens" in row]
        for flash in sorted({row["flash_attn"] for _, row in decoded_rows}):
            rows_here = [(name, row) for name, row in decoded_rows if row["flash_attn"] == flash]
            decoded = {json.dumps(row["tokens"]) for _, row in rows_here}
            unstable = sorted({name for name, row in rows_here if not row.get("tokens_same_in_every_run", True)})
            same = "yes" if len(decoded) == 1 and not unstable else f"no ({len(decoded)} different"
            if same != "yes":
                same += f"; differing between repeats: {', '.join(unstable)})" if unstable else ")"
            lines += [f"Greedy tokens the same in every row with flash attention {flash}: {same}.", ""]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--busy", nargs="+", type=int, default=[0, 1, 2], help="competing processes (default 0 1 2)")
    parser.add_argument("--candidates", nargs="+", default=list(CANDIDATES), choices=list(CANDIDATES))
    parser.add_argument("--tokens", type=int, default=48, help="greedy tokens decoded (default 48)")
    parser.add_argument(
        "--depth",
        type=int,
        default=64,
        help="prompt tokens before the decode (default 64; from 257 on, flash attention's sums depend on the thread count)",
    )
    parser.add_argument("--episode", action="store_true", help="also one bounded agent episode per child")
    parser.add_argument(
        "--repeat", type=int, default=1, help="children per candidate and load, in turn; the report gives medians"
    )
    parser.add_argument("--timeout", type=float, default=600, help="seconds a child may take")
    parser.add_argument("--out", type=Path, help="write the Markdown report here (and FILE.json)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return 0
    if not args.models:
        parser.error("give at least one model file")
    from edge_sql.runtime.tuning.busy import BusyPrograms

    results: dict[str, dict[int, dict[str, dict]]] = {}
    for model in args.models:
        by_load = results.setdefault(str(model), {})
        for n in args.busy:
            runs: dict[str, list[dict]] = {name: [] for name in args.candidates}
            with BusyPrograms(n):
                for _ in range(args.repeat):  # the candidates in turn, so drifts of the machine hit them alike
                    for name in args.candidates:
                        row = measure(model, name, args)
                        runs[name].append(row)
                        shown = {k: v for k, v in row.items() if k not in ("tokens", "episode_sql")}
                        print(f"{model.name} busy={n} {name}: {shown}", file=sys.stderr, flush=True)
            by_load[n] = {name: combined(rows) for name, rows in runs.items()}
    text = report(results, args)
    print(text)
    if args.out:
        write_results(args.out, text)
        write_results(args.out.with_suffix(".json"), json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
