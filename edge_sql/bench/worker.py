"""The child-process side of a bench: one variant's episodes, or one variant's fidelity.

Run as `python -m edge_sql.bench.worker TASK.json` by `child.run_worker`. A task is a JSON
object (see `tasks.EpisodeTask` and `tasks.FidelityTask`); results are appended to the run's results
file as they finish, so a crash loses at most the item in progress.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

from tqdm import tqdm

from edge_sql.bench.child import own_peak_rss_bytes
from edge_sql.bench.results import ResultsLog, WorkKey
from edge_sql.bench.tasks import EpisodeTask, FidelityTask
from edge_sql.errors import EdgeSqlError


def run_episodes(task: EpisodeTask) -> None:
    from edge_sql.agent.budget import Budget
    from edge_sql.agent.episode import run_episode
    from edge_sql.api import load_settings
    from edge_sql.agent.prompt import load_prompt
    from edge_sql.bench.modes import prompt_for_mode
    from edge_sql.evaluation.datasets import load_dataset
    from edge_sql.evaluation.scoring import score_prediction
    from edge_sql.runtime import SamplingParams, Session
    from edge_sql.tools import ReadOnlyDatabase, Toolbox

    log = ResultsLog(Path(task.results_path))
    questions = {q.id: q for q in load_dataset(task.dataset, fmt=task.dataset_format, db_root=task.db_root)}
    prompt = load_prompt(task.prompt_file)
    budget = Budget(**task.budget)
    params = SamplingParams(seed=task.seed, greedy=task.greedy)

    settings, tuning = load_settings(Path(task.model_path), tune=task.tune, n_gpu_layers=None, n_ctx=task.n_ctx,
                                     n_threads=task.n_threads,
                                     log=lambda message: print(message, file=sys.stderr))
    if task.n_threads is not None:
        settings = dataclasses.replace(settings, n_threads=task.n_threads)
    started = time.perf_counter()
    session = Session(task.model_path, n_ctx=task.n_ctx, **settings.session_kwargs())
    load_s = time.perf_counter() - started
    started = time.perf_counter()
    session.lltokenizer()  # the grammar engine's vocabulary view: same for every variant
    log.append({"kind": "load", "variant": task.variant, "load_s": load_s,
                "grammar_setup_s": time.perf_counter() - started, "n_threads": session.info.n_threads,
                "settings": session.info.settings, "tuning": tuning,
                "n_ctx": session.n_ctx, "time": time.time()})

    for mode, question_id in tqdm(task.items, desc=f"{task.variant} episodes", unit="ep", file=sys.stderr):
        question = questions[question_id]
        key = WorkKey(task.variant, mode, question_id, task.seed)
        try:
            with ReadOnlyDatabase(question.db_path) as db:
                result = run_episode(session, Toolbox(db), question.question, evidence=question.evidence,
                                     params=params, prompt=prompt_for_mode(prompt, mode, db), budget=budget)
        except EdgeSqlError as exc:  # e.g. a schema too long for the context: the question scores 0
            log.append({"kind": "episode", **key.as_fields(), "db_id": question.db_id,
                        "difficulty": question.difficulty, "sql": None, "correct": False,
                        "error": f"episode failed: {exc}", "episode_error": str(exc)})
            continue
        score = score_prediction(result.sql, question.gold_sql, question.db_path, timeout_s=task.score_timeout_s)
        timings = session.timings
        record = {
            "kind": "episode",
            **key.as_fields(),
            "db_id": question.db_id,
            "difficulty": question.difficulty,
            "sql": result.sql,
            "correct": score.correct,
            "error": score.error,
            "stop": result.stop,
            "forced": result.forced,
            "fallback": result.fallback,
            "rounds": len(result.rounds),
            "calls": sum(len(r.calls) for r in result.rounds),
            "wall_s": result.stats["wall_s"],
            "prompt_tokens": timings.prompt_tokens,
            "prefix_tokens_restored": timings.restored_tokens,
            "prompt_s": timings.prompt_s,
            "generated_tokens": timings.generated_tokens,
            "generate_s": timings.generate_s,
            "transcript_tokens": result.stats["transcript_tokens"],
        }
        if task.record_tokens:
            record["tokens"] = session.tokens
        log.append(record)
    session.close()


def run_fidelity(task: FidelityTask) -> None:
    from edge_sql.bench.fidelity import compare_on_tokens
    from edge_sql.runtime import Session

    log = ResultsLog(Path(task.results_path))
    wanted = {(mode, qid) for mode, qid in task.keys}
    transcripts = {
        (r["mode"], str(r["question_id"])): r["tokens"][: task.max_tokens]
        for r in log.records("episode")
        if r["variant"] == task.reference_name and r.get("tokens") and (r["mode"], str(r["question_id"])) in wanted
    }
    reference = Session(task.reference_path, n_ctx=256, n_batch=task.chunk, n_threads=task.n_threads)
    variant = Session(task.model_path, n_ctx=256, n_batch=task.chunk, n_threads=task.n_threads)
    for mode, question_id in tqdm(sorted(transcripts), desc=f"{task.variant} fidelity", unit="tr", file=sys.stderr):
        started = time.perf_counter()
        stats = compare_on_tokens(reference, variant, transcripts[(mode, question_id)], chunk=task.chunk)
        log.append({"kind": "fidelity", **WorkKey(task.variant, mode, question_id, task.seed).as_fields(),
                    **asdict(stats), "seconds": time.perf_counter() - started})
    variant.close()
    reference.close()


def main(argv: list[str]) -> int:
    task = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    kind = task.pop("kind")
    runners = {"episodes": (run_episodes, EpisodeTask), "fidelity": (run_fidelity, FidelityTask)}
    if kind not in runners:
        raise SystemExit(f"unknown bench task kind {kind!r}")
    run, task_type = runners[kind]
    try:
        run(task_type(**task))
    finally:
        ResultsLog(Path(task["results_path"])).append(
            {"kind": "peak", "task": kind, "variant": task["variant"], "peak_rss_bytes": own_peak_rss_bytes()}
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
