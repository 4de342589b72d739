"""Issue 64's figures for an app that embeds edge-sql, printed as a table:

1. `from edge_sql import Agent`: seconds, in a fresh interpreter (median of --imports runs).
2. The FastAPI example (docs/examples/fastapi_app.py) on uvicorn in a child process, its Agent
   from EDGE_SQL_ settings: four /ask requests at once (`parallel=4`) against the same four one
   at a time, with /health polled every 20 ms throughout (its latency: the event loop's).
3. In this process, one session: a cancelled `ask_async` -> seconds until the call waiting behind
   it has the session; and the longest stall of the event loop while an episode runs, through
   `ask_async` and through a plain `ask` called inside `async def` (what the issue's app did).

    python -m benchmarks.embedding.bench_embedding [--model tiny-Q4_0.gguf] [--imports 5]

Every run is bounded (the budget below); the model defaults to the tests' fixture model.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUDGET = "max_rounds=3 max_think_tokens=48 max_calls_per_turn=2 max_sql_chars=24"
QUESTIONS = [
    "How many albums are there?",
    "Which artist has the most albums?",
    "List the genres.",
    "Which customer spent the most?",
]


def import_seconds(runs: int, root: Path) -> list[float]:
    code = "import time; t = time.perf_counter(); from edge_sql import Agent; print(time.perf_counter() - t)"
    env = {**os.environ, "PYTHONPATH": str(root)}
    return [float(subprocess.check_output([sys.executable, "-c", code], env=env, text=True)) for _ in range(runs)]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def serve_figures(model: str, parallel: int, home: Path) -> dict[str, float]:
    """Four asks at once (all sent together) and one at a time, on one server of `parallel` sessions."""
    import httpx2

    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGE_SQL_")}
    settings = {"HOME": str(home), "MODEL": model, "NO_TUNE": "1", "THREADS": "1", "CTX": "2048"}
    settings |= {"BUDGET": BUDGET, "PARALLEL": str(parallel), "SEED": "1"}
    env |= {f"EDGE_SQL_{k}": v for k, v in settings.items()} | {"PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "uvicorn", "fastapi_app:app", "--app-dir", str(REPO / "docs" / "examples")]
    server = subprocess.Popen([*command, "--port", str(port), "--log-level", "warning"], env=env, cwd=home)
    figures: dict[str, float] = {}
    try:
        async with httpx2.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=600) as client:
            deadline = time.monotonic() + 180
            while True:
                try:
                    await client.get("/health")
                    break
                except httpx2.TransportError:
                    assert time.monotonic() < deadline and server.poll() is None, "the server did not start"
                    await asyncio.sleep(0.2)
            for mode in ("at_once", "one_at_a_time"):
                health: list[float] = []
                done = asyncio.Event()

                async def poll(health: list[float] = health, done: asyncio.Event = done) -> None:
                    while not done.is_set():
                        started = time.perf_counter()
                        (await client.get("/health")).raise_for_status()
                        health.append(time.perf_counter() - started)
                        await asyncio.sleep(0.02)

                poller = asyncio.create_task(poll())
                started = time.perf_counter()
                if mode == "at_once":
                    replies = await asyncio.gather(*(client.post("/ask", json={"question": q}) for q in QUESTIONS))
                else:
                    replies = [await client.post("/ask", json={"question": q}) for q in QUESTIONS]
                figures[f"{mode}_s"] = time.perf_counter() - started
                done.set()
                await poller
                assert all(r.status_code == 200 for r in replies), [r.text for r in replies]
                figures[f"{mode}_health_p50_ms"] = 1000 * percentile(health, 0.5)
                figures[f"{mode}_health_p99_ms"] = 1000 * percentile(health, 0.99)
                figures[f"{mode}_health_max_ms"] = 1000 * max(health)
                figures[f"{mode}_health_n"] = len(health)
    finally:
        server.terminate()
        server.wait(timeout=120)
    return figures


async def cancel_figures(model: str, repeats: int) -> dict[str, list[float]]:
    """One session: cancel an awaited ask 1 s in, time until the waiting call has the session;
    the loop's longest stall during an `ask_async` and during a plain `ask` inside `async def`."""
    from edge_sql import Agent, Budget

    budget = Budget(max_tokens=2048, max_rounds=3, max_think_tokens=48, max_calls_per_turn=2, max_sql_chars=24)
    db = REPO / "edge_sql" / "data" / "chinook" / "chinook.sqlite"
    out: dict[str, list[float]] = {"handover_s": [], "async_stall_ms": [], "blocking_stall_ms": []}
    with Agent(model, n_ctx=2048, n_threads=1, budget=budget, tune=False, prefix_cache=False) as agent:
        agent.warm_up()
        gaps: list[float] = []

        async def ticker() -> None:
            last = time.monotonic()
            while True:
                await asyncio.sleep(0.005)
                gaps.append(time.monotonic() - last - 0.005)
                last = time.monotonic()

        for i in range(repeats):
            tick = asyncio.create_task(ticker())
            first = asyncio.create_task(agent.ask_async(QUESTIONS[1], db, seed=i))
            while agent.queue_state()["running"] == 0:
                await asyncio.sleep(0.002)
            second = asyncio.create_task(agent.ask_async(QUESTIONS[0], db, seed=i))
            while agent.queue_state()["waiting"] == 0:
                await asyncio.sleep(0.002)
            gaps.clear()
            await asyncio.sleep(1.0)
            cancelled = time.perf_counter()
            first.cancel()
            while agent.queue_state()["waiting"] > 0:
                await asyncio.sleep(0.002)
            out["handover_s"].append(time.perf_counter() - cancelled)
            await second
            out["async_stall_ms"].append(1000 * max(gaps))
            gaps.clear()
            await asyncio.sleep(0.05)
            agent.ask(QUESTIONS[2], db, seed=i)  # blocks the loop: what the app did
            await asyncio.sleep(0.05)
            out["blocking_stall_ms"].append(1000 * max(gaps))
            tick.cancel()
    return out


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    found = sorted(glob.glob("/tmp/edge-sql-fixture/gguf-tiny-Q4_0-*/tiny-Q4_0.gguf"))
    parser.add_argument("--model", default=found[0] if found else None, help="a GGUF file (default: the fixture's)")
    parser.add_argument("--imports", type=int, default=5, help="fresh interpreters timing the import")
    parser.add_argument("--baseline", type=Path, default=None, help="another checkout whose import to time too")
    parser.add_argument("--repeats", type=int, default=3, help="cancel hand-overs to time")
    args = parser.parse_args()
    if args.model is None:
        parser.error("no --model and no fixture model (run tests/test_api.py once to build it)")
    load = os.getloadavg()
    print(f"# {cpu_name()}, {os.cpu_count()} CPUs, load average {load[0]:.2f} {load[1]:.2f} at start")
    print(f"# model {Path(args.model).name}, one thread per session, budget {BUDGET}")
    imports = import_seconds(args.imports, REPO)
    print(f"import_s (from edge_sql import Agent)  median {statistics.median(imports):.3f}  min {min(imports):.3f}")
    if args.baseline is not None:
        before = import_seconds(args.imports, args.baseline)
        print(f"import_s baseline {args.baseline}  median {statistics.median(before):.3f}  min {min(before):.3f}")
    import tempfile

    with tempfile.TemporaryDirectory() as home:
        served = asyncio.run(serve_figures(args.model, 4, Path(home)))
    for mode in ("at_once", "one_at_a_time"):
        print(
            f"{mode:14} four asks {served[f'{mode}_s']:.2f} s; /health p50 {served[f'{mode}_health_p50_ms']:.1f} ms "
            f"p99 {served[f'{mode}_health_p99_ms']:.1f} ms max {served[f'{mode}_health_max_ms']:.1f} ms "
            f"({served[f'{mode}_health_n']:.0f} polls)"
        )
    os.environ["EDGE_SQL_HOME"] = tempfile.mkdtemp()
    cancels = asyncio.run(cancel_figures(args.model, args.repeats))
    print("cancelled ask -> next served (s): " + ", ".join(f"{v:.3f}" for v in cancels["handover_s"]))
    print(
        "event loop's longest stall during ask_async (ms): " + ", ".join(f"{v:.1f}" for v in cancels["async_stall_ms"])
    )
    print(
        "... during a plain ask inside async def (ms): " + ", ".join(f"{v:.0f}" for v in cancels["blocking_stall_ms"])
    )
    load = os.getloadavg()
    print(f"# load average {load[0]:.2f} {load[1]:.2f} at the end")


if __name__ == "__main__":
    main()
