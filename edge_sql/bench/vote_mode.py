"""Answers by vote as a bench mode (`edge-sql bench --vote K`): names, records, figures.

A vote of K on mode `withheld` is the mode `withheld+voteK`: K sampled episodes of the question
(seeds seed..seed+K-1) whose answers `agent.majority_vote.choose` votes on. It is its own mode so that a
vote's record has its own key (resume skips finished votes; another K is another mode) and the
per-mode accuracy tables show it beside the single episode. Its record is one "episode" record
per (mode, question): the chosen SQL scored, the wall time of the whole vote and `vote` (what
`choose` says: every episode's SQL, group and failed queries, the agreement, which was chosen).
It carries no token counts: the speed figures are the single episodes'.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from edge_sql.api.agent_settings import VoteSetting, resolve_vote
from edge_sql.bench.figures import BenchSummary, VoteFigures
from edge_sql.bench.records import EpisodeRecord

VOTE_MARK = "+vote"


def vote_mode(mode: str, k: int) -> str:
    """`withheld`, 4 -> `withheld+vote4`."""
    return f"{mode}{VOTE_MARK}{k}"


def split_mode(name: str) -> tuple[str, int | None]:
    """`withheld+vote4` -> ("withheld", 4); a single-episode mode -> (mode, None)."""
    base, mark, k = name.partition(VOTE_MARK)
    return (base, int(k)) if mark and k.isdigit() else (name, None)


def is_vote(record: EpisodeRecord) -> bool:
    return split_mode(record["mode"])[1] is not None


def bench_modes(modes: Sequence[str], vote: VoteSetting) -> list[str]:
    """Every mode a bench runs: its single-episode modes, then (with a vote) their vote modes.
    `--vote auto` names no mode until it is resolved (`runner.resolve_bench_vote`)."""
    k = resolve_vote(vote, _unresolved).k
    return [*modes, *([vote_mode(m, k) for m in modes] if k else [])]


def _unresolved() -> tuple[int, str]:
    raise ValueError("--vote auto is resolved per machine before the modes are named")


def _share(values: Sequence[bool]) -> float | None:
    return sum(values) / len(values) if values else None


def vote_figures(
    singles: Sequence[EpisodeRecord], votes: Sequence[EpisodeRecord], modes: Sequence[str]
) -> list[VoteFigures]:
    """Per vote mode: execution accuracy of the vote and of the single episode on the same
    questions, the mean agreement (agreed / voters) and the wall times (one episode, the vote)."""
    out: list[VoteFigures] = []
    for mode in modes:
        base, k = split_mode(mode)
        if k is None:
            continue
        mine = [v for v in votes if v["mode"] == mode]
        alone = {e["question_id"]: e for e in singles if e["mode"] == base}
        both = [v for v in mine if v["question_id"] in alone]
        agreements = [v["vote"]["agreement"] for v in mine if v.get("vote")]
        single_walls = [
            wall
            for v in both
            if not alone[v["question_id"]].get("episode_error")
            and (wall := alone[v["question_id"]].get("wall_s")) is not None
        ]
        vote_walls = [wall for v in both if not v.get("episode_error") and (wall := v.get("wall_s")) is not None]
        out.append(
            {
                "mode": mode,
                "base_mode": base,
                "k": k,
                "votes": len(mine),
                "compared": len(both),
                "vote_accuracy": _share([v["correct"] for v in both]),
                "single_accuracy": _share([alone[v["question_id"]]["correct"] for v in both]),
                "vote_correct": sum(v["correct"] for v in both),
                "single_correct": sum(alone[v["question_id"]]["correct"] for v in both),
                "agreement_mean": float(np.mean(agreements)) if agreements else None,
                "unanimous": sum(1 for v in mine if v.get("vote") and v["vote"]["agreed"] == v["vote"]["k"]),
                "single_wall_s_median": float(np.median(single_walls)) if single_walls else None,
                "vote_wall_s_median": float(np.median(vote_walls)) if vote_walls else None,
            }
        )
    return out


def markdown_lines(summary: BenchSummary) -> list[str]:
    """The report's vote table (nothing without a vote)."""
    rows = [(row["name"], figures) for row in summary["variants"] for figures in row.get("votes") or []]
    if not rows:
        return []

    def pct(value: float | None) -> str:
        return "n/a" if value is None else f"{100 * value:.1f}%"

    def num(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.1f}"

    lines = [
        "",
        "Answers by vote: K sampled episodes per question (seeds seed..seed+K-1), the answer the result "
        "set most of them return (`agent.majority_vote.choose`), against the single episode on the same questions:",
        "",
        "| variant | mode | K | EX single episode | EX vote | mean agreement | unanimous | wall median s: one / vote |",
        "|---|---|--:|--:|--:|--:|--:|--:|",
    ]
    for name, f in rows:
        lines.append(
            f"| {name} | {f['base_mode']} | {f['k']} | {pct(f['single_accuracy'])} ({f['single_correct']}/{f['compared']}) "
            f"| {pct(f['vote_accuracy'])} ({f['vote_correct']}/{f['compared']}) | {pct(f['agreement_mean'])} "
            f"| {f['unanimous']}/{f['votes']} | {num(f['single_wall_s_median'])} / {num(f['vote_wall_s_median'])} |"
        )
    return lines
