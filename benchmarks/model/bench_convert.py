"""Benchmark conversion and quantization on a random-weight checkpoint of the real 2B shape.

Usage:
    python -m benchmarks.model.bench_convert [--checkpoint DIR] [--llama-cpp-converter convert_hf_to_gguf.py]
        [--types Q8_0,...] [--threads 2] [--out benchmarks/results/convert.md]

Measures, each step in its own child process (wall time, and peak RSS from the child's own
rusage via os.wait4):
  1. `edge-sql convert` HF BF16 -> GGUF BF16;
  2. llama.cpp's own convert_hf_to_gguf.py on the same checkpoint (if given: it ships in the
     llama-cpp-python sdist under vendor/llama.cpp; both converters keep the MTP head by
     default, so both files hold the same tensors), then checks that both GGUFs hold the same
     tensors (names, shapes, types, bytes);
  3. `edge-sql quantize` from our BF16 GGUF to each type and recipe: time and file size.
Leaves in benchmarks/work/: the checkpoint, qwen3.5-2b-random-bf16.gguf and
qwen3.5-2b-random-Q4_K_M.gguf (reused by the runtime benchmarks); other outputs are deleted.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import os
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common.bench_machine import machine_detail, write_results

REPO = Path(__file__).resolve().parents[2]
WORK = REPO / "benchmarks" / "work"
DEFAULT_TYPES = "Q8_0,Q6_K,Q5_K_M,Q4_K_M,Q4_0,IQ4_XS,Q3_K_M,Q4_K_M-sensitive-q8,Q3_K_M-sensitive-q8"
KEEP = {"Q4_K_M"}


@dataclass
class Measured:
    label: str
    command: list[str]
    seconds: float
    peak_rss: int  # bytes
    size: int  # output file bytes


def run_measured(label: str, command: list[str], output: Path, log: Path, env: dict | None = None) -> Measured:
    """Run `command` as a child; its wall time and its own peak RSS (ru_maxrss of that child)."""
    print(f"[{label}] {shlex.join(command)}", file=sys.stderr, flush=True)
    with open(log, "ab") as log_file:
        start = time.perf_counter()
        proc = subprocess.Popen(command, stdout=log_file, stderr=log_file, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{label} failed (exit {proc.returncode}); see {log}")
    return Measured(label, command, seconds, usage.ru_maxrss * 1024, output.stat().st_size)


def compare_gguf(ours: Path, theirs: Path) -> str:
    """Same tensor names, shapes, storage types and bytes? One line of findings."""
    from edge_sql.convert.gguf_file import read_gguf

    a, b = read_gguf(ours), read_gguf(theirs)
    if set(a.tensors) != set(b.tensors):
        return f"tensor sets differ: only ours {sorted(set(a.tensors) - set(b.tensors))[:5]}, only theirs {sorted(set(b.tensors) - set(a.tensors))[:5]}"
    meta_diff = sorted(
        k for k in set(a.tensors) if (a.tensors[k].shape, a.tensors[k].type) != (b.tensors[k].shape, b.tensors[k].type)
    )
    if meta_diff:
        return f"shapes/types differ for {len(meta_diff)} tensors, e.g. {meta_diff[:3]}"
    differing = [name for name in a.tensors if _digest(a, name) != _digest(b, name)]
    only_keys = sorted(set(a.metadata) ^ set(b.metadata))
    summary = f"{len(a.tensors)} tensors with identical names, shapes and types; bytes identical for {len(a.tensors) - len(differing)}"
    if differing:
        summary += f" (differ: {', '.join(differing[:6])}{'...' if len(differing) > 6 else ''})"
    return summary + f"; metadata keys in only one file: {', '.join(only_keys) or 'none'}"


def _digest(layout, name: str) -> str:
    entry = layout.tensors[name]
    h = hashlib.sha1()
    with open(layout.path, "rb") as f:
        f.seek(entry.offset)
        left = entry.nbytes
        while left:
            chunk = f.read(min(left, 64 << 20))
            h.update(chunk)
            left -= len(chunk)
    return h.hexdigest()


def versions() -> str:
    from importlib.metadata import version

    return (
        ", ".join(f"{p} {version(p)}" for p in ("llama-cpp-python", "gguf", "numpy", "torch"))
        + f", Python {platform.python_version()}"
    )


def gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, default=WORK / "qwen3.5-2b-random")
    parser.add_argument(
        "--llama-cpp-converter",
        type=Path,
        default=None,
        help="llama.cpp's convert_hf_to_gguf.py (its gguf-py must sit next to it)",
    )
    parser.add_argument("--types", default=DEFAULT_TYPES)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "convert.md")
    args = parser.parse_args()
    python = sys.executable
    script = Path(python).with_name("edge-sql")
    edge_sql = [str(script)] if script.exists() else ["edge-sql"]
    WORK.mkdir(parents=True, exist_ok=True)
    log = WORK / "bench_convert.log"
    log.write_text("")
    if not (args.checkpoint / "model.safetensors.index.json").is_file():
        subprocess.run([python, str(REPO / "benchmarks" / "make_2b_checkpoint.py"), str(args.checkpoint)], check=True)

    bf16 = WORK / "qwen3.5-2b-random-bf16.gguf"
    ours = run_measured(
        "edge-sql convert",
        [*edge_sql, "convert", str(args.checkpoint), "-o", str(bf16), "--outtype", "bf16", "--force", "--no-progress"],
        bf16,
        log,
    )
    rows = [ours]
    comparison = None
    if args.llama_cpp_converter:
        ref = WORK / "llama-cpp-converter-bf16.gguf"
        env = {**os.environ, "PYTHONPATH": str(args.llama_cpp_converter.parent / "gguf-py")}
        rows.append(
            run_measured(
                "llama.cpp convert_hf_to_gguf.py",
                [
                    python,
                    str(args.llama_cpp_converter),
                    str(args.checkpoint),
                    "--outtype",
                    "bf16",
                    "--outfile",
                    str(ref),
                ],
                ref,
                log,
                env=env,
            )
        )
        comparison = compare_gguf(bf16, ref)
        ref.unlink()

    quants = []
    for qtype in args.types.split(","):
        out = WORK / f"qwen3.5-2b-random-{qtype}.gguf"
        quants.append(
            run_measured(
                qtype,
                [
                    *edge_sql,
                    "quantize",
                    str(bf16),
                    "--type",
                    qtype,
                    "-o",
                    str(out),
                    "--threads",
                    str(args.threads),
                    "--force",
                ],
                out,
                log,
            )
        )
        if qtype not in KEEP:
            out.unlink()

    lines = [
        "# Conversion and quantization benchmark (random weights, real Qwen3.5-2B shape)",
        "",
        f"Run {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC with `{shlex.join([Path(python).name, *sys.argv])}`.",
        f"Checkpoint: `{args.checkpoint.relative_to(REPO) if args.checkpoint.is_relative_to(REPO) else args.checkpoint}` "
        "made by `benchmarks/model/make_2b_checkpoint.py` (BF16 safetensors, sharded, with MTP and a small vision tower).",
        f"Versions: {versions()}. Each step runs as its own child process; peak RSS is that child's ru_maxrss.",
        "The machine is shared with other work: absolute times drift; compare figures from the same run.",
        "",
        "## HF BF16 -> GGUF BF16",
        "",
        "| converter | wall time | peak RSS | output |",
        "|---|--:|--:|--:|",
    ]
    lines += [f"| {r.label} | {r.seconds:.1f} s | {gb(r.peak_rss)} | {gb(r.size)} |" for r in rows]
    if comparison:
        lines += ["", f"Output comparison (ours vs llama.cpp's, both with the MTP head): {comparison}."]
    lines += [
        "",
        f"## Quantization from our BF16 GGUF (`edge-sql quantize`, {args.threads} threads)",
        "",
        "| type / recipe | wall time | peak RSS | file size |",
        "|---|--:|--:|--:|",
    ]
    lines += [f"| {q.label} | {q.seconds:.1f} s | {gb(q.peak_rss)} | {gb(q.size)} |" for q in quants]
    lines += ["", "## Machine", "", "```", machine_detail().rstrip(), "```", ""]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_results(args.out, "\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
