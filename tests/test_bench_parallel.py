"""`edge-sql bench --parallel 2`: two episodes at once per variant, the same records as a serial
bench (greedy, on the fixture model) but for the timings, and a resumed run still does only
what is missing."""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from edge_sql.agent.budget import Budget
from edge_sql.api.agent_settings import AgentSettings
from edge_sql.bench.episodes import EpisodeRunner
from edge_sql.bench.tasks import EpisodeTask
from edge_sql.cli import main
from edge_sql.evaluation.datasets import load_bundled

DATA_DIR = Path(__file__).resolve().parents[1] / "edge_sql" / "data"
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
# what depends on the clock or on which session restored the shared prompt prefix (the first
# episode of each session evaluates it, later ones restore it): not the episode itself
TIMING_FIELDS = {"wall_s", "prompt_s", "generate_s", "prompt_tokens", "prefix_tokens_restored"}


def _bench(base: Path, out: Path, limit: int, parallel: int) -> str:
    args = [
        "bench",
        "--base",
        str(base),
        "--variants",
        "BF16",
        "--limit",
        str(limit),
        "--modes",
        "withheld,given",
        "--threads",
        "1",
        "--ctx",
        "4096",
        "--greedy",
        "--out",
        str(out),
        "--no-tune",
        "--parallel",
        str(parallel),
        *TINY_BUDGET,
    ]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def _records(out: Path, kind: str) -> list[dict]:
    lines = (out / "results.jsonl").read_text().splitlines()
    return [record for record in map(json.loads, lines) if record["kind"] == kind]


def _episodes(out: Path) -> dict[tuple, dict]:
    """Each episode record by key, without the timing fields."""
    return {
        (r["variant"], r["mode"], r["question_id"], r["seed"]): {k: v for k, v in r.items() if k not in TIMING_FIELDS}
        for r in _records(out, "episode")
    }


@pytest.fixture(scope="module")
def benches(tiny_gguf_fast: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    digests = _database_digests()
    root = tmp_path_factory.mktemp("bench-parallel")
    serial, parallel = root / "serial", root / "parallel"
    outputs = {
        "serial": _bench(tiny_gguf_fast, serial, 3, 1),
        "first": _bench(tiny_gguf_fast, parallel, 2, 2),  # then resumed with a third question
        "resumed": _bench(tiny_gguf_fast, parallel, 3, 2),
    }
    return {"serial": serial, "parallel": parallel, "outputs": outputs, "digests": digests}


def _database_digests() -> dict[str, str]:
    """The bundled databases the bench's episodes read, by content."""
    return {
        db: hashlib.sha256((DATA_DIR / db / f"{db}.sqlite").read_bytes()).hexdigest() for db in ("chinook", "northwind")
    }


def test_parallel_records_are_the_serial_ones(benches: dict) -> None:
    serial, parallel = _episodes(benches["serial"]), _episodes(benches["parallel"])
    assert len(serial) == 6 and set(parallel) == set(serial)
    for key, record in serial.items():
        assert parallel[key] == record, key
    # the reference's transcripts and the spans the model wrote itself (what fidelity compares on)
    assert all(r["tokens"] and r["generated_spans"] for r in serial.values())
    fidelity = {
        _key(r): {k: v for k, v in r.items() if k != "seconds"} for r in _records(benches["serial"], "fidelity")
    }
    assert fidelity == {
        _key(r): {k: v for k, v in r.items() if k != "seconds"} for r in _records(benches["parallel"], "fidelity")
    }
    assert len(fidelity) == 6 and all(r["kl_sum"] == 0.0 and r["positions"] > 0 for r in fidelity.values())
    loads = _records(benches["parallel"], "load")
    assert [load.get("parallel") for load in loads] == [2, 2]
    assert [load.get("parallel") for load in _records(benches["serial"], "load")] == [None]
    serial_report = json.loads((benches["serial"] / "bench.json").read_text())
    parallel_report = json.loads((benches["parallel"] / "bench.json").read_text())
    assert serial_report["variants"][0]["accuracy"] == parallel_report["variants"][0]["accuracy"]
    assert parallel_report["settings"]["parallel"] == 2


def _key(record: dict) -> tuple:
    return record["variant"], record["mode"], record["question_id"]


def test_resume_with_parallel_runs_each_episode_once(benches: dict) -> None:
    outputs = benches["outputs"]
    assert "6 episodes and 6 fidelity comparisons run" in outputs["serial"]
    assert "4 episodes and 4 fidelity comparisons run" in outputs["first"]
    assert "2 episodes and 2 fidelity comparisons run" in outputs["resumed"]
    counts = Counter(_key(r) for r in _records(benches["parallel"], "episode"))
    assert len(counts) == 6 and set(counts.values()) == {1}


def test_database_files_are_byte_identical_afterwards(benches: dict) -> None:
    assert _database_digests() == benches["digests"]


def _meet_once(monkeypatch: pytest.MonkeyPatch, sessions: list, barrier: threading.Barrier) -> None:
    """Each of `sessions`' first `generate` waits for the other's first one (a two-party barrier:
    it breaks unless both episodes are under way at the same time); the real `generate` runs."""
    met: set[int] = set()
    kind = type(sessions[0])
    real = kind.generate

    def generate(self, *args, **kwargs):
        if any(self is s for s in sessions) and id(self) not in met:
            met.add(id(self))
            barrier.wait()
        return real(self, *args, **kwargs)

    monkeypatch.setattr(kind, "generate", generate)


def test_run_many_runs_the_sessions_at_once(
    tiny_gguf_fast: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    questions = load_bundled()[:3]
    task = EpisodeTask(
        variant="BF16",
        model_path=str(tiny_gguf_fast),
        results_path=str(tmp_path / "r.jsonl"),
        dataset="bundled",
        dataset_format="bird",
        db_root=None,
        items=[("withheld", q.id) for q in questions],
        seed=0,
        settings=AgentSettings(
            n_threads=1,
            n_ctx=2048,
            budget=Budget(
                max_rounds=1,
                max_think_tokens=8,
                max_final_think_tokens=8,
                max_calls_per_turn=1,
                max_final_sql_tokens=24,
            ),
            greedy=True,
            tune=False,
            parallel=2,
            pull_if_missing=False,
            prefix_cache=False,
        ),
        record_tokens=True,
    )
    barrier = threading.Barrier(2, timeout=60)
    runner = EpisodeRunner(task)
    _meet_once(monkeypatch, runner.sessions, barrier)
    try:
        assert len(runner.sessions) == 2 and runner.load_record["parallel"] == 2
        records = list(runner.run_many(task.items))
        alone = [runner.run(mode, qid) for mode, qid in task.items]  # one at a time, on the first session
    finally:
        runner.close()
    assert sorted(r["question_id"] for r in records) == [q.id for q in questions]
    by_id = {r["question_id"]: r for r in records}
    for record in alone:
        same = {k: v for k, v in by_id[record["question_id"]].items() if k not in TIMING_FIELDS}
        assert same == {k: v for k, v in record.items() if k not in TIMING_FIELDS}


# ---- edge-sql eval --parallel ------------------------------------------------------------------

NEVER_ENDS = "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT count(*) FROM r"


def test_eval_parallel_gives_the_serial_report(tmp_path: Path) -> None:
    """Right, wrong, failing, timed-out and missing predictions over both bundled databases:
    scored two at a time, the report (every question, in order) is the serial one."""
    digests = _database_digests()
    questions = load_bundled()
    predictions = {}
    for index, question in enumerate(questions):
        kind = index % 5
        if kind == 0:
            predictions[question.id] = question.gold_sql
        elif kind == 1:
            predictions[question.id] = "SELECT 1"
        elif kind == 2:
            predictions[question.id] = "SELECT * FROM no_such_table"
        elif kind == 3 and index < 20:
            predictions[question.id] = NEVER_ENDS
    pred_file = tmp_path / "pred.json"
    pred_file.write_text(json.dumps(predictions))
    reports = {}
    for parallel in (1, 2):
        out = tmp_path / f"report-{parallel}.json"
        result = CliRunner().invoke(
            main,
            [
                "eval",
                "--dataset",
                "bundled",
                "--predictions",
                str(pred_file),
                "--timeout",
                "0.5",
                "--parallel",
                str(parallel),
                "--json",
                str(out),
            ],
        )
        assert result.exit_code == 0, result.output
        reports[parallel] = json.loads(out.read_text())
    assert reports[2] == reports[1]
    results = reports[1]["results"]
    assert [r["id"] for r in results] == [q.id for q in questions]
    assert {r["id"] for r in results if r["correct"]} >= {q.id for q in questions[::5]}
    errors = [r["error"] or "" for r in results]
    assert sum("no such table" in e for e in errors) == len(questions[2::5])
    assert sum("time" in e for e in errors) == len(questions[3:20:5])
    assert sum(e == "no prediction" for e in errors) == len(questions[4::5]) + len(questions[23::5])
    assert _database_digests() == digests


def test_eval_parallel_with_ray_is_refused(tmp_path: Path) -> None:
    pred_file = tmp_path / "pred.json"
    pred_file.write_text("{}")
    result = CliRunner().invoke(
        main, ["eval", "--dataset", "bundled", "--predictions", str(pred_file), "--parallel", "2", "--ray", "local"]
    )
    assert result.exit_code == 2 and "--parallel scores on this machine" in result.output


def test_bench_parallel_with_ray_is_refused(tiny_gguf_fast: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        [
            "bench",
            "--base",
            str(tiny_gguf_fast),
            "--variants",
            "BF16",
            "--out",
            str(tmp_path / "out"),
            "--parallel",
            "2",
            "--ray",
            "local",
        ],
    )
    assert result.exit_code == 1 and "with --ray each actor runs one at a time" in result.output
    assert not (tmp_path / "out" / "results.jsonl").exists()
