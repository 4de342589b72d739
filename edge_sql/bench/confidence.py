"""Accuracy by confidence: whether the answer checks' `checked` / `unchecked` / `doubtful`
(edge_sql/checks) mean something for the model benched.

Per mode, each level's answers and how many were right, and the risk-coverage table: answering
only at or above a level, the share of questions answered (coverage) and the accuracy of those
answers. An episode recorded before the checks existed has no level and is counted apart.
"""

from __future__ import annotations

from collections.abc import Sequence

from edge_sql.bench.figures import ConfidenceFigures, CoveragePoint, LevelFigures, VariantRow
from edge_sql.bench.records import EpisodeRecord
from edge_sql.checks import CONFIDENCE_LEVELS

# best first: answering at or above `checked` answers least and (if the checks mean something) best
LEVELS_BEST_FIRST = tuple(reversed(CONFIDENCE_LEVELS))


def confidence_figures(episodes: Sequence[EpisodeRecord], modes: Sequence[str]) -> dict[str, ConfidenceFigures]:
    """{mode: {"levels": {level: {answers, right, accuracy}}, "coverage": [{level, answered,
    coverage, accuracy}], "unlabelled": n}} from the bench's episode records."""
    out: dict[str, ConfidenceFigures] = {}
    for mode in modes:
        mine = [e for e in episodes if e["mode"] == mode]
        if not mine:
            continue
        levels: dict[str, LevelFigures] = {}
        for level in LEVELS_BEST_FIRST:
            at = [e for e in mine if e.get("confidence") == level]
            right = sum(1 for e in at if e["correct"])
            levels[level] = {"answers": len(at), "right": right, "accuracy": right / len(at) if at else None}
        coverage: list[CoveragePoint] = []
        answered = kept_right = 0
        for level in LEVELS_BEST_FIRST:
            answered += levels[level]["answers"]
            kept_right += levels[level]["right"]
            coverage.append(
                {
                    "level": level,
                    "answered": answered,
                    "right": kept_right,
                    "coverage": answered / len(mine),
                    "accuracy": kept_right / answered if answered else None,
                }
            )
        out[mode] = {
            "levels": levels,
            "coverage": coverage,
            "questions": len(mine),
            "unlabelled": sum(1 for e in mine if e.get("confidence") not in LEVELS_BEST_FIRST),
        }
    return out


def confidence_lines(rows: Sequence[VariantRow]) -> list[str]:
    """The markdown table: per variant and mode, each level's accuracy and the risk-coverage."""
    if not any(row.get("confidence") for row in rows):
        return []
    lines = [
        "",
        "Accuracy by confidence (the answer checks): answering only at or above a level, the share "
        "of questions answered and how many of those were right:",
        "",
        "| variant | mode | level | answers | right | accuracy | answered at or above | coverage "
        "| accuracy at or above |",
        "|---|---|---|--:|--:|--:|--:|--:|--:|",
    ]
    for row in rows:
        for mode, figures in (row.get("confidence") or {}).items():
            for point in figures["coverage"]:
                level = figures["levels"][point["level"]]
                lines.append(
                    f"| {row['name']} | {mode} | {point['level']} | {level['answers']} | {level['right']} "
                    f"| {_share(level['accuracy'])} | {point['answered']}/{figures['questions']} "
                    f"| {_share(point['coverage'])} | {_share(point['accuracy'])} |"
                )
    return lines


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"
