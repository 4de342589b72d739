"""`edge-sql bench --ray` and `eval --ray` on a local Ray runtime (2 CPUs), against the local runner.

The same bench (BF16 and Q8_0 of the fixture model, two bundled questions with the schema
withheld, tiny budgets) runs once with the local runner and once on Ray: the reports must agree field by
field, timings aside. A second Ray run has one worker per variant, whose process is killed
with SIGKILL after its first episode: Ray restarts it and the run still records every episode
exactly once, with the same answers; a third variant, a truncated file, is reported as crashed
and the run goes on. `eval --ray` must give local `eval`'s report.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import ray
from click.testing import CliRunner

from edge_sql.cli import main
from edge_sql.evaluation.datasets import load_bundled

TINY_BUDGET = [
    "--max-rounds",
    "1",
    "--think-tokens",
    "8",
    "--calls-per-turn",
    "1",
    "--episode-tokens",
    "4096",
    "--budget",
    "max_final_sql_tokens=24",
    "--budget",
    "max_sql_chars=48",
    "--budget",
    "max_name_chars=24",
]
TIMING_FIELDS = {
    "load_s",
    "peak_rss_bytes",
    "prompt_tok_s",
    "decode_tok_s",
    "wall_s_median",
    "wall_s_p95",
    "wall_s",
    "prompt_s",
    "generate_s",
    "seconds",
    "n_threads",
}
# where and how it ran, not what it measured: Ray settings, how many workers loaded a variant, and
# how a transcript's prompt split into evaluated and restored tokens (a worker restores the shared
# prefix from its second question on, so it depends on how questions were spread over workers;
# transcript_tokens, their sum with the generated tokens, is still compared)
RUN_FIELDS = {"ray", "ray_workers", "loads", "prompt_tokens", "prefix_tokens_restored"}


@pytest.fixture(scope="module")
def ray_runtime():
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield ray
    ray.shutdown()


def _bench(base: Path, out: Path, *extra: str, variants: str = "BF16,Q8_0") -> str:
    args = [
        "bench",
        "--base",
        str(base),
        "--variants",
        variants,
        "--limit",
        "2",
        "--modes",
        "withheld",
        "--threads",
        "1",
        "--ctx",
        "4096",
        "--fidelity-tokens",
        "32",
        "--out",
        str(out),
        "--no-tune",
        *TINY_BUDGET,
        "--cache-dir",
        str(out.parent / "quantized"),
        *extra,
    ]  # the runs share one Q8_0
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def _records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def _without_timings(value: Any, out: Path) -> Any:
    """The report with timings dropped, the out folder's path written as OUT, floats to 9 digits."""
    if isinstance(value, dict):
        return {k: _without_timings(v, out) for k, v in value.items() if k not in TIMING_FIELDS | RUN_FIELDS}
    if isinstance(value, list):
        return [_without_timings(v, out) for v in value]
    if isinstance(value, str):
        return value.replace(str(out), "OUT")
    if isinstance(value, float):  # KL sums differ in the last bits between processes (summation order)
        return float(f"{value:.9g}")
    return value


class _Killer(threading.Thread):
    """SIGKILLs the first BF16 Ray worker once it has recorded its first episode."""

    def __init__(self, out: Path) -> None:
        super().__init__(daemon=True)
        self.out, self.killed_pid, self.stop = out, None, threading.Event()

    def run(self) -> None:
        while not self.stop.is_set() and self.killed_pid is None:
            path = self.out / "results.jsonl"
            records = _records(self.out) if path.is_file() else []
            loads = [r for r in records if r["kind"] == "load" and r["variant"] == "BF16"]
            if loads and any(r["kind"] == "episode" for r in records):
                os.kill(loads[0]["pid"], signal.SIGKILL)
                self.killed_pid = loads[0]["pid"]
            time.sleep(0.05)


@pytest.fixture(scope="module")
def runs(tiny_gguf: Path, ray_runtime, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("bench-ray")
    local, on_ray, killed = root / "local", root / "ray", root / "killed"
    outputs = {"local": _bench(tiny_gguf, local), "ray": _bench(tiny_gguf, on_ray, "--ray", "local")}
    broken = root / "broken.gguf"
    broken.write_bytes(tiny_gguf.read_bytes()[:4096])  # a GGUF header cut short: its worker cannot load it
    variants = f"BF16,Q8_0,{broken}"
    killer = _Killer(killed)
    killer.start()
    outputs["killed"] = _bench(tiny_gguf, killed, "--ray", "local", "--ray-workers", "1", variants=variants)
    killer.stop.set()
    outputs["resumed"] = _bench(tiny_gguf, killed, "--ray", "local", "--ray-workers", "1", variants=variants)
    return {
        "dirs": {"local": local, "ray": on_ray, "killed": killed},
        "outputs": outputs,
        "killed_pid": killer.killed_pid,
    }


def test_ray_report_equals_local_report(runs: dict[str, Any]) -> None:
    dirs = runs["dirs"]
    local = json.loads((dirs["local"] / "bench.json").read_text())
    on_ray = json.loads((dirs["ray"] / "bench.json").read_text())
    assert local["settings"]["ray"] is None and on_ray["settings"]["ray"] == "local"
    assert [row["name"] for row in on_ray["variants"]] == ["BF16", "Q8_0"]
    assert len(on_ray["episodes"]) == 4 and len(on_ray["fidelity"]) == 4
    # same form: the same fields everywhere
    assert local.keys() == on_ray.keys()
    for a, b in zip(local["variants"], on_ray["variants"], strict=True):
        assert a.keys() == b.keys()
    # same figures, field by field, timings aside
    assert _without_timings(on_ray, dirs["ray"]) == _without_timings(local, dirs["local"])
    # and the timings are there, measured by the Ray workers
    for row in on_ray["variants"]:
        assert row["episodes"] == 2 and not row["crashes"] and not row["mixed_hardware"]
        assert row["load_s"] > 0 and row["decode_tok_s"] > 0 and row["peak_rss_bytes"] > row["size_bytes"]


def test_ray_report_names_the_node_and_its_cpu(runs: dict[str, Any]) -> None:
    report = json.loads((runs["dirs"]["ray"] / "bench.json").read_text())
    [(node, machine)] = report["nodes"].items()
    assert machine["cpu_count"] == os.cpu_count() and machine["cpu_model"]
    for row in report["variants"]:
        figures = row["per_node"][node]
        assert len(figures["episode_keys"]) == 2 and figures["decode_tok_s"] == row["decode_tok_s"]
        assert figures["n_threads"] == 1  # one Ray CPU per worker (--threads 1)
    assert all(e["node"] == node for e in report["episodes"])
    text = (runs["dirs"]["ray"] / "bench.md").read_text()
    assert f"| BF16 | {node} | {machine['cpu_model']} x{machine['cpu_count']} | 1 | 2 |" in text


def test_killed_worker_is_retried_and_no_episode_is_counted_twice(runs: dict[str, Any]) -> None:
    killed = runs["dirs"]["killed"]
    assert runs["killed_pid"] is not None
    records = _records(killed)
    episodes = Counter((r["variant"], r["mode"], r["question_id"]) for r in records if r["kind"] == "episode")
    assert len(episodes) == 4 and set(episodes.values()) == {1} and {k[0] for k in episodes} == {"BF16", "Q8_0"}
    crashes = [r for r in records if r["kind"] == "crash"]
    assert {r["variant"] for r in crashes} == {"broken"} and {r["task"] for r in crashes} == {"episodes", "fidelity"}
    assert all("ModelFileError" in r["error"] and "truncated or corrupt" in r["error"] for r in crashes)
    assert "- broken: episodes failed on Ray: edge_sql.errors.ModelFileError:" in (killed / "bench.md").read_text()
    loads = [r for r in records if r["kind"] == "load" and r["variant"] == "BF16"]
    assert len(loads) == 2 and loads[0]["pid"] == runs["killed_pid"] != loads[1]["pid"]  # Ray restarted it
    assert "4 episodes and 4 fidelity comparisons run" in runs["outputs"]["killed"]
    assert "0 episodes and 0 fidelity comparisons run" in runs["outputs"]["resumed"]
    # the retried episodes are the very episodes the local runner ran
    answers = {
        (e["variant"], e["mode"], e["question_id"]): (e["sql"], e["correct"], e["transcript_tokens"])
        for e in json.loads((killed / "bench.json").read_text())["episodes"]
    }
    local = {
        (e["variant"], e["mode"], e["question_id"]): (e["sql"], e["correct"], e["transcript_tokens"])
        for e in json.loads((runs["dirs"]["local"] / "bench.json").read_text())["episodes"]
    }
    assert answers == local


def test_a_variant_missing_on_a_node_is_copied_into_its_store(ray_runtime, tiny_gguf: Path, tmp_path: Path) -> None:
    from edge_sql.cluster.files import SourceFile, local_model, start_file_server
    from edge_sql.store.index import ModelStore

    real = SourceFile.of(tiny_gguf)
    # the same file as a node without it sees it: its modification time does not match there
    elsewhere = SourceFile(real.path, real.size, real.mtime_ns + 1)
    assert real.present_here() and not elsewhere.present_here()
    server, name = start_file_server([real.path])
    try:
        assert local_model(real, name, store_name="bench-x", variant="BF16", store_root=tmp_path) == (tiny_gguf, False)
        path, copied = local_model(elsewhere, name, store_name="bench-x", variant="BF16", store_root=tmp_path)
        assert copied and path.is_relative_to(tmp_path) and path.read_bytes() == tiny_gguf.read_bytes()
        entry = ModelStore(tmp_path).get("bench-x", "BF16")
        assert entry is not None and entry.path == path and entry.revision == elsewhere.revision
        assert local_model(elsewhere, name, store_name="bench-x", variant="BF16", store_root=tmp_path) == (path, False)
        with pytest.raises(ray.exceptions.RayTaskError, match="not served"):
            ray.get(server.read.remote(str(tmp_path / "index.json"), 0, 10))
    finally:
        ray.kill(server)


def _predictions() -> dict[str, str]:
    predictions = {}
    for i, q in enumerate(load_bundled()):
        if i % 4 == 0:
            predictions[q.id] = q.gold_sql  # right
        elif i % 4 == 1:
            predictions[q.id] = "SELECT 1"  # wrong
        elif i % 4 == 2:
            predictions[q.id] = "SELECT * FROM no_such_table"  # fails
    return predictions  # i % 4 == 3: no prediction


def test_eval_on_ray_gives_the_local_verdicts(ray_runtime, tmp_path: Path) -> None:
    pred = tmp_path / "pred.json"
    pred.write_text(json.dumps(_predictions()))
    reports = {}
    for name, extra in (("local", []), ("ray", ["--ray", "local"])):
        out = tmp_path / f"{name}.json"
        result = CliRunner().invoke(
            main,
            ["eval", "--dataset", "bundled", "--predictions", str(pred), "--json", str(out), *extra],
            catch_exceptions=False,
        )
        assert result.exit_code == 0, result.output
        reports[name] = json.loads(out.read_text())
    assert reports["ray"] == reports["local"]
    errors = Counter((r["correct"], (r["error"] or "").split(":")[0]) for r in reports["ray"]["results"])
    assert errors[(True, "")] >= 16 and errors[(False, "predicted SQL failed")] == 16
    assert errors[(False, "no prediction")] == 16


def _run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=600, cwd=Path(__file__).resolve().parent
    )


def test_without_ray_the_ray_option_says_how_to_install_it(tmp_path: Path) -> None:
    pred = tmp_path / "pred.json"
    pred.write_text("{}")
    code = (  # `import ray` fails in this process, as where the extra is not installed
        "import sys; sys.modules['ray'] = None\n"
        "from click.testing import CliRunner\nfrom edge_sql.cli import main\n"
        f"r = CliRunner().invoke(main, ['eval', '--dataset', 'bundled', '--predictions', {str(pred)!r}, '--ray'])\n"
        "print(r.exit_code); print(r.output)\n"
    )
    result = _run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("1\n")
    assert "--ray needs Ray" in result.stdout and 'pip install "edge-sql[cluster]"' in result.stdout


def test_the_local_runner_does_not_import_ray(tiny_gguf: Path, tmp_path: Path) -> None:
    # tune=False: a first calibration (12 s here) would only add runtime.tuning's imports, which
    # test_packaging already checks statically (ray is imported in edge_sql.cluster alone)
    code = (
        "import sys\nfrom pathlib import Path\nfrom edge_sql.bench import BenchConfig, run_bench\n"
        "from edge_sql.api.agent_settings import AgentSettings\n"
        f"config = BenchConfig(out_dir=Path({str(tmp_path / 'out')!r}), base=Path({str(tiny_gguf)!r}), limit=1,"
        " modes=['withheld'], episodes=AgentSettings(n_threads=1, n_ctx=4096, tune=False), fidelity_tokens=16,"
        " budget={'max_rounds': 1, 'max_think_tokens': 8, 'max_final_think_tokens': 8, 'max_calls_per_turn': 1,"
        " 'max_final_sql_tokens': 24, 'max_sql_chars': 48, 'max_name_chars': 24})\n"
        "outcome = run_bench(config)\n"
        "from edge_sql.evaluation import evaluate\nfrom edge_sql.evaluation.datasets import load_bundled\n"
        "evaluate(load_bundled(), {})\n"
        "print(outcome.episodes_run, 'ray' in sys.modules)\n"
    )
    result = _run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1", "False"]


def test_a_dataset_missing_on_a_node_is_copied_with_its_databases(
    ray_runtime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from edge_sql.cluster.bench import DataSources, localize_data
    from edge_sql.cluster.files import SourceFile, start_file_server
    from edge_sql.evaluation.datasets import load_dataset

    monkeypatch.setenv("EDGE_SQL_HOME", str(tmp_path / "node-store"))
    sample = Path(__file__).resolve().parent / "data" / "spider_sample"
    questions = load_dataset(sample / "dev.json", fmt="spider", db_root=sample / "database")

    def as_elsewhere(path: Path) -> SourceFile:  # a node that lacks the file sees another mtime
        real = SourceFile.of(path)
        return SourceFile(real.path, real.size, real.mtime_ns + 1)

    sources = DataSources(
        as_elsewhere(sample / "dev.json"),
        str(sample / "database"),
        {q.db_id: as_elsewhere(q.db_path) for q in questions},
    )
    task = {"dataset": str(sample / "dev.json"), "dataset_format": "spider", "db_root": str(sample / "database")}
    server, name = start_file_server(sources.all_files())
    try:
        moved = localize_data(task, sources, name)
    finally:
        ray.kill(server)
    assert Path(moved["dataset"]).is_relative_to(tmp_path / "node-store" / "cluster-files")
    copies = load_dataset(moved["dataset"], fmt="spider", db_root=moved["db_root"])
    assert [(q.id, q.gold_sql) for q in copies] == [(q.id, q.gold_sql) for q in questions]
    for original, copy in zip(questions, copies, strict=True):
        assert copy.db_path != original.db_path and copy.db_path.read_bytes() == original.db_path.read_bytes()
    # a node that sees the driver's files uses them where they are
    here = DataSources(
        SourceFile.of(sample / "dev.json"),
        str(sample / "database"),
        {q.db_id: SourceFile.of(q.db_path) for q in questions},
    )
    assert localize_data(task, here, name) == task
