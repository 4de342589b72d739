"""`from edge_sql import Agent` (issue 64): seconds in a fresh interpreter, the import itself
timed inside the process and the whole process's wall time, beside `python -c pass`, over
--rounds rounds interleaved with --baseline's checkout (another version of the code), each run
from .pyc files written in a warm-up run; then the biggest parts of one `python -X importtime`
of this checkout (cumulative microseconds of the top-level packages that cost most).

    python -m benchmarks.startup.bench_import_agent --rounds 11 [--baseline DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CODE = "import time; t = time.perf_counter(); from edge_sql import Agent; print(time.perf_counter() - t)"
PACKAGES = ("llama_cpp", "numpy", "sqlglot", "jinja2", "pydantic", "pydantic_core", "edge_sql")


def run(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=120, check=True)
    return time.perf_counter() - started, done.stdout + done.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--baseline", type=Path, default=None, help="another checkout to time beside this one")
    args = parser.parse_args()
    checkouts = {"this": REPO} | ({"baseline": args.baseline} if args.baseline is not None else {})
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)  # the working directory: not a checkout, so PYTHONPATH says which code runs
        envs = {
            name: {**os.environ, "PYTHONPATH": str(root), "PYTHONPYCACHEPREFIX": str(work / name)}
            for name, root in checkouts.items()
        }
        for env in envs.values():
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            run([sys.executable, "-c", CODE], env, work)  # .pyc files written, the page cache warm
        import_s: dict[str, list[float]] = {name: [] for name in checkouts}
        wall_s: dict[str, list[float]] = {name: [] for name in checkouts}
        bare: list[float] = []
        for _ in range(args.rounds):
            bare.append(run([sys.executable, "-c", "pass"], envs["this"], work)[0])
            for name, env in envs.items():
                wall, out = run([sys.executable, "-c", CODE], env, work)
                wall_s[name].append(wall)
                import_s[name].append(float(out.split()[-1]))
        _, tree = run([sys.executable, "-X", "importtime", "-c", "from edge_sql import Agent"], envs["this"], work)
    print(f"load average: {' '.join(f'{v:.1f}' for v in os.getloadavg())} (CPUs: {os.cpu_count()})")
    print(f"python -c pass: median {statistics.median(bare):.3f} s over {args.rounds} rounds")
    for name in checkouts:
        print(
            f"{name} ({checkouts[name]}): import median {statistics.median(import_s[name]):.3f} s "
            f"(min {min(import_s[name]):.3f}), process wall median {statistics.median(wall_s[name]):.3f} s"
        )
    cumulative: dict[str, int] = {}
    for line in tree.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, total, module = line.split("|")
        name = module.strip()
        if name in PACKAGES and total.strip().isdigit():
            cumulative[name] = max(cumulative.get(name, 0), int(total))
    print(
        "this checkout, -X importtime, cumulative ms of the first import of: "
        + ", ".join(f"{name} {cumulative[name] / 1000:.0f}" for name in PACKAGES if name in cumulative)
    )


if __name__ == "__main__":
    main()
