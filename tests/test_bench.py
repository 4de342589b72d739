"""`edge-sql bench` end to end on the fixture model: BF16 and its Q8_0 (plus a broken file).

One bench is run in two steps sharing an out folder: first one question, then two (a resumed
run must only do the new question's episodes), then a third time with nothing left to do.
Budgets are tiny so the random-weight episodes stay short.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from edge_sql.cli import main

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
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


def _bench(base: Path, out: Path, limit: int, *extra: str) -> str:
    args = [
        "bench",
        "--base",
        str(base),
        "--variants",
        f"BF16,Q8_0,{out.parent / 'broken.gguf'}",
        "--limit",
        str(limit),
        "--modes",
        "withheld,given",
        "--threads",
        "1",
        "--ctx",
        "4096",
        "--fidelity-tokens",
        "4096",
        "--out",
        str(out),
        "--no-tune",
        *TINY_BUDGET,
        *extra,
    ]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def bench_runs(tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("bench")
    broken = root / "broken.gguf"
    broken.write_bytes(tiny_gguf.read_bytes()[:4096])  # a GGUF header cut short: the worker fails
    out = root / "out"
    first = _bench(tiny_gguf, out, 1)
    after_first = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    second = _bench(tiny_gguf, out, 2)
    third = _bench(tiny_gguf, out, 2)
    return {"out": out, "outputs": (first, second, third), "after_first": after_first}


def test_bench_json_has_every_figure(bench_runs: dict) -> None:
    report = json.loads((bench_runs["out"] / "bench.json").read_text())
    rows = {row["name"]: row for row in report["variants"]}
    assert list(rows) == ["BF16", "Q8_0", "broken"]
    assert report["settings"]["questions"] == 2 and report["settings"]["modes"] == ["withheld", "given"]
    bf16, q8 = rows["BF16"], rows["Q8_0"]
    # fidelity is measured where BF16 wrote the next token itself, in each of its 4 transcripts
    bf16_generated = sum(e["generated_tokens"] for e in report["episodes"] if e["variant"] == "BF16")
    assert bf16_generated > 0
    assert bf16["size_bytes"] > q8["size_bytes"] > 0
    for row in (bf16, q8):
        assert row["episodes"] == 4 and not row["crashes"] and not row["episode_errors"]
        assert 0 < row["load_s"] < 120
        assert row["peak_rss_bytes"] > row["size_bytes"] and not row["peak_rss_is_upper_bound"]
        assert row["prompt_tok_s"] > 0 and row["decode_tok_s"] > 0
        assert row["tuning"] == "off" and "flash_attn=auto n_ubatch=256 n_threads=1" in row["settings"]
        assert 0 < row["wall_s_median"] <= row["wall_s_p95"]
        assert row["fidelity"]["transcripts"] == 4 and row["fidelity"]["positions"] == bf16_generated
        for share in (
            row["answer_agreement"]["overall"],
            row["answer_agreement"]["withheld"],
            row["answer_agreement"]["given"],
            row["fidelity"]["top1"],
        ):
            assert 0.0 <= share <= 1.0
        for mode in ("withheld", "given"):
            accuracy = row["accuracy"][mode]
            assert accuracy["overall"]["total"] == 2 and 0 <= accuracy["overall"]["correct"] <= 2
            assert sum(a["total"] for a in accuracy["by_difficulty"].values()) == 2
    # BF16 against a second load of itself: identical distributions, exactly.
    assert bf16["fidelity"]["kl_mean"] == 0.0 and bf16["fidelity"]["kl_max"] == 0.0
    assert bf16["fidelity"]["top1"] == 1.0
    assert bf16["answer_agreement"]["overall"] == 1.0
    # Q8_0 is a different model: its distributions differ somewhere.
    assert q8["fidelity"]["kl_mean"] > 0.0 and q8["fidelity"]["kl_max"] >= q8["fidelity"]["kl_mean"]
    # raw figures: one record per variant, mode and question
    episodes = report["episodes"]
    assert len(episodes) == 8
    for episode in episodes:
        assert {"sql", "correct", "wall_s", "prompt_tokens", "generated_tokens", "transcript_tokens"} <= set(episode)
        assert (
            episode["prompt_tokens"] + episode["generated_tokens"] + episode["prefix_tokens_restored"]
            == episode["transcript_tokens"]
        )
        assert "tokens" not in episode


def test_a_crashed_worker_is_reported_not_fatal(bench_runs: dict) -> None:
    report = json.loads((bench_runs["out"] / "bench.json").read_text())
    broken = next(row for row in report["variants"] if row["name"] == "broken")
    assert broken["episodes"] == 0 and broken["decode_tok_s"] is None
    assert {c["task"] for c in broken["crashes"]} == {"episodes", "fidelity"}
    assert all(c["returncode"] != 0 for c in broken["crashes"])
    assert "broken (crashed)" in (bench_runs["out"] / "bench.md").read_text()


def test_bench_markdown_has_a_row_per_variant(bench_runs: dict) -> None:
    text = (bench_runs["out"] / "bench.md").read_text()
    table = [line for line in text.splitlines() if line.startswith("| ")]
    assert table[0].startswith("| variant | size | load s | peak RSS | prompt tok/s | decode tok/s")
    for header in ("KL mean", "top-1", "answer agreement", "EX withheld", "EX given"):
        assert header in table[0]
    names = [line.split("|")[1].strip() for line in table[1:4]]
    assert names == ["BF16", "Q8_0", "broken (crashed)"]
    bf16_cells = [cell.strip() for cell in table[1].split("|")[1:-1]]
    assert bf16_cells[7] == "0.00000" and bf16_cells[8] == "100.0%"
    assert "| BF16 | given |" in text and "simple" in text  # the per-difficulty table


def test_bench_writes_png_plots(bench_runs: dict) -> None:
    for name in ("accuracy_vs_size.png", "decode_speed_vs_size.png", "fidelity_vs_size.png"):
        data = (bench_runs["out"] / name).read_bytes()
        assert data[:8] == PNG_SIGNATURE and len(data) > 10_000


def test_bench_reports_accuracy_by_confidence(bench_runs: dict) -> None:
    """Each episode record carries its answer checks' level; each variant and mode its answers per
    level and the risk-coverage rows, in the JSON, the Markdown and a plot."""
    report = json.loads((bench_runs["out"] / "bench.json").read_text())
    for episode in report["episodes"]:
        assert episode["confidence"] in ("checked", "unchecked", "doubtful", None)
        assert episode["confidence"] is not None or episode["sql"] is None  # an answer is always checked
    for row in report["variants"]:
        for mode in ("withheld", "given") if not row["crashes"] else ():
            figures = row["confidence"][mode]
            mine = [e for e in report["episodes"] if e["variant"] == row["name"] and e["mode"] == mode]
            assert figures["questions"] == len(mine) == 2
            assert {level: f["answers"] for level, f in figures["levels"].items()} == {
                level: sum(e["confidence"] == level for e in mine) for level in ("checked", "unchecked", "doubtful")
            }
            assert figures["coverage"][-1]["answered"] == len(mine) - figures["unlabelled"]
    text = (bench_runs["out"] / "bench.md").read_text()
    assert "| variant | mode | level | answers | right | accuracy | answered at or above |" in text
    assert "| BF16 | given | checked | " in text
    data = (bench_runs["out"] / "accuracy_by_confidence.png").read_bytes()
    assert data[:8] == PNG_SIGNATURE


def test_resume_runs_each_episode_once(bench_runs: dict) -> None:
    first, second, third = bench_runs["outputs"]
    # run 1: one question x 2 modes on BF16 and Q8_0; run 2 adds only the second question's
    assert "4 episodes and 4 fidelity comparisons run" in first
    assert "4 episodes and 4 fidelity comparisons run" in second
    assert "0 episodes and 0 fidelity comparisons run" in third
    records = [json.loads(line) for line in (bench_runs["out"] / "results.jsonl").read_text().splitlines()]
    episodes = Counter(
        (r["variant"], r["mode"], r["question_id"], r["seed"]) for r in records if r["kind"] == "episode"
    )
    assert len(episodes) == 8 and set(episodes.values()) == {1}
    fidelity = Counter((r["variant"], r["mode"], r["question_id"]) for r in records if r["kind"] == "fidelity")
    assert len(fidelity) == 8 and set(fidelity.values()) == {1}
    # the first run's records are kept unchanged at the head of the file
    assert records[: len(bench_runs["after_first"])] == bench_runs["after_first"]


def test_changed_settings_refuse_to_resume(bench_runs: dict, tiny_gguf: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    shutil.copytree(bench_runs["out"], out, ignore=shutil.ignore_patterns("cache"))
    args = [
        "bench",
        "--base",
        str(tiny_gguf),
        "--variants",
        "BF16",
        "--limit",
        "1",
        "--out",
        str(out),
        "--threads",
        "1",
        "--ctx",
        "4096",
        "--fidelity-tokens",
        "4096",
        "--no-tune",
        *TINY_BUDGET,
        "--max-rounds",
        "2",
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    assert "results made with other settings (budget)" in result.output and "--no-resume" in result.output
