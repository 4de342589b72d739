"""Run `edge-sql bench` on the random-weight model of the real 2B shape, with the committed settings.

Usage: python -m benchmarks.model.bench_variants BF16.gguf [--out benchmarks/results/variants] [--work DIR]

The settings are small so that six variants x two modes fit in about half an hour on a
2-core machine: two bundled questions per mode, one tool round, short think and SQL bounds,
a 4k context, fidelity on the first 640 tokens of each BF16 transcript. Quantized files go
to `--work` (not into the results folder). Besides the bench's own reports the script writes
`machine.txt` (lscpu, free -g) and `command.txt` (the exact command line) into `--out`.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from benchmarks.common.bench_machine import machine_detail

SETTINGS = [
    "--variants",
    "BF16,Q8_0,Q6_K,Q5_K_M,Q4_K_M,Q4_K_M-sensitive-q8",
    "--dataset",
    "bundled",
    "--limit",
    "2",
    "--modes",
    "withheld,given",
    "--seed",
    "0",
    "--threads",
    "2",
    "--ctx",
    "4096",
    "--episode-tokens",
    "4096",
    "--max-rounds",
    "1",
    "--think-tokens",
    "24",
    "--calls-per-turn",
    "2",
    "--budget",
    "max_final_sql_tokens=48",
    "--budget",
    "max_sql_chars=160",
    "--fidelity-tokens",
    "640",
    "--note",
    "Random-weight model of the real 2B shape: speed and memory are the real model's; KL, top-1 "
    "and answer agreement rank the variants, they do not predict the trained model's accuracy",
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", type=Path, help="the 2B-shape BF16 GGUF")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/variants"))
    parser.add_argument(
        "--work",
        type=Path,
        default=Path("benchmarks/work/bench"),
        help="where the results file and the quantized files live (not committed)",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    command = ["edge-sql", "bench", "--base", str(args.base), *SETTINGS, "--out", str(args.work)]
    (args.out / "command.txt").write_text(shlex.join(command) + "\n", encoding="utf-8")
    (args.out / "machine.txt").write_text(machine_detail(), encoding="utf-8")
    executable = Path(sys.executable).with_name("edge-sql")
    status = subprocess.call([str(executable) if executable.exists() else "edge-sql", *command[1:]])
    for name in ("bench.json", "bench.md", "accuracy_vs_size.png", "decode_speed_vs_size.png"):
        if (args.work / name).is_file():
            shutil.copy2(args.work / name, args.out / name)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
