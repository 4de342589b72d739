"""Episode throughput of the local bench runner against the Ray runner with 1 and 2 workers.

Usage: python -m benchmarks.episodes.bench_ray MODEL.gguf [--questions 8] [--rounds 2] [--one-thread-only]
                                   [--out benchmarks/results/ray.md]

One variant (the given file, run as the bench's reference) answers the same bundled questions
(schema withheld, seed 0, small budgets) five ways, each into a fresh results file:

- local, 1 thread and local, 2 threads: the default runner (one child process loads the
  model and runs every episode);
- Ray, 1 worker of 1 CPU (the same work as local with 1 thread: the difference is Ray's cost);
- Ray, 2 workers of 1 CPU each, sharing the questions;
- Ray, 1 worker of 2 CPUs (2 llama.cpp threads).

Wall time covers the episode phase only, model loads included (fidelity is not run); Ray's
own start-up (`ray.init`) is timed apart. Throughput is episodes per minute. The scheduling
overhead per episode is the driver's round trip of a call minus the actor's own time for it
(calls that also loaded the model left out). The episodes' answers must be identical in every
run (same seeds): the script checks that. Writes a Markdown table with the machine's `lscpu`.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.common.bench_machine import machine_detail, write_results
from edge_sql.api.agent_settings import AgentSettings
from edge_sql.bench.config import BenchConfig
from edge_sql.bench.local_runner import _run_episodes
from edge_sql.bench.results import RESULTS_FILE_NAME, ResultsLog
from edge_sql.bench.runner import spread_by_difficulty
from edge_sql.bench.variants import REFERENCE, Variant
from edge_sql.evaluation.datasets import load_dataset

BUDGET = {
    "max_rounds": 1,
    "max_think_tokens": 8,
    "max_final_think_tokens": 8,
    "max_calls_per_turn": 1,
    "max_final_sql_tokens": 24,
    "max_sql_chars": 48,
    "max_name_chars": 24,
    "max_tokens": 4096,
}


def _answers(results: ResultsLog) -> dict[tuple[str, str], tuple]:
    return {
        (r["mode"], r["question_id"]): (r["sql"], r["correct"], r["transcript_tokens"])
        for r in results.records("episode")
    }


def run(
    model: Path, questions: int, rounds: int, work: Path, one_thread_only: bool = False
) -> tuple[list[dict], float]:
    import ray

    from edge_sql.cluster.bench import run_episodes_on_ray

    picked = spread_by_difficulty(load_dataset("bundled"), questions)
    variant = Variant(REFERENCE, model)
    rows: list[dict] = []
    started = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    ray_init_s = time.perf_counter() - started
    ways = [
        ("local, 1 process x 1 thread", None, 1, None),
        ("Ray, 1 worker x 1 CPU", "local", 1, 1),
        ("Ray, 2 workers x 1 CPU", "local", 1, 2),
        ("local, 1 process x 2 threads", None, 2, None),
        ("Ray, 1 worker x 2 CPUs", "local", 2, 1),
    ]
    # every way once per round, the order reversed in every other round: drift on a shared machine
    # then shows as the spread between a way's rows instead of favouring whichever ran first
    if one_thread_only:  # a big model on a busy 2-core machine: two-thread rows would take hours
        ways = [way for way in ways if way[2] == 1]
    plan = [(n, way) for n in range(rounds) for way in (ways if n % 2 == 0 else ways[::-1])]
    try:
        for round_, (label, address, threads, workers) in plan:
            out = work / f"{round_}-{label.replace(' ', '_').replace(',', '')}"
            config = BenchConfig(
                out_dir=out,
                base=model,
                modes=["withheld"],
                episodes=AgentSettings(n_threads=threads, n_ctx=4096),
                budget=BUDGET,
                ray=address,
                ray_workers=workers,
            )
            results = ResultsLog(out / RESULTS_FILE_NAME)
            results.clear()
            overheads: list[float] = []
            started = time.perf_counter()
            if address is None:
                ran = _run_episodes(config, variant, picked, results, out, print)
            else:
                ran = run_episodes_on_ray(config, [variant], picked, results, log=print, overheads=overheads)
            wall = time.perf_counter() - started
            episodes = list(results.records("episode"))
            rows.append(
                {
                    "way": label,
                    "round": round_ + 1,
                    "episodes": ran,
                    "wall_s": wall,
                    "per_minute": 60 * ran / wall,
                    "episode_s": sum(e["wall_s"] for e in episodes) / len(episodes),
                    "load_s": [r["load_s"] for r in results.records("load")],
                    "peak_mb": [r["peak_rss_bytes"] / 1e6 for r in results.records("peak")],
                    "overhead_ms": 1000 * statistics.median(overheads) if overheads else None,
                    "overhead_max_ms": 1000 * max(overheads) if overheads else None,
                    "answers": _answers(results),
                }
            )
            print(rows[-1]["way"], f"{rows[-1]['per_minute']:.1f} episodes/min")
    finally:
        ray.shutdown()
    reference = rows[0]["answers"]
    for row in rows:
        if row["answers"] != reference:
            raise SystemExit(f"{row['way']}: answers differ from the local runner's")
    return rows, ray_init_s


def table(
    rows: list[dict], ray_init_s: float, model: Path, questions: int, rounds: int, one_thread_only: bool = False
) -> str:
    lines = [
        "# Bench episodes: local runner vs Ray runner",
        "",
        f"`python -m benchmarks.episodes.bench_ray {model.name} --questions {questions} --rounds {rounds}"
        f"{' --one-thread-only' if one_thread_only else ''}`: "
        f"{questions} bundled questions, "
        "schema withheld, seed 0, one tool round, 8 think tokens, 4k context; one variant "
        f"({model.name}, {model.stat().st_size / 1e6:.0f} MB). Wall time of the episode phase, "
        "model loads included; the answers were identical in every row (checked). Each way ran once per "
        "round, in reversed order in every other round.",
        "",
        "**The machine was shared with other engineers' jobs while this ran: figures are noisy; compare "
        "the rows of this one run with each other, not with other files.**",
        "",
        "| runner | round | episodes | wall s | episodes/min | mean episode s | model load s | peak RSS MB "
        "| Ray overhead per episode, median (max) ms |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for row in sorted(rows, key=lambda r: ([w["way"] for w in rows].index(r["way"]), r["round"])):
        overhead = "n/a" if row["overhead_ms"] is None else f"{row['overhead_ms']:.1f} ({row['overhead_max_ms']:.1f})"
        loads = ", ".join(f"{s:.2f}" for s in row["load_s"])
        lines.append(
            f"| {row['way']} | {row['round']} | {row['episodes']} | {row['wall_s']:.1f} | {row['per_minute']:.1f} "
            f"| {row['episode_s']:.2f} | {loads} | {', '.join(f'{m:.0f}' for m in row['peak_mb'])} "
            f"| {overhead} |"
        )
    lines += [
        "",
        f"`ray.init(num_cpus=2)` took {ray_init_s:.1f} s (once per run, not in the rows).",
        "",
        "Machine:",
        "",
        "```",
        machine_detail(),
        "```",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path, help="a GGUF file (e.g. the tests' fixture model)")
    parser.add_argument("--questions", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--one-thread-only", action="store_true", help="only the ways with 1-CPU workers")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/ray.md"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as work:
        rows, ray_init_s = run(args.model.resolve(), args.questions, args.rounds, Path(work), args.one_thread_only)
    text = table(rows, ray_init_s, args.model, args.questions, args.rounds, args.one_thread_only)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_results(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
