"""Where a bench's work runs: the `WorkRunner` protocol and `LocalRunner`, this machine's.

Why apart from the driver (runner.py): the driver decides what a bench is and writes its
reports; a runner only does the pending work and appends it to the results file. The Ray
runner lives above the bench, in `edge_sql.cluster`, and `edge-sql bench --ray` passes it in.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Protocol

from edge_sql.bench.child import ChildOutcome, run_worker
from edge_sql.bench.config import BenchConfig
from edge_sql.bench.pending_work import episode_parallel, episode_task, fidelity_task, pending_fidelity, pending_items
from edge_sql.bench.records import TaskKind, crash_record, process_record
from edge_sql.bench.results import ResultsLog, WorkKey
from edge_sql.bench.variants import Variant
from edge_sql.bench.vote_mode import bench_modes, split_mode
from edge_sql.evaluation.datasets import Question
from edge_sql.runtime.tuning.settings import Settings


class WorkRunner(Protocol):
    """Where a bench's episodes and fidelity comparisons run. Each method does what the results
    file lacks, appends what it ran to it, and returns how many items ran."""

    def episodes(
        self,
        config: BenchConfig,
        variants: Sequence[Variant],
        questions: Sequence[Question],
        results: ResultsLog,
        log: Callable[[str], None],
    ) -> int: ...

    def fidelity(
        self,
        config: BenchConfig,
        variants: Sequence[Variant],
        planned: set[WorkKey],
        results: ResultsLog,
        log: Callable[[str], None],
    ) -> int: ...


class LocalRunner:
    """This machine: one child process per variant for its episodes, then one per variant that
    loads the reference beside it for fidelity (so each variant's peak RSS is its own)."""

    def episodes(
        self,
        config: BenchConfig,
        variants: Sequence[Variant],
        questions: Sequence[Question],
        results: ResultsLog,
        log: Callable[[str], None],
    ) -> int:
        # every variant's sessions first: a count that does not fit is refused before any episode runs
        sizes = {
            v.name: episode_parallel(
                config,
                v,
                pending_items(config, v, questions, results),
                functools.partial(_planned_settings, config, v, log),
            )
            for v in variants
        }
        return sum(
            _run_episodes(config, variant, questions, results, Path(config.out_dir), log, sizes[variant.name])
            for variant in variants
        )

    def fidelity(
        self,
        config: BenchConfig,
        variants: Sequence[Variant],
        planned: set[WorkKey],
        results: ResultsLog,
        log: Callable[[str], None],
    ) -> int:
        return sum(
            _run_fidelity(config, variants[0], variant, planned, results, Path(config.out_dir), log)
            for variant in variants
        )


def _planned_settings(config: BenchConfig, variant: Variant, log: Callable[[str], None]) -> Settings:
    """The llama.cpp settings `variant`'s Agent will load with: its plan's (`plan_sessions`, the
    Agent's own planner), without --speculate's note on what fits (the worker says it on loading)."""
    from edge_sql.api import plan_sessions

    return plan_sessions(config.agent_settings(variant).with_(speculate="off"), log=log).settings


def _record_process(
    results: ResultsLog, variant: Variant, task: TaskKind, outcome: ChildOutcome, log: Callable[[str], None]
) -> None:
    results.append(process_record(task, variant.name, outcome.returncode, outcome.maxrss_upper_bound_bytes))
    if not outcome.ok:
        results.append(crash_record(task, variant.name, outcome.returncode))
        log(f"{variant.name}: the {task} worker exited with status {outcome.returncode}; continuing")


def _run_episodes(
    config: BenchConfig,
    variant: Variant,
    questions: Sequence[Question],
    results: ResultsLog,
    out_dir: Path,
    log: Callable[[str], None],
    sessions: int,
) -> int:
    items = pending_items(config, variant, questions, results)
    if not items:
        log(f"{variant.name}: all {len(bench_modes(config.modes, config.vote)) * len(questions)} episodes already done")
        return 0
    votes = sum(1 for mode, _ in items if split_mode(mode)[1])
    log(
        f"{variant.name}: {len(items) - votes} episodes"
        + (f" and {votes} votes of {config.vote}" if votes else "")
        + (f", {sessions} at once" if sessions > 1 else "")
        + f" ({variant.path.name}, {variant.size_bytes / 1e6:.0f} MB)"
    )
    task = episode_task(config, variant, items, results, sessions)
    outcome = run_worker(asdict(task), out_dir)
    _record_process(results, variant, "episodes", outcome, log)
    return len(results.done("episode") & {WorkKey(variant.name, m, q, config.seed) for m, q in items})


def _run_fidelity(
    config: BenchConfig,
    reference: Variant,
    variant: Variant,
    planned: set[WorkKey],
    results: ResultsLog,
    out_dir: Path,
    log: Callable[[str], None],
) -> int:
    keys = pending_fidelity(config, reference, variant, planned, results)
    if not keys:
        return 0
    log(f"{variant.name}: fidelity against {reference.name} on {len(keys)} transcripts")
    task = fidelity_task(config, reference, variant, keys, results)
    outcome = run_worker(asdict(task), out_dir)
    _record_process(results, variant, "fidelity", outcome, log)
    return len(results.done("fidelity") & {WorkKey(variant.name, m, q, config.seed) for m, q in keys})
