"""How long `edge-sql` takes to start: `--help`, `config`, and a verified answer (`run
--question` answered at once from a verified answer, no model loaded), each a new process, beside
`python -c pass` in the same rounds (interleaved, so a busy machine slows all alike). Each runs
as an installed package does, from .pyc files (written in a warm-up run under a temporary
PYTHONPYCACHEPREFIX, whatever PYTHONDONTWRITEBYTECODE says).

Prints the median wall time of each over the rounds and the part above `python -c pass`; with
`--out`, writes the same as a Markdown file with the machine line.

    .venv/bin/python -m benchmarks.startup.bench_startup --rounds 15 --out benchmarks/results/startup.md
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common.bench_machine import machine_line, write_results

REPO = Path(__file__).resolve().parents[2]
CHINOOK = REPO / "edge_sql" / "data" / "chinook" / "chinook.sqlite"
QUESTION = "How many albums are there?"
GOALS = {"--help": 0.3, "config": 0.3, "verified answer": 0.5}  # issue 65's goals, seconds of wall time


def commands(db: Path) -> dict[str, list[str]]:
    cli = [sys.executable, "-m", "edge_sql"]
    return {
        "python -c pass": [sys.executable, "-c", "pass"],
        "--help": [*cli, "--help"],
        "config": [*cli, "config"],
        "verified answer": [*cli, "run", "--db", str(db), "--question", QUESTION],
    }


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}):\n{done.stderr}")
    return elapsed


def measure(rounds: int) -> dict[str, list[float]]:
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        db = work / "chinook.sqlite"
        shutil.copyfile(CHINOOK, db)
        env = {**os.environ, "EDGE_SQL_HOME": str(work / "home"), "PYTHONPATH": str(REPO)}
        # as installed: compiled once (pip writes .pyc files), not compiled on every start
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
        verify = [sys.executable, "-m", "edge_sql", "notes", "verify", "--db", str(db), QUESTION]
        subprocess.run([*verify, "SELECT COUNT(*) FROM Album"], env=env, check=True, capture_output=True, timeout=120)
        argvs = commands(db)
        for argv in argvs.values():  # once each first: the page cache, the .pyc files written
            timed(argv, env, work)
        times: dict[str, list[float]] = {name: [] for name in argvs}
        for _ in range(rounds):
            for name, argv in argvs.items():
                times[name].append(timed(argv, env, work))
    return times


def report(times: dict[str, list[float]]) -> str:
    base = statistics.median(times["python -c pass"])
    lines = [
        f"Machine: {machine_line()}",
        "",
        f"Median of {len(times['python -c pass'])} rounds, each command a new process, interleaved.",
        "",
        "| command | median s | above `python -c pass` s | goal s |",
        "|---|---:|---:|---:|",
    ]
    for name, values in times.items():
        median = statistics.median(values)
        goal = f"{GOALS[name]:.1f}" if name in GOALS else ""
        lines.append(f"| `{name}` | {median:.3f} | {median - base:+.3f} | {goal} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--out", type=Path, default=None, help="also write the table here (Markdown)")
    args = parser.parse_args()
    text = report(measure(args.rounds))
    print(text)
    if args.out is not None:
        write_results(args.out, f"# Start-up of `edge-sql`\n\n{text}\n")


if __name__ == "__main__":
    main()
