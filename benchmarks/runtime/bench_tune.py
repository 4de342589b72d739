"""Benchmark of issue 11: calibration on the 2B shape, and the shared prompt prefix evaluated once.

Usage: python -m benchmarks.runtime.bench_tune MODEL.gguf [--out benchmarks/results/tune.md] [--sweep-points 512,4096]
       [--steps ttft,full,sweep] [--speculate-rows fitted,8] [--machine "..."]

Steps (each in a fresh process, so peak RSS is that step's own):
1. the quick calibration `edge-sql run` does on first use: its time and table;
2. the sweep (every candidate of `edge-sql tune`, at the given points): its table, and the
   episode-profile time of the quick choice, the sweep's best and today's defaults (flash
   attention auto = on, n_ubatch 256), all predicted from the sweep's measurements;
3. time to the first generated token for a first and a second question in one process (the
   second restores the prompt prefix from memory) and in a fresh process with the disk cache
   warm;
4. peak RSS at a full 12,288-token context, sampled (not estimated) for the chosen settings and
   today's defaults, each in a fresh process, against calibration's bound and file + 400 MiB.
Figures on a shared machine are noisy: compare ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common.bench_machine import machine_detail, write_results

REPO = Path(__file__).resolve().parents[2]
QUESTIONS = ["How many albums does each artist have?", "Which customers live in France?"]


def _child(step: str, model: str, extra: dict) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", __spec__.name, "--child", step, model, json.dumps(extra)],
        capture_output=True,
        text=True,
        check=False,
    )
    sys.stderr.write(out.stderr[-3000:])
    if out.returncode != 0:
        raise SystemExit(f"step {step} failed ({out.returncode})")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def child_calibrate(model: str, extra: dict) -> dict:
    from edge_sql.commands.tune import calibration_table
    from edge_sql.runtime.tuning import calibrate

    full = extra["full"]
    points = extra.get("points")
    started = time.perf_counter()
    result = calibrate(
        model,
        full=full,
        points=points,
        prefill_chunk=extra.get("chunk"),
        progress=lambda m: print(f"{time.perf_counter() - started:6.1f} s  {m}", file=sys.stderr, flush=True),
    )
    return {"calibration": result.to_json(), "table": calibration_table(result), "peak_rss": _peak()}


def _prefix_and_question(session, question: str) -> tuple[list[int], list[int]]:
    """The episode's opening as `_Episode._open` builds it: shared pieces, then the question's."""
    from edge_sql.agent.budget import Budget
    from edge_sql.agent.prompt import load_prompt

    shared, own = load_prompt().opening(question, None, max_rounds=Budget().max_rounds)
    ids = lambda pieces: [t for text, special in pieces for t in session.tokenize(text, special=special)]
    return ids(shared), ids(own)


def child_ttft(model: str, extra: dict) -> dict:
    from edge_sql.runtime import PrefixCache, SamplingParams, Session
    from edge_sql.runtime.tuning import Settings

    settings = Settings(**extra["settings"])
    started = time.perf_counter()
    session = Session(
        model,
        settings.session_options(n_ctx=12288),
        prefix_cache=PrefixCache(
            extra["cache_dir"] if extra["cache"] else None, log=lambda m: print(m, file=sys.stderr)
        ),
    )
    load_s = time.perf_counter() - started
    rows = []
    for question in extra["questions"]:
        session.reset()
        prefix, own = _prefix_and_question(session, question)
        tick = time.perf_counter()
        if extra["cache"]:
            session.shared_prefix(prefix)
        session.eval(prefix + own)
        session.generate(params=SamplingParams(seed=0), max_tokens=1)
        rows.append(
            {
                "question": question,
                "ttft_s": time.perf_counter() - tick,
                "restored": session.timings.restored_tokens,
                "evaluated": session.timings.prompt_tokens,
            }
        )
    return {
        "load_s": load_s,
        "rows": rows,
        "peak_rss": _peak(),
        "buffer_bytes": session.info.buffer_bytes,
        "file_bytes": session.info.model_bytes,
        "settings": session.info.settings,
    }


def child_full_context(model: str, extra: dict) -> dict:
    """Fill a 12,288-token context (prefill in n_batch chunks, then decode to the end) and
    return the process's peak RSS: what calibration's memory bound estimates."""
    import numpy as np

    from edge_sql.runtime import Session
    from edge_sql.runtime.options import DEFAULT_DRAFT_MAX
    from edge_sql.runtime.tuning import EPISODE_TOKENS, Settings

    settings = Settings(**{**extra["settings"], "draft_max": extra.get("draft_max", DEFAULT_DRAFT_MAX)})
    speculation = extra.get("speculate")
    with Session(model, settings.session_options(speculation or "off", n_ctx=EPISODE_TOKENS)) as session:
        tokens = np.random.default_rng(0).integers(0, 100_000, EPISODE_TOKENS - 1).tolist()  # the last cell stays free
        tick = time.perf_counter()
        session.eval(tokens[: -extra["decode"]])
        prefill_s = time.perf_counter() - tick
        tick = time.perf_counter()
        for token in tokens[-extra["decode"] :]:
            session.eval([token])
        decode_s = time.perf_counter() - tick
        label = settings.label + (
            f" speculate={extra['speculate']} draft_max={extra['draft_max']}" if speculation else ""
        )
        return {
            "settings": label,
            "tokens": len(session.tokens),
            "peak_rss": _peak(),
            "file_bytes": session.info.model_bytes,
            "buffer_bytes": session.info.buffer_bytes,
            "prefill_tok_s": (len(tokens) - extra["decode"]) / prefill_s,
            "decode_tok_s": extra["decode"] / decode_s,
        }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "tune.md")
    parser.add_argument("--sweep-points", default="512,4096")
    parser.add_argument("--sweep-chunk", type=int, default=512, help="prefill tokens timed at each point")
    parser.add_argument("--sweep-json", type=Path, help="compare the quick choice with this saved sweep (*.sweep.json)")
    parser.add_argument(
        "--steps",
        default="ttft,full,sweep",
        help="what to run after the quick calibration (comma list of ttft, full, sweep)",
    )
    parser.add_argument(
        "--speculate-rows",
        default="",
        metavar="K,...",
        help="also fill the full context with speculation on (lookup) at these draft_max values "
        "('fitted': the one calibration chose)",
    )
    parser.add_argument(
        "--machine",
        default="2-core Intel Xeon with AMX (KVM), 24 GB",
        help="how the result file describes the machine (and whether it was shared)",
    )
    args = parser.parse_args()
    from edge_sql.commands.tune import calibration_table
    from edge_sql.runtime.tuning import CACHE_VERSION, Calibration, Settings, episode_profile, predict

    lines = [
        f"# Tuning benchmark: {Path(args.model).name}",
        "",
        f"Command: `python -m benchmarks.runtime.bench_tune {' '.join(sys.argv[1:])}`",
        f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        "",
        f"Machine: {args.machine}. Load average when it started: {os.getloadavg()[0]:.1f}.",
        "",
        "```",
        machine_detail(),
        "```",
        "",
    ]

    def write() -> None:
        write_results(args.out, "\n".join(lines))

    steps = set(args.steps.split(","))
    quick = _child("calibrate", args.model, {"full": False})
    qc = Calibration.from_json(quick["calibration"])
    lines += [
        "## Quick calibration (what the first `edge-sql run` does)",
        "",
        f"{qc.seconds:.1f} s wall (target < 60 s on a quiet machine); peak RSS {quick['peak_rss'] / 2**20:.0f} MiB; "
        f"chose `{qc.chosen.label}`.",
        "",
        "```",
        quick["table"],
        "```",
        "",
    ]
    write()
    if "ttft" in steps:
        with tempfile.TemporaryDirectory() as cache_dir:
            extra = {"settings": qc.chosen.__dict__, "cache_dir": cache_dir, "questions": QUESTIONS}
            plain = _child("ttft", args.model, {**extra, "cache": False, "questions": QUESTIONS[:1]})
            first = _child("ttft", args.model, {**extra, "cache": True})
            fresh = _child("ttft", args.model, {**extra, "cache": True, "questions": QUESTIONS[1:]})
        lines += [
            "## Time to the first token, settings `" + first["settings"] + "`",
            "",
            "| case | prompt tokens evaluated | restored | time to first token s |",
            "|---|--:|--:|--:|",
        ]
        cases = [
            ("no prefix cache (before this change)", plain["rows"][0]),
            ("first question in a process (prefix evaluated, saved)", first["rows"][0]),
            ("second question, same process (restored from memory)", first["rows"][1]),
            ("fresh process, disk cache warm (restored from disk)", fresh["rows"][0]),
        ]
        for name, row in cases:
            lines.append(f"| {name} | {row['evaluated']} | {row['restored']} | {row['ttft_s']:.2f} |")
        bound = first["file_bytes"] + first["buffer_bytes"]
        lines += [
            "",
            f"Peak RSS of the two-question process: {first['peak_rss'] / 2**20:.0f} MiB (file "
            f"{first['file_bytes'] / 2**20:.0f} MiB + {(first['peak_rss'] - first['file_bytes']) / 2**20:.0f} MiB; "
            f"the context is filled to ~{first['rows'][0]['evaluated'] + first['rows'][0]['restored']} tokens only); "
            f"calibration's bound for a full 12,288-token context: file + llama.cpp buffers "
            f"{first['buffer_bytes'] / 2**20:.0f} MiB + the process's own memory = at least {bound / 2**20:.0f} MiB.",
            f"Python {platform.python_version()}.",
            "",
        ]
        write()
    if "full" in steps:
        lines += [
            "## Peak RSS at a full 12,288-token context (sampled, each a fresh process)",
            "",
            "| settings | tokens | peak RSS MiB | beyond the file MiB | calibration's bound beyond the file MiB | "
            "prefill tok/s | decode tok/s at the end |",
            "|---|--:|--:|--:|--:|--:|--:|",
        ]
        rows = [
            ({"settings": settings.__dict__}, settings)
            for settings in dict.fromkeys([qc.chosen, Settings(None, 256, qc.chosen.n_threads)])
        ]
        drafts = [
            int(k) for k in filter(None, args.speculate_rows.replace("fitted", str(qc.chosen.draft_max)).split(","))
        ]
        rows += [
            ({"settings": {**qc.chosen.__dict__, "draft_max": k}, "speculate": "lookup", "draft_max": k}, qc.chosen)
            for k in dict.fromkeys(drafts)
            if k
        ]
        for extra, settings in rows:
            full = _child("full_context", args.model, {**extra, "decode": 16})
            measured = next((m for m in qc.measurements if m.settings == settings and "speculate" not in extra), None)
            bound = f"{measured.memory_bytes / 2**20:.0f}" if measured else "-"
            lines.append(
                f"| `{full['settings']}` | {full['tokens']} | {full['peak_rss'] / 2**20:.0f} | "
                f"{(full['peak_rss'] - full['file_bytes']) / 2**20:.0f} | {bound} | "
                f"{full['prefill_tok_s']:.1f} | {full['decode_tok_s']:.1f} |"
            )
            write()
        lines += [
            "",
            "Budget: file + 400 MiB. The bound counts the process's memory before loading, what loading "
            "adds besides the mapping, and llama.cpp's context buffers. Rows with `speculate`: the chosen "
            f"setting with lookup speculation on (calibration fitted draft_max {qc.chosen.draft_max} to the budget).",
            "",
        ]
        write()
    if "sweep" in steps or args.sweep_json:
        if args.sweep_json:  # a sweep saved by an earlier run on this machine: the quick choice against it
            saved = json.loads(args.sweep_json.read_text(encoding="utf-8"))
            saved["version"] = CACHE_VERSION  # the format is the same; the version only retires cached choices
            saved.pop("threads", None)  # before version 5: the thread count a caller fixed
            sweep = {"calibration": saved, "peak_rss": 0}
            sweep["table"] = calibration_table(Calibration.from_json(sweep["calibration"]))
            points = Calibration.from_json(sweep["calibration"]).measurements[0].points
            lines += [f"Sweep: the one saved in `{args.sweep_json.name}` (measured earlier on this machine).", ""]
        else:
            points = [int(p) for p in args.sweep_points.split(",")]
            sweep = _child("calibrate", args.model, {"full": True, "points": points, "chunk": args.sweep_chunk})
            write_results(args.out.with_suffix(".sweep.json"), json.dumps(sweep["calibration"], indent=1))
        sc = Calibration.from_json(sweep["calibration"])
        profile = episode_profile()
        by = {m.settings: m for m in sc.measurements}
        fitting = [m for m in sc.measurements if m.fits]
        best = min(fitting or sc.measurements, key=lambda m: m.episode_s)
        rows = {
            "sweep's best (within memory)": best,
            "quick calibration's choice": by.get(qc.chosen),
            "today's defaults (flash attention on, ubatch 256)": by.get(Settings(True, 256, best.settings.n_threads)),
        }
        lines += [
            "## Sweep (`edge-sql tune`)",
            "",
            f"Points {points}, prefill chunk {args.sweep_chunk}, {sc.seconds:.1f} s wall; peak RSS {sweep['peak_rss'] / 2**20:.0f} MiB.",
            "",
            "```",
            sweep["table"],
            "```",
            "",
            "Episode profile (six rounds growing to 12,288 tokens), predicted from the sweep's measurements:",
            "",
            "| setting | episode s | vs best |",
            "|---|--:|--:|",
        ]
        for name, m in rows.items():
            if m is not None:
                lines.append(
                    f"| {name}: `{m.settings.label}` | {predict(m, profile):.0f} | "
                    f"{predict(m, profile) / predict(best, profile) - 1:+.1%} |"
                )
        lines.append("")
    write()
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        step, model, extra = sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
        result = {"calibrate": child_calibrate, "ttft": child_ttft, "full_context": child_full_context}[step](
            model, extra
        )
        print(json.dumps(result))
        raise SystemExit(0)
    raise SystemExit(main())
