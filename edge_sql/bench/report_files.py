"""Writing a bench's reports: bench.json (every figure) and bench.md (the tables)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from edge_sql.bench.confidence import confidence_lines
from edge_sql.bench.figures import AccuracyEntry, BenchSummary, ModeAccuracy, VariantRow
from edge_sql.bench.nodes import markdown_lines as node_lines
from edge_sql.bench.vote_mode import bench_modes
from edge_sql.bench.vote_mode import markdown_lines as vote_lines
from edge_sql.evaluation.outcomes import DIFFICULTY_ORDER

JSON_NAME = "bench.json"
MARKDOWN_NAME = "bench.md"


def write_json(summary: BenchSummary, out_dir: Path) -> Path:
    path = out_dir / JSON_NAME
    path.write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def _num(value: float | None, fmt: str) -> str:
    return "n/a" if value is None else format(value, fmt)


def _size(n_bytes: int | None) -> str:
    return "n/a" if n_bytes is None else f"{n_bytes / 1e9:.2f} GB" if n_bytes >= 1e8 else f"{n_bytes / 1e6:.1f} MB"


def _accuracy(entry: AccuracyEntry | None) -> str:
    if not entry or not entry["total"]:
        return "n/a"
    return f"{entry['percent']:.1f}% ({entry['correct']}/{entry['total']})"


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _overall(row: VariantRow, mode: str) -> AccuracyEntry | None:
    """A mode's overall accuracy in the row, None where the mode did not run."""
    entry = row["accuracy"].get(mode)
    return entry["overall"] if entry else None


def _by_difficulty(entry: ModeAccuracy | None) -> dict[str, AccuracyEntry]:
    return entry["by_difficulty"] if entry else {}


def _difficulties(rows: Sequence[VariantRow], modes: Sequence[str]) -> list[str]:
    labels = {d for row in rows for mode in modes for d in _by_difficulty(row["accuracy"].get(mode))}
    return [d for d in DIFFICULTY_ORDER if d in labels] + sorted(labels - set(DIFFICULTY_ORDER))


def markdown(summary: BenchSummary) -> str:
    """The main table (one row per variant) and execution accuracy per difficulty."""
    rows = summary["variants"]
    modes = bench_modes(summary["settings"]["modes"], summary["settings"].get("vote"))
    reference = summary["settings"]["reference"]
    lines = [
        "# edge-sql bench",
        "",
        *([f"**{summary['settings']['note']}**", ""] if summary["settings"].get("note") else []),
        f"Model: `{summary['settings']['base']}`; dataset: {summary['settings']['dataset']} "
        f"({summary['settings']['questions']} questions x modes {', '.join(summary['settings']['modes'])}, seed {summary['settings']['seed']}).",
        f"KL and top-1 compare each variant's next-token distributions with {reference}'s, teacher-forced on "
        f"{reference}'s own transcripts, at the tokens {reference} wrote itself (not the prompt or tool results); answer agreement is the share of questions whose final SQL returns "
        f"{reference}'s result set (or, like {reference}'s, no result).",
        "",
        "| variant | size | load s | peak RSS | prompt tok/s | decode tok/s (grammar) | wall median / p95 s "
        "| KL mean | top-1 | answer agreement | EX withheld | EX given |",
        "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for row in rows:
        fidelity = row["fidelity"]
        lines.append(
            f"| {row['name']}{' (crashed)' if row['crashes'] else ''} | {_size(row['size_bytes'])} "
            f"| {_num(row['load_s'], '.2f')} | {'<= ' if row['peak_rss_is_upper_bound'] else ''}{_size(row['peak_rss_bytes'])} "
            f"| {_num(row['prompt_tok_s'], '.1f')} | {_num(row['decode_tok_s'], '.1f')} "
            f"| {_num(row['wall_s_median'], '.1f')} / {_num(row['wall_s_p95'], '.1f')} "
            f"| {_num(fidelity['kl_mean'], '.5f')} | {_share(fidelity['top1'])} "
            f"| {_share(row['answer_agreement']['overall'])} "
            f"| {_accuracy(_overall(row, 'withheld'))} "
            f"| {_accuracy(_overall(row, 'given'))} |"
        )
    lines += [
        "",
        "llama.cpp settings each variant ran with: "
        + "; ".join(f"{row['name']} {row.get('settings') or '?'} ({row.get('tuning') or '?'})" for row in rows)
        + ".",
    ]
    drafted = [(row["name"], source, d) for row in rows for source, d in (row.get("drafts") or {}).items()]
    if drafted:
        lines += [
            "",
            "Speculative decoding, draft tokens accepted per source: "
            + "; ".join(
                f"{name} {source} {d['accepted']}/{d['drafted']} ({_share(d['acceptance'])}; "
                f"{d['rolled_back']} rolled back)"
                for name, source, d in drafted
            )
            + ".",
        ]
    lines += [
        "",
        "Answer agreement counts: "
        + "; ".join(
            f"{row['name']} {row['answer_agreement']['agreed']}/{row['answer_agreement']['compared']}"
            f" ({row['answer_agreement']['agreed_without_result']} with no result from either)"
            for row in rows
        )
        + ".",
    ]
    difficulties = _difficulties(rows, modes)
    if difficulties:
        lines += [
            "",
            "Execution accuracy per difficulty:",
            "",
            "| variant | mode | " + " | ".join(difficulties) + " | overall |",
            "|---|---|" + "--:|" * (len(difficulties) + 1),
        ]
        for row in rows:
            for mode in modes:
                by_difficulty = _by_difficulty(row["accuracy"].get(mode))
                cells = [_accuracy(by_difficulty.get(d)) for d in difficulties]
                lines.append(
                    f"| {row['name']} | {mode} | " + " | ".join(cells) + f" | {_accuracy(_overall(row, mode))} |"
                )
    lines += vote_lines(summary)
    lines += confidence_lines(rows)
    lines += node_lines(summary)
    failed = [(row["name"], e) for row in rows for e in row["episode_errors"]]
    if failed:
        lines += ["", "Episodes that could not run (scored 0, left out of the speed figures):", ""]
        lines += [f"- {name}, {e['mode']}, question {e['question_id']}: {e['error']}" for name, e in failed]
    crashed = [(row["name"], c) for row in rows for c in row["crashes"]]
    if crashed:
        lines += ["", "Crashed worker processes:", ""]
        lines += [
            f"- {name}: {c['task']} "
            + (
                f"exited with status {c['returncode']}"
                if c.get("returncode") is not None
                else f"failed on Ray: {c.get('error')}"
            )
            for name, c in crashed
        ]
    return "\n".join(lines) + "\n"


def write_markdown(summary: BenchSummary, out_dir: Path) -> Path:
    path = out_dir / MARKDOWN_NAME
    path.write_text(markdown(summary), encoding="utf-8")
    return path
