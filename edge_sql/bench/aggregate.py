"""From the results file's records to each variant's figures (what bench.json and bench.md show)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import cast

import numpy as np

from edge_sql.bench.agreement import ResultCache
from edge_sql.bench.confidence import confidence_figures
from edge_sql.bench.figures import (
    AccuracyEntry,
    AgreementFigures,
    BenchFigures,
    DraftFigures,
    FidelityFigures,
    ModeAccuracy,
    PeakMemory,
    SpeedFigures,
    VariantRow,
)
from edge_sql.bench.nodes import mixed_hardware, node_machines, per_node_figures
from edge_sql.bench.records import BenchRecord, EpisodeRecord, FidelityRecord
from edge_sql.bench.results import WorkKey
from edge_sql.bench.variants import Variant
from edge_sql.bench.vote_mode import is_vote, split_mode, vote_figures
from edge_sql.evaluation.datasets import Question
from edge_sql.evaluation.outcomes import EvalReport, QuestionResult

TOKEN_IDS_FIELD = "tokens"


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator else None


def speed_figures(episodes: Sequence[EpisodeRecord]) -> SpeedFigures:
    """Token rates summed over all episodes and the episode wall time's median and p95
    (episodes that failed before running, e.g. a prompt too long for the context, left out)."""
    episodes = [e for e in episodes if not e.get("episode_error")]
    walls = [wall for e in episodes if (wall := e.get("wall_s")) is not None]
    prompt_tokens = sum(e.get("prompt_tokens", 0) for e in episodes)
    generated_tokens = sum(e.get("generated_tokens", 0) for e in episodes)
    return {
        "episodes": len(episodes),
        "prompt_tokens": prompt_tokens,
        "generated_tokens": generated_tokens,
        "prompt_tok_s": _ratio(prompt_tokens, sum(e.get("prompt_s", 0.0) for e in episodes)),
        "decode_tok_s": _ratio(generated_tokens, sum(e.get("generate_s", 0.0) for e in episodes)),
        "wall_s_median": float(np.median(walls)) if walls else None,
        "wall_s_p95": float(np.percentile(walls, 95)) if walls else None,
        "drafts": draft_figures(episodes),
    }


def draft_figures(episodes: Sequence[EpisodeRecord]) -> dict[str, DraftFigures]:
    """Speculative decoding per draft source, summed over episodes: drafted, accepted, rolled
    back, and the acceptance rate (what a draft source buys on these questions)."""
    totals: dict[str, DraftFigures] = {}
    for episode in episodes:
        for source, counts in (episode.get("drafts") or {}).items():
            total = totals.setdefault(source, {"drafted": 0, "accepted": 0, "rolled_back": 0, "batches": 0})
            total["drafted"] += counts["drafted"]
            total["accepted"] += counts["accepted"]
            total["rolled_back"] += counts["rolled_back"]
            total["batches"] += counts["batches"]
    for total in totals.values():
        total["acceptance"] = _ratio(total["accepted"], total["drafted"])
    return totals


def accuracy_figures(
    episodes: Sequence[EpisodeRecord], questions: dict[str, Question], modes: Sequence[str]
) -> dict[str, ModeAccuracy]:
    """Execution accuracy per mode, overall and per difficulty (the evaluation's own report)."""
    out: dict[str, ModeAccuracy] = {}
    for mode in modes:
        results = [
            QuestionResult(
                id=e["question_id"],
                db_id=e["db_id"],
                difficulty=e.get("difficulty"),
                correct=e["correct"],
                error=e.get("error"),
                predicted_sql=e.get("sql"),
                gold_sql=questions[e["question_id"]].gold_sql,
            )
            for e in episodes
            if e["mode"] == mode
        ]
        report = EvalReport(results=results, timeout_s=0.0)
        out[mode] = {
            "overall": _accuracy_entry(report.overall.to_json()),
            "by_difficulty": {d: _accuracy_entry(a.to_json()) for d, a in report.by_difficulty.items()},
        }
    return out


def _accuracy_entry(data: dict[str, int | float]) -> AccuracyEntry:
    return {"correct": int(data["correct"]), "total": int(data["total"]), "percent": float(data["percent"])}


def agreement_figures(
    episodes: Sequence[EpisodeRecord],
    reference: dict[tuple[str, str], EpisodeRecord],
    questions: dict[str, Question],
    modes: Sequence[str],
    cache: ResultCache,
) -> AgreementFigures:
    """Share of questions whose final SQL gives the reference's result set, overall and per mode."""
    agreed: dict[str, list[bool]] = {mode: [] for mode in modes}
    neither = 0
    for e in episodes:
        ref = reference.get((e["mode"], e["question_id"]))
        if ref is not None:
            db_path = questions[e["question_id"]].db_path
            agreed[e["mode"]].append(cache.agree(db_path, ref.get("sql"), e.get("sql")))
            neither += cache.result(db_path, ref.get("sql")) is None and cache.result(db_path, e.get("sql")) is None
    every = [a for values in agreed.values() for a in values]
    return {
        "overall": _ratio(sum(every), len(every)),
        "compared": len(every),
        "agreed": sum(every),
        "agreed_without_result": neither,  # of `agreed`: neither model's SQL gave a result
        **{mode: _ratio(sum(values), len(values)) for mode, values in agreed.items()},
    }


def fidelity_figures(records: Sequence[FidelityRecord]) -> FidelityFigures:
    positions = sum(r["positions"] for r in records)
    return {
        "transcripts": len(records),
        "positions": positions,
        "kl_mean": _ratio(sum(r["kl_sum"] for r in records), positions),
        "kl_max": max((r["kl_max"] for r in records), default=None),
        "top1": _ratio(sum(r["top1_agree"] for r in records), positions),
    }


def peak_memory(records: Sequence[BenchRecord], variant: str) -> PeakMemory:
    """The highest peak RSS any episodes worker of `variant` reported; when none reported (all
    crashed), `wait4`'s upper bound, flagged as such."""
    reported = [
        r["peak_rss_bytes"]
        for r in records
        if r["kind"] == "peak" and r["task"] == "episodes" and r["variant"] == variant
    ]
    if reported:
        return {"peak_rss_bytes": max(reported), "peak_rss_is_upper_bound": False}
    bounds = [
        r["maxrss_upper_bound_bytes"]
        for r in records
        if r["kind"] == "process" and r["task"] == "episodes" and r["variant"] == variant
    ]
    return {"peak_rss_bytes": max(bounds, default=None), "peak_rss_is_upper_bound": bool(bounds)}


def summarize(
    variants: Sequence[Variant],
    records: Iterable[BenchRecord],
    *,
    planned: set[WorkKey],
    questions: dict[str, Question],
    modes: Sequence[str],
    reference_name: str,
    cache: ResultCache,
) -> BenchFigures:
    """Every variant's figures, plus the raw records they come from (token ids left out)."""
    records = list(records)
    episodes = [r for r in records if r["kind"] == "episode" and WorkKey.of(r) in planned]
    fidelity = [r for r in records if r["kind"] == "fidelity" and WorkKey.of(r) in planned]
    reference = {(e["mode"], e["question_id"]): e for e in episodes if e["variant"] == reference_name}
    names = {v.name for v in variants}
    machines = node_machines(records)
    rows: list[VariantRow] = []
    single_modes = [m for m in modes if split_mode(m)[1] is None]
    for variant in variants:
        mine = [e for e in episodes if e["variant"] == variant.name]
        singles = [e for e in mine if not is_vote(e)]  # the speed and agreement figures are theirs
        loads = [r for r in records if r["kind"] == "load" and r["variant"] == variant.name]
        crashes = [r for r in records if r["kind"] == "crash" and r["variant"] == variant.name]
        row: VariantRow = {
            "name": variant.name,
            "path": str(variant.path),
            "size_bytes": variant.size_bytes,
            "load_s": loads[-1]["load_s"] if loads else None,
            "settings": loads[-1].get("settings") if loads else None,
            "tuning": loads[-1].get("tuning") if loads else None,
            **peak_memory(records, variant.name),
            "parallel": loads[-1].get("parallel", 1) if loads else None,
            **speed_figures(singles),
            "fidelity": fidelity_figures([r for r in fidelity if r["variant"] == variant.name]),
            "answer_agreement": agreement_figures(singles, reference, questions, single_modes, cache),
            "accuracy": accuracy_figures(mine, questions, modes),
            "episode_errors": [
                {"mode": e["mode"], "question_id": e["question_id"], "error": e["episode_error"]}
                for e in mine
                if e.get("episode_error")
            ],
            "crashes": [{k: v for k, v in c.items() if k != "kind"} for c in crashes],
            "per_node": per_node_figures(variant.name, singles, records, speed_figures),
            "votes": vote_figures(singles, [e for e in mine if is_vote(e)], modes),
            "confidence": confidence_figures(mine, modes),
            "mixed_hardware": False,
        }
        row["mixed_hardware"] = mixed_hardware(row["per_node"], machines)
        if row["mixed_hardware"]:  # never one figure for unlike hardware
            row["load_s"] = row["prompt_tok_s"] = row["decode_tok_s"] = row["wall_s_median"] = row["wall_s_p95"] = None
        rows.append(row)
    raw = [_without_token_ids(r) for r in episodes if r["variant"] in names]
    order = _plan_order(variants, modes, questions)  # not the order finished: Ray workers finish in any order
    return {
        "variants": rows,
        "nodes": machines,
        "episodes": sorted(raw, key=order),
        "fidelity": sorted([r for r in fidelity if r["variant"] in names], key=order),
    }


def _without_token_ids(record: EpisodeRecord) -> EpisodeRecord:
    """The record as the summary keeps it: the reference's token ids are for fidelity only."""
    kept = dict(record)
    kept.pop(TOKEN_IDS_FIELD, None)
    return cast("EpisodeRecord", kept)


def _plan_order(
    variants: Sequence[Variant], modes: Sequence[str], questions: dict[str, Question]
) -> Callable[[EpisodeRecord | FidelityRecord], tuple[int, int, int]]:
    """Sort key of records: variant, then mode, then question, in the bench's own order."""
    rank = {v.name: i for i, v in enumerate(variants)}
    mode_rank = {m: i for i, m in enumerate(modes)}
    question_rank = {q: i for i, q in enumerate(questions)}
    return lambda r: (
        rank.get(r["variant"], len(rank)),
        mode_rank.get(r["mode"], len(mode_rank)),
        question_rank.get(r["question_id"], len(question_rank)),
    )
