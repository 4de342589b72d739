"""The child-process side of a bench: one variant's episodes, or one variant's fidelity.

Run as `python -m edge_sql.bench.worker TASK.json` by `child.run_worker`. A task is a JSON
object (see `tasks.EpisodeTask` and `tasks.FidelityTask`); results are appended to the run's results
file as they finish, so a crash loses at most the item in progress.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tqdm import tqdm

from edge_sql.bench.child import own_peak_rss_bytes
from edge_sql.bench.machine import node_name
from edge_sql.bench.records import fidelity_record, peak_record
from edge_sql.bench.results import ResultsLog, WorkKey
from edge_sql.bench.tasks import EpisodeTask, FidelityTask


def run_episodes(task: EpisodeTask) -> None:
    from edge_sql.bench.episodes import EpisodeRunner

    log = ResultsLog(Path(task.results_path))
    runner = EpisodeRunner(task)
    log.append(runner.load_record)
    for record in tqdm(
        runner.run_many(task.items), total=len(task.items), desc=f"{task.variant} episodes", unit="ep", file=sys.stderr
    ):
        log.append(record)  # as each finishes: with --parallel, not in item order (resume goes by key)
    runner.close()


def run_fidelity(task: FidelityTask) -> None:
    from edge_sql.bench.fidelity import compare_on_tokens, generated_targets
    from edge_sql.runtime import Session

    log = ResultsLog(Path(task.results_path))
    wanted = {(mode, qid) for mode, qid in task.keys}
    transcripts = {  # the reference's tokens and the positions that predicted its own output
        (r["mode"], str(r["question_id"])): (
            tokens := r["tokens"][: task.max_tokens],
            generated_targets(r["generated_spans"], len(tokens)),
        )
        for r in log.records("episode")
        if r["variant"] == task.reference_name and r.get("tokens") and (r["mode"], str(r["question_id"])) in wanted
    }
    reference = Session(task.reference_path, n_ctx=256, n_batch=task.chunk, n_threads=task.threads)
    variant = Session(task.model_path, n_ctx=256, n_batch=task.chunk, n_threads=task.threads)
    for mode, question_id in tqdm(sorted(transcripts), desc=f"{task.variant} fidelity", unit="tr", file=sys.stderr):
        started = time.perf_counter()
        tokens, positions = transcripts[(mode, question_id)]
        stats = compare_on_tokens(reference, variant, tokens, chunk=task.chunk, positions=positions)
        key = WorkKey(task.variant, mode, question_id, task.seed)
        log.append(fidelity_record(key.as_fields(), stats, time.perf_counter() - started))
    variant.close()
    reference.close()


def main(argv: list[str]) -> int:
    task = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    kind = task.pop("kind")
    runners: dict[str, tuple[Callable[[Any], None], type]] = {  # Any: tasks
        "episodes": (run_episodes, EpisodeTask),
        "fidelity": (run_fidelity, FidelityTask),
    }
    if kind not in runners:
        raise SystemExit(f"unknown bench task kind {kind!r}")
    run, task_type = runners[kind]
    from edge_sql.interrupts import termination_cleans_up

    try:
        with termination_cleans_up():  # the bench parent stops us with SIGTERM: unwind as Ctrl-C
            run(task_type(**task))
    finally:
        ResultsLog(Path(task["results_path"])).append(
            peak_record(kind, task["variant"], own_peak_rss_bytes(), node_name())
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
