"""serve's queue seen from its clients (issue 64: serve now waits in the Agent's own queue), as
a table: one `edge-sql serve` process per checkout, `--queue-size 1`, one long streaming episode
running and one request waiting, then

1. a third request refused (503 `queue is full`): milliseconds until the refusal arrives;
2. the waiting request's client goes away: milliseconds until /health shows nobody waiting;
3. a request waiting past `--queue-timeout 1`: seconds until its 503 (`waited 1 s in the queue`);
4. the running client goes away: milliseconds until the request waiting behind it is told
   `running` (its SSE event), i.e. the session handed over.

Every episode is stopped by its client (the fixture model thinks up to the bound), so each run is
bounded; `--baseline CHECKOUT` runs the same against another checkout (the code before), the two
interleaved round by round.

    python -m benchmarks.serve.bench_serve_queue [--model tiny-Q4_0.gguf] [--rounds 3] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import glob
import http.client
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHINOOK = REPO / "edge_sql" / "data" / "chinook" / "chinook.sqlite"
LISTENING = re.compile(r"listening on http://([^:/]+):(\d+)")
LONG = ["--threads", "1", "--ctx", "8192", "--max-rounds", "2", "--think-tokens", "4000", "--no-tune"]


class Server:
    """`edge-sql serve` of `checkout` in a child process, stderr in a file."""

    def __init__(self, checkout: Path, model: str, work: Path, timeout_s: float) -> None:
        db = work / "chinook.sqlite"
        shutil.copyfile(CHINOOK, db)
        env = {**os.environ, "PYTHONPATH": str(checkout), "EDGE_SQL_HOME": str(work / "home")}
        command = [sys.executable, "-m", "edge_sql", "serve", "--model", model, "--db", f"chinook={db}", *LONG]
        command += ["--port", "0", "--queue-size", "1", "--queue-timeout", str(timeout_s)]
        self.log_path = work / "server.log"
        self._log = self.log_path.open("w")
        self.process = subprocess.Popen(  # cwd: not a checkout, so PYTHONPATH says which code runs
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self._log, env=env, cwd=work
        )
        deadline = time.monotonic() + 180
        while not (match := LISTENING.search(self.log_path.read_text())):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the server did not start:\n{self.log_path.read_text()}")
            time.sleep(0.1)
        self.port = int(match.group(2))

    def connection(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)

    def post(self, question: str) -> tuple[int, str]:
        conn = self.connection()
        try:
            body = json.dumps({"question": question, "database": "chinook"})
            conn.request("POST", "/v1/ask", body=body, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            return response.status, response.read().decode()
        finally:
            conn.close()

    def stream(self, question: str) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        conn = self.connection()
        body = json.dumps({"question": question, "database": "chinook"})
        conn.request("POST", "/v1/ask", body=body, headers={"Accept": "text/event-stream"})
        return conn, conn.getresponse()

    def queue(self) -> dict:
        conn = self.connection()
        try:
            conn.request("GET", "/health")
            return json.loads(conn.getresponse().read())["queue"]
        finally:
            conn.close()

    def until(self, test, timeout_s: float = 60.0) -> float:  # type: ignore[no-untyped-def]
        started = time.perf_counter()
        while not test(self.queue()):
            if time.perf_counter() - started > timeout_s:
                raise SystemExit(f"timed out waiting for the queue: {self.queue()}")
            time.sleep(0.002)
        return time.perf_counter() - started

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self._log.close()


def next_event(response: http.client.HTTPResponse) -> str:
    """The name of the next SSE event."""
    name = ""
    while True:
        line = response.readline().decode()
        if not line:
            raise SystemExit("the stream ended")
        if line.startswith("event: "):
            name = line[7:].strip()
        elif line == "\n" and name:
            return name


def until_event(response: http.client.HTTPResponse, wanted: str) -> None:
    while next_event(response) != wanted:
        pass


def one_round(checkout: Path, model: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        server = Server(checkout, model, Path(folder), timeout_s=1.0)
        try:
            figures: dict[str, float] = {}
            first, running = server.stream("List the albums.")
            until_event(running, "round")  # the long episode runs
            second, waiting = server.stream("How many tracks?")
            until_event(waiting, "queued")
            server.until(lambda q: q["waiting"] == 1)
            started = time.perf_counter()
            status, body = server.post("And genres?")
            figures["refused_ms"] = (time.perf_counter() - started) * 1000
            assert status == 503 and "queue is full" in body, (status, body)
            second.close()  # the waiting client goes away: it leaves the queue
            figures["waiter_left_ms"] = server.until(lambda q: q["waiting"] == 0) * 1000
            started = time.perf_counter()
            status, body = server.post("And media types?")  # waits past --queue-timeout 1
            figures["timed_out_s"] = time.perf_counter() - started
            assert status == 503 and "waited 1 s in the queue" in body, (status, body)
            third, behind = server.stream("How many artists?")
            until_event(behind, "queued")
            started = time.perf_counter()
            first.close()  # the running client goes away: its session goes to the one behind
            until_event(behind, "running")
            figures["handover_ms"] = (time.perf_counter() - started) * 1000
            third.close()
            server.until(lambda q: not q["running"] and q["waiting"] == 0)
            return figures
        finally:
            server.stop()


def main() -> None:
    found = sorted(glob.glob("/tmp/edge-sql-fixture/gguf-tiny-Q4_0-*/tiny-Q4_0.gguf"))  # the tests' fixture
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=found[0] if found else None, help="a GGUF file (default: the fixture's)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", type=Path, default=None, help="another checkout to run beside this one")
    args = parser.parse_args()
    if args.model is None:
        parser.error("no --model and no fixture model (run tests/test_serve_http.py once to build it)")
    checkouts = {"this": REPO} | ({"baseline": args.baseline} if args.baseline is not None else {})
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in checkouts}
    for _ in range(args.rounds):
        for name, checkout in checkouts.items():
            runs[name].append(one_round(checkout, args.model))
    print(f"load average after: {os.getloadavg()[0]:.1f} (CPUs: {os.cpu_count()})")
    print("| checkout | refused (ms) | waiter left (ms) | timed out (s) | hand-over (ms) |")
    print("|---|---:|---:|---:|---:|")
    for name, rounds in runs.items():
        cells = []
        for key, form in (
            ("refused_ms", "{:.0f}"),
            ("waiter_left_ms", "{:.0f}"),
            ("timed_out_s", "{:.2f}"),
            ("handover_ms", "{:.0f}"),
        ):
            values = [r[key] for r in rounds]
            cells.append(
                ", ".join(form.format(v) for v in values) + f" (median {form.format(statistics.median(values))})"
            )
        print(f"| {name} ({checkouts[name]}) | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
