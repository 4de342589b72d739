"""From the results file's records to each variant's figures (what bench.json and bench.md show)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from edge_sql.bench.agreement import ResultCache
from edge_sql.bench.confidence import confidence_figures
from edge_sql.bench.nodes import SPEED_FIELDS, mixed_hardware, node_machines, per_node_figures
from edge_sql.bench.records import BenchFigures
from edge_sql.bench.results import WorkKey
from edge_sql.bench.variants import Variant
from edge_sql.bench.vote_mode import is_vote, split_mode, vote_figures
from edge_sql.evaluation.datasets import Question
from edge_sql.evaluation.outcomes import EvalReport, QuestionResult

TOKEN_IDS_FIELD = "tokens"


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator else None


def speed_figures(episodes: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Token rates summed over all episodes and the episode wall time's median and p95
    (episodes that failed before running, e.g. a prompt too long for the context, left out)."""
    episodes = [e for e in episodes if not e.get("episode_error")]
    walls = [e["wall_s"] for e in episodes]
    return {
        "episodes": len(episodes),
        "prompt_tokens": sum(e["prompt_tokens"] for e in episodes),
        "generated_tokens": sum(e["generated_tokens"] for e in episodes),
        "prompt_tok_s": _ratio(sum(e["prompt_tokens"] for e in episodes), sum(e["prompt_s"] for e in episodes)),
        "decode_tok_s": _ratio(sum(e["generated_tokens"] for e in episodes), sum(e["generate_s"] for e in episodes)),
        "wall_s_median": float(np.median(walls)) if walls else None,
        "wall_s_p95": float(np.percentile(walls, 95)) if walls else None,
        "drafts": draft_figures(episodes),
    }


def draft_figures(episodes: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Speculative decoding per draft source, summed over episodes: drafted, accepted, rolled
    back, and the acceptance rate (what a draft source buys on these questions)."""
    totals: dict[str, dict[str, Any]] = {}
    for episode in episodes:
        for source, counts in (episode.get("drafts") or {}).items():
            total = totals.setdefault(source, {"drafted": 0, "accepted": 0, "rolled_back": 0, "batches": 0})
            for name in total:
                total[name] += counts[name]
    for total in totals.values():
        total["acceptance"] = _ratio(total["accepted"], total["drafted"])
    return totals


def accuracy_figures(
    episodes: Sequence[dict[str, Any]], questions: dict[str, Question], modes: Sequence[str]
) -> dict[str, Any]:
    """Execution accuracy per mode, overall and per difficulty (the evaluation's own report)."""
    out: dict[str, Any] = {}
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
            "overall": report.overall.to_json(),
            "by_difficulty": {d: a.to_json() for d, a in report.by_difficulty.items()},
        }
    return out


def agreement_figures(
    episodes: Sequence[dict[str, Any]],
    reference: dict[tuple[str, str], dict[str, Any]],
    questions: dict[str, Question],
    modes: Sequence[str],
    cache: ResultCache,
) -> dict[str, Any]:
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


def fidelity_figures(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    positions = sum(r["positions"] for r in records)
    return {
        "transcripts": len(records),
        "positions": positions,
        "kl_mean": _ratio(sum(r["kl_sum"] for r in records), positions),
        "kl_max": max((r["kl_max"] for r in records), default=None),
        "top1": _ratio(sum(r["top1_agree"] for r in records), positions),
    }


def peak_memory(records: Sequence[dict[str, Any]], variant: str) -> dict[str, Any]:
    """The highest peak RSS any episodes worker of `variant` reported; when none reported (all
    crashed), `wait4`'s upper bound, flagged as such."""
    mine = [r for r in records if r.get("task") == "episodes" and r["variant"] == variant]
    reported = [r["peak_rss_bytes"] for r in mine if r["kind"] == "peak"]
    if reported:
        return {"peak_rss_bytes": max(reported), "peak_rss_is_upper_bound": False}
    bounds = [r["maxrss_upper_bound_bytes"] for r in mine if r["kind"] == "process"]
    return {"peak_rss_bytes": max(bounds, default=None), "peak_rss_is_upper_bound": bool(bounds)}


def summarize(
    variants: Sequence[Variant],
    records: Iterable[dict[str, Any]],
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
    rows = []
    single_modes = [m for m in modes if split_mode(m)[1] is None]
    for variant in variants:
        mine = [e for e in episodes if e["variant"] == variant.name]
        singles = [e for e in mine if not is_vote(e)]  # the speed and agreement figures are theirs
        loads = [r for r in records if r["kind"] == "load" and r["variant"] == variant.name]
        crashes = [r for r in records if r["kind"] == "crash" and r["variant"] == variant.name]
        rows.append(
            {
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
            }
        )
        if mixed_hardware(rows[-1]["per_node"], machines):  # never one figure for unlike hardware
            rows[-1].update({"mixed_hardware": True, "load_s": None, **dict.fromkeys(SPEED_FIELDS)})
        else:
            rows[-1]["mixed_hardware"] = False
    raw = [{k: v for k, v in r.items() if k != TOKEN_IDS_FIELD} for r in episodes if r["variant"] in names]
    order = _plan_order(variants, modes, questions)  # not the order finished: Ray workers finish in any order
    return {
        "variants": rows,
        "nodes": machines,
        "episodes": sorted(raw, key=order),
        "fidelity": sorted([r for r in fidelity if r["variant"] in names], key=order),
    }


def _plan_order(variants: Sequence[Variant], modes: Sequence[str], questions: dict[str, Question]) -> Any:
    """Sort key of records: variant, then mode, then question, in the bench's own order."""
    rank = {v.name: i for i, v in enumerate(variants)}
    mode_rank = {m: i for i, m in enumerate(modes)}
    question_rank = {q: i for i, q in enumerate(questions)}
    return lambda r: (
        rank.get(r["variant"], len(rank)),
        mode_rank.get(r["mode"], len(mode_rank)),
        question_rank.get(r["question_id"], len(question_rank)),
    )
