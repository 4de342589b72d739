"""Comparing prompt templates: one bench per template, and a table that sets them side by side.

`edge-sql bench --prompt-file sqale-v1 --prompt-file sqale-v2` runs the whole bench once per
template, each in its own folder under the output folder (`<out>/<template version>/`, so each
resumes on its own and has its full report), with one shared cache of quantized files. The
comparison table (`templates.md`, `templates.json`) gives, for each template and variant,
execution accuracy per mode, answer agreement with BF16 and the episode's cost.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TypedDict

from edge_sql.agent.prompt import load_prompt
from edge_sql.bench.config import BenchConfig
from edge_sql.bench.figures import AccuracyEntry
from edge_sql.bench.local_runner import WorkRunner
from edge_sql.bench.runner import CACHE_DIR_NAME, BenchOutcome, run_bench
from edge_sql.bench.variants import BenchSetupError

COMPARISON_JSON = "templates.json"
COMPARISON_MARKDOWN = "templates.md"


def run_template_comparison(
    config: BenchConfig,
    prompt_files: Sequence[str | Path],
    *,
    log: Callable[[str], None] = lambda _msg: None,
    runner: WorkRunner | None = None,
) -> tuple[list[BenchOutcome], list[Path]]:
    """Run the bench of `config` once per template (on `runner`, see `run_bench`); returns the
    outcomes and the comparison files."""
    versions = [load_prompt(file).version for file in prompt_files]  # bad files fail before any work
    if len(set(versions)) != len(versions):
        raise BenchSetupError(f"two templates have the same version ({', '.join(versions)}): give each its own")
    out_dir = Path(config.out_dir)
    outcomes = []
    for file, version in zip(prompt_files, versions):
        log(f"template {version}")
        sub = replace(
            config,
            out_dir=out_dir / version,
            episodes=config.episodes.with_(prompt_file=Path(file)),
            cache_dir=config.cache_dir or out_dir / CACHE_DIR_NAME,
        )
        outcomes.append(run_bench(sub, log=log, runner=runner))
    table = comparison(outcomes, versions)
    json_path = out_dir / COMPARISON_JSON
    json_path.write_text(json.dumps(table, indent=2) + "\n", encoding="utf-8")
    markdown_path = out_dir / COMPARISON_MARKDOWN
    markdown_path.write_text(comparison_markdown(table, config.modes), encoding="utf-8")
    return outcomes, [json_path, markdown_path]


class TemplateRow(TypedDict):
    template: str
    variant: str
    accuracy: dict[str, AccuracyEntry]
    answer_agreement: float | int | None
    episodes: int
    wall_s_median: float | None
    generated_tokens: int
    out_dir: str


class TemplateComparison(TypedDict):
    """templates.json: the templates compared and a row per (template, variant)."""

    templates: list[str]
    rows: list[TemplateRow]


def comparison(outcomes: Sequence[BenchOutcome], versions: Sequence[str]) -> TemplateComparison:
    """One row per (template, variant) with the figures that tell templates apart."""
    rows: list[TemplateRow] = []
    for outcome, version in zip(outcomes, versions):
        for variant in outcome.summary["variants"]:
            rows.append(
                {
                    "template": version,
                    "variant": variant["name"],
                    "accuracy": {mode: figures["overall"] for mode, figures in variant["accuracy"].items()},
                    "answer_agreement": variant["answer_agreement"]["overall"],
                    "episodes": variant["episodes"],
                    "wall_s_median": variant["wall_s_median"],
                    "generated_tokens": variant["generated_tokens"],
                    "out_dir": str(outcome.out_dir),
                }
            )
    return {"templates": list(versions), "rows": rows}


def comparison_markdown(table: TemplateComparison, modes: Sequence[str]) -> str:
    def accuracy(entry: AccuracyEntry | None) -> str:
        if not entry or not entry.get("total"):
            return "n/a"
        return f"{entry['percent']:.1f}% ({entry['correct']}/{entry['total']})"

    def number(value: float | None, fmt: str) -> str:
        return "n/a" if value is None else format(value, fmt)

    lines = [
        "# edge-sql bench: prompt templates compared",
        "",
        f"Templates: {', '.join(table['templates'])}. Each template's full report is in its own folder.",
        "",
        "| template | variant | "
        + " | ".join(f"EX {mode}" for mode in modes)
        + " | agreement with BF16 | episodes | wall median s | generated tokens |",
        "|---|---|" + "---:|" * len(modes) + "---:|---:|---:|---:|",
    ]
    for row in table["rows"]:
        cells = [accuracy(row["accuracy"].get(mode)) for mode in modes]
        agreement = "n/a" if row["answer_agreement"] is None else f"{100 * row['answer_agreement']:.1f}%"
        lines.append(
            f"| {row['template']} | {row['variant']} | "
            + " | ".join(cells)
            + f" | {agreement} | {row['episodes']} | {number(row['wall_s_median'], '.1f')} | {row['generated_tokens']} |"
        )
    return "\n".join(lines) + "\n"
