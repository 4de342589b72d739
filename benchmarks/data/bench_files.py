"""Loading data files into SQLite: edge-sql against the `sqlite-utils insert` command line and
Python's `csv` module with `executemany`, on files this script generates, in one run.

Each loader runs in its own child process; its wall time, CPU time (user + system) and peak
RSS (the child's own VmHWM) are measured from outside. On a shared machine the CPU time is the
fair comparison: wall time also counts the time a process waited for a core. The CSV (id, customer with commas and quotes, region, amount, qty, ISO
date, note) and the Parquet file (the same columns, typed) are written first; every loader's
table is then counted, so each figure is for the same rows. Memory must stay flat as the file
grows, so edge-sql also loads a smaller file of each kind. `sqlite-utils insert --csv` (types
detected, as `--detect-types` did before sqlite-utils 4: one Python dict a row, then a table
rewrite to apply the types) runs on a
prefix of the CSV and its time is extrapolated to the full size, stated as such; the Parquet
baselines read the file with pyarrow (neither sqlite-utils' CLI nor `csv` reads Parquet):
sqlite-utils' `insert_all` on its rows as dicts, and `executemany` on its rows as tuples.

    python -m benchmarks.data.bench_files                      # 1 GB CSV, 10M-row Parquet (minutes)
    python -m benchmarks.data.bench_files --csv-mb 200 --parquet-rows 2000000 --out results.md
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

from benchmarks.common.bench_machine import write_results

REPO = Path(__file__).resolve().parents[2]
REGIONS = ["North", "South", "East", "West", "Central"]

CSV_EXECUTEMANY = textwrap.dedent("""
    import csv, sqlite3, sys
    src, db = sys.argv[1], sys.argv[2]
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=OFF"); conn.execute("PRAGMA synchronous=OFF")
    with open(src, newline="", encoding="utf-8") as f:
        rows = csv.reader(f)
        header = next(rows)
        conn.execute("CREATE TABLE t (" + ", ".join('"%s"' % h for h in header) + ")")
        conn.execute("BEGIN")
        conn.executemany("INSERT INTO t VALUES (" + ", ".join("?" * len(header)) + ")", rows)
        conn.execute("COMMIT")
""")
PARQUET_EXECUTEMANY = textwrap.dedent("""
    import sqlite3, sys
    import pyarrow.parquet as pq
    src, db = sys.argv[1], sys.argv[2]
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=OFF"); conn.execute("PRAGMA synchronous=OFF")
    pf = pq.ParquetFile(src)
    names = pf.schema_arrow.names
    conn.execute("CREATE TABLE t (" + ", ".join('"%s"' % n for n in names) + ")")
    conn.execute("BEGIN")
    sql = "INSERT INTO t VALUES (" + ", ".join("?" * len(names)) + ")"
    for batch in pf.iter_batches(batch_size=20000):
        cols = [c.cast("string").to_pylist() if str(c.type).startswith(("date", "timestamp")) else c.to_pylist()
                for c in batch.columns]
        conn.executemany(sql, zip(*cols))
    conn.execute("COMMIT")
""")
PARQUET_SQLITE_UTILS = textwrap.dedent("""
    import itertools, sys
    import pyarrow.parquet as pq
    import sqlite_utils
    src, db, limit = sys.argv[1], sys.argv[2], int(sys.argv[3])
    pf = pq.ParquetFile(src)
    def rows():
        for batch in itertools.islice(pf.iter_batches(batch_size=20000), limit // 20000):
            for col in [c for c in batch.schema.names if str(batch.schema.field(c).type).startswith("date")]:
                batch = batch.set_column(batch.schema.get_field_index(col), col, batch.column(col).cast("string"))
            yield from batch.to_pylist()
    sqlite_utils.Database(db)["t"].insert_all(rows(), batch_size=20000)
""")


@dataclass
class Run:
    loader: str
    file: str
    mb: float
    rows: int
    seconds: float
    cpu_seconds: float
    peak_rss_mb: float
    note: str = ""

    def line(self) -> str:
        return (
            f"| {self.loader} | {self.file} | {self.mb:,.0f} | {self.rows:,} | {self.seconds:,.1f} | "
            f"{self.cpu_seconds:,.1f} | {self.rows / self.cpu_seconds:,.0f} | {self.mb / self.cpu_seconds:,.1f} | "
            f"{self.peak_rss_mb:,.0f} | {self.note} |"
        )


def write_csv(path: Path, target_mb: float) -> int:
    """A CSV of about `target_mb` MB; returns its data rows."""
    import numpy as np

    rng = np.random.default_rng(1)
    rows = 0
    target = target_mb * 1e6
    with open(path, "w", newline="", encoding="utf-8") as out:
        out.write("id,customer,region,amount,qty,day,note\n")
        while out.tell() < target:
            n = 100_000
            amount = np.round(rng.random(n) * 1000, 2).tolist()
            qty = rng.integers(1, 50, n).tolist()
            region = rng.integers(0, len(REGIONS), n).tolist()
            day = rng.integers(0, 365 * 5, n).tolist()
            lines = []
            for i in range(n):
                k = rows + i
                customer = f'"Smith, J. ""{k % 977}"""' if k % 7 == 0 else f"customer {k % 10007}"
                d = day[i]
                lines.append(
                    f"{k},{customer},{REGIONS[region[i]]},{amount[i]},{qty[i]},"
                    f"{2020 + d // 365}-{1 + d % 365 // 31:02d}-{1 + d % 28:02d},note {k % 101}\n"
                )
            out.write("".join(lines))
            rows += n
    return rows


def write_parquet(path: Path, total_rows: int) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(2)
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("customer", pa.string()),
            ("region", pa.string()),
            ("amount", pa.float64()),
            ("qty", pa.int32()),
            ("day", pa.date32()),
            ("note", pa.string()),
        ]
    )
    with pq.ParquetWriter(path, schema) as writer:
        done = 0
        while done < total_rows:
            n = min(1_000_000, total_rows - done)
            ids = np.arange(done, done + n)
            writer.write_table(
                pa.table(
                    {
                        "id": ids,
                        "customer": pa.array([f"customer {k % 10007}" for k in ids.tolist()]),
                        "region": pa.array(np.array(REGIONS)[rng.integers(0, len(REGIONS), n)]),
                        "amount": np.round(rng.random(n) * 1000, 2),
                        "qty": rng.integers(1, 50, n).astype(np.int32),
                        "day": pa.array(rng.integers(18262, 18262 + 365 * 5, n).astype(np.int32), pa.int32()).cast(
                            pa.date32()
                        ),
                        "note": pa.array([f"note {k % 101}" for k in ids.tolist()]),
                    },
                    schema=schema,
                )
            )
            done += n


def measure(command: list[str], env: dict[str, str] | None = None) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds, peak RSS in MB) of one child process. The peak is the kernel's
    high-water mark (VmHWM) of the child's own memory, read every 20 ms until it exits (wait4's
    ru_maxrss would also count this process's memory at fork time); the CPU time (user + system,
    from wait4) is the fairer figure on a shared machine, where wall time includes waiting for a core."""
    started = time.perf_counter()
    with tempfile.TemporaryFile() as errors:
        child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=errors)
        peak_kb = 0
        while True:
            pid, status, usage = os.wait4(child.pid, os.WNOHANG)
            if pid:
                break
            peak_kb = max(peak_kb, _hwm_kb(child.pid))
            time.sleep(0.02)
        seconds = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        if child.returncode != 0:
            errors.seek(0)
            raise RuntimeError(f"{command[:4]} failed: {errors.read().decode()[-2000:]}")
    return seconds, usage.ru_utime + usage.ru_stime, peak_kb / 1024


def _hwm_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _duration(seconds: float) -> str:
    return f"{seconds:,.0f} s" if seconds < 120 else f"{seconds / 60:,.0f} min"


def count(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        table = conn.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchone()[0]
        return conn.execute(f'SELECT COUNT(*) FROM "{table}"').fetchone()[0]


def edge_sql_load(path: Path, work: Path, label: str) -> Run:
    home = work / f"home-{path.stem}"
    env = {**os.environ, "EDGE_SQL_HOME": str(home), "PYTHONPATH": str(REPO)}
    seconds, cpu, rss = measure([sys.executable, "-m", "edge_sql", "files", "load", str(path)], env)
    db = next((home / "files").glob("*.sqlite"))
    run = Run("edge-sql files load", label, path.stat().st_size / 1e6, count(db), seconds, cpu, rss)
    shutil.rmtree(home)
    return run


def script_load(name: str, script: str, path: Path, work: Path, label: str, *extra: str) -> Run:
    db = work / "baseline.db"
    seconds, cpu, rss = measure([sys.executable, "-c", script, str(path), str(db), *extra])
    run = Run(name, label, path.stat().st_size / 1e6, count(db), seconds, cpu, rss)
    db.unlink()
    return run


def sqlite_utils_parquet(path: Path, work: Path, label: str, limit_rows: int, total_rows: int) -> Run:
    """sqlite-utils' `insert_all` on the first `limit_rows` rows of the Parquet file, extrapolated."""
    run = script_load("pyarrow + sqlite-utils insert_all", PARQUET_SQLITE_UTILS, path, work, label, str(limit_rows))
    share = run.rows / total_rows
    run.file = f"first {run.rows:,} rows of {label}"
    run.mb *= share
    run.note = (
        f"extrapolated to {total_rows:,} rows: ~{_duration(run.seconds / share)} wall, "
        f"~{_duration(run.cpu_seconds / share)} CPU"
    )
    return run


def sqlite_utils_cli(path: Path, work: Path, label: str, prefix_mb: float, full_mb: float) -> Run:
    """`sqlite-utils insert --csv` (which detects types since 4.0) on the first `prefix_mb` of the CSV, extrapolated."""
    prefix = work / "prefix.csv"
    with open(path, "rb") as src, open(prefix, "wb") as out:
        out.write(src.read(int(prefix_mb * 1e6)))
        out.write(src.readline())  # end on a whole line
    db = work / "su.db"
    cli = shutil.which("sqlite-utils") or str(Path(sys.executable).with_name("sqlite-utils"))
    seconds, cpu, rss = measure([cli, "insert", str(db), "t", str(prefix), "--csv"])  # 4.x detects types by default
    mb = prefix.stat().st_size / 1e6
    run = Run(
        "sqlite-utils insert --csv (types detected)",
        f"first {mb:,.0f} MB of {label}",
        mb,
        count(db),
        seconds,
        cpu,
        rss,
        note=f"extrapolated to {full_mb:,.0f} MB: ~{_duration(seconds * full_mb / mb)} wall, "
        f"~{_duration(cpu * full_mb / mb)} CPU",
    )
    db.unlink()
    prefix.unlink()
    return run


def generate(kind: str, path: Path, size: float) -> None:
    subprocess.run([sys.executable, "-m", __spec__.name, "--generate", kind, str(path), str(size)], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--csv-mb", type=float, default=1000)
    parser.add_argument("--parquet-rows", type=int, default=10_000_000)
    parser.add_argument(
        "--small-csv-mb", type=float, default=100, help="edge-sql also loads a CSV this size (memory flat?)"
    )
    parser.add_argument("--small-parquet-rows", type=int, default=1_000_000)
    parser.add_argument(
        "--sqlite-utils-mb", type=float, default=20, help="the prefix of the CSV sqlite-utils' CLI loads"
    )
    parser.add_argument(
        "--sqlite-utils-rows",
        type=int,
        default=200_000,
        help="the rows of the Parquet file sqlite-utils' insert_all loads (a multiple of 20,000)",
    )
    parser.add_argument("--generate", nargs=3, metavar=("KIND", "PATH", "SIZE"), help=argparse.SUPPRESS)
    parser.add_argument(
        "--work", type=Path, default=None, help="folder for the generated files (default: a temp folder)"
    )
    parser.add_argument("--out", type=Path, default=None, help="also write the table here")
    args = parser.parse_args()
    if args.generate:  # in a child process, so that this one stays small
        kind, path, size = args.generate
        write_csv(Path(path), float(size)) if kind == "csv" else write_parquet(Path(path), int(size))
        return
    from edge_sql.bench.machine import cpu_model

    work = args.work or Path(tempfile.mkdtemp(prefix="bench-files-"))
    work.mkdir(parents=True, exist_ok=True)
    lines = [
        f"CPU: {cpu_model()}, {os.cpu_count()} CPUs; Python {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}",
        "",
        "| loader | file | MB | rows | wall s | CPU s | rows per CPU s | MB per CPU s | peak RSS MB | note |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    try:
        runs = []
        for label, mb in (("small CSV", args.small_csv_mb), ("CSV", args.csv_mb)):
            path = work / f"{label.replace(' ', '_')}.csv"
            started = time.perf_counter()
            generate("csv", path, mb)
            print(
                f"wrote {path} ({path.stat().st_size / 1e6:,.0f} MB) in {time.perf_counter() - started:.0f} s",
                flush=True,
            )
            runs.append(edge_sql_load(path, work, label))
            print(runs[-1].line(), flush=True)
            if label == "CSV":
                runs.append(script_load("csv + executemany (all text)", CSV_EXECUTEMANY, path, work, label))
                print(runs[-1].line(), flush=True)
                runs.append(sqlite_utils_cli(path, work, label, args.sqlite_utils_mb, path.stat().st_size / 1e6))
                print(runs[-1].line(), flush=True)
            path.unlink()
        for label, rows in (("small Parquet", args.small_parquet_rows), ("Parquet", args.parquet_rows)):
            path = work / f"{label.replace(' ', '_')}.parquet"
            generate("parquet", path, rows)
            runs.append(edge_sql_load(path, work, label))
            print(runs[-1].line(), flush=True)
            if label == "Parquet":
                runs.append(script_load("pyarrow + executemany", PARQUET_EXECUTEMANY, path, work, label))
                print(runs[-1].line(), flush=True)
                runs.append(sqlite_utils_parquet(path, work, label, args.sqlite_utils_rows, rows))
                print(runs[-1].line(), flush=True)
            path.unlink()
        lines += [run.line() for run in runs]
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        write_results(args.out, text)


if __name__ == "__main__":
    main()
