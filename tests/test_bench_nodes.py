"""Per-node figures: a variant run on unlike CPUs gets no averaged speed, only per-node ones."""

from __future__ import annotations

from pathlib import Path

from edge_sql.bench.aggregate import summarize
from edge_sql.bench.agreement import ResultCache
from edge_sql.bench.nodes import markdown_lines
from edge_sql.bench.results import WorkKey
from edge_sql.bench.variants import Variant
from edge_sql.evaluation import load_bundled

FAST = {"cpu_model": "Fast CPU", "cpu_count": 16}
SLOW = {"cpu_model": "Slow CPU", "cpu_count": 2}


def _episode(question, node: str, prompt_s: float, generate_s: float) -> dict:
    return {
        "kind": "episode",
        "variant": "BF16",
        "mode": "withheld",
        "question_id": question.id,
        "seed": 0,
        "db_id": question.db_id,
        "difficulty": question.difficulty,
        "sql": question.gold_sql,
        "correct": True,
        "error": None,
        "wall_s": prompt_s + generate_s,
        "prompt_tokens": 100,
        "prompt_s": prompt_s,
        "generated_tokens": 10,
        "generate_s": generate_s,
        "transcript_tokens": 110,
        "node": node,
    }


def _summary(tmp_path: Path, machines: dict[str, dict]) -> dict:
    model = tmp_path / "m.gguf"
    model.write_bytes(b"x" * 1000)
    questions = load_bundled()[:4]
    nodes = list(machines)
    episodes = [
        _episode(q, nodes[i % len(nodes)], 1.0 + 3.0 * (i % 2), 1.0 + 3.0 * (i % 2)) for i, q in enumerate(questions)
    ]
    records = [
        *(
            {"kind": "load", "variant": "BF16", "load_s": 2.0 + i, "n_threads": 2, "node": node, "machine": machine}
            for i, (node, machine) in enumerate(machines.items())
        ),
        *episodes,
        *(
            {"kind": "peak", "task": "episodes", "variant": "BF16", "peak_rss_bytes": 10_000 * (i + 1), "node": node}
            for i, node in enumerate(machines)
        ),
    ]
    planned = {WorkKey("BF16", "withheld", q.id, 0) for q in questions}
    summary = summarize(
        [Variant("BF16", model)],
        records,
        planned=planned,
        questions={q.id: q for q in questions},
        modes=["withheld"],
        reference_name="BF16",
        cache=ResultCache(),
    )
    summary["settings"] = {"modes": ["withheld"]}
    return summary


def test_unlike_cpus_are_never_averaged(tmp_path: Path) -> None:
    summary = _summary(tmp_path, {"a": FAST, "b": SLOW})
    [row] = summary["variants"]
    assert row["mixed_hardware"] is True
    assert row["decode_tok_s"] is None and row["prompt_tok_s"] is None and row["load_s"] is None
    assert row["episodes"] == 4 and row["peak_rss_bytes"] == 20_000  # counts and the highest peak stay
    a, b = row["per_node"]["a"], row["per_node"]["b"]
    assert a["episodes"] == b["episodes"] == 2
    assert a["decode_tok_s"] == 10 / 1.0 and b["decode_tok_s"] == 10 / 4.0
    assert (a["load_s"], b["load_s"], a["peak_rss_bytes"], b["peak_rss_bytes"]) == (2.0, 3.0, 10_000, 20_000)
    assert summary["nodes"] == {"a": FAST, "b": SLOW}
    text = "\n".join(markdown_lines(summary))
    assert "| BF16 | a | Fast CPU x16 | 2 | 2 |" in text and "| BF16 | b | Slow CPU x2 | 2 | 2 |" in text
    assert "different CPUs" in text and "BF16" in text.split("different CPUs")[1]


def test_like_cpus_give_one_figure(tmp_path: Path) -> None:
    summary = _summary(tmp_path, {"a": FAST, "b": dict(FAST)})
    [row] = summary["variants"]
    assert row["mixed_hardware"] is False
    assert row["decode_tok_s"] == 40 / 10.0 and row["load_s"] == 3.0
    assert "different CPUs" not in "\n".join(markdown_lines(summary))
