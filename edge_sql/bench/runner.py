"""`run_bench`: every variant's episodes and fidelity, then bench.json, bench.md and the plots.

Order of work: the BF16 reference's episodes first (their transcripts are what fidelity is
measured on), then each other variant's episodes, each variant in its own child process;
then, per variant, a child that loads BF16 and the variant side by side for fidelity.
Finished items are in the results file, so a rerun with `resume` only does what is missing.

Where that work runs is a `WorkRunner` (local_runner.py): `LocalRunner` (child processes on this
machine) unless the caller passes another; what it is asked is a `BenchConfig` (config.py). The Ray runner lives above the bench, in `edge_sql.cluster`, so the
bench never imports it; `edge-sql bench --ray` passes it in.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from edge_sql.agent.majority_vote import vote_refusal
from edge_sql.api.agent_settings import resolve_vote
from edge_sql.bench.aggregate import summarize
from edge_sql.bench.agreement import ResultCache
from edge_sql.bench.config import BenchConfig
from edge_sql.bench.figures import BenchSummary
from edge_sql.bench.local_runner import LocalRunner, WorkRunner
from edge_sql.bench.machine import machine_description
from edge_sql.bench.plots import write_plots
from edge_sql.bench.report_files import write_json, write_markdown
from edge_sql.bench.results import RESULTS_FILE_NAME, ResultsLog, WorkKey
from edge_sql.bench.variants import REFERENCE, BenchSetupError, Variant, prepare_variants
from edge_sql.bench.vote_mode import bench_modes
from edge_sql.errors import ModelFileError
from edge_sql.evaluation.datasets import Question, load_dataset, require_databases

SETTINGS_FILE_NAME = "settings.json"
CACHE_DIR_NAME = "cache"


@dataclass
class BenchOutcome:
    """Where the reports went and how much work this run did."""

    out_dir: Path
    summary: BenchSummary
    files: list[Path]
    episodes_run: int
    fidelity_run: int


def spread_by_difficulty(questions: Sequence[Question], limit: int | None) -> list[Question]:
    """The first `limit` questions taking each difficulty label in turn (file order within a label)."""
    if limit is None or limit >= len(questions):
        return list(questions)
    groups: dict[str | None, list[Question]] = {}
    for question in questions:
        groups.setdefault(question.difficulty, []).append(question)
    picked: list[Question] = []
    while len(picked) < limit:
        for group in groups.values():
            if group and len(picked) < limit:
                picked.append(group.pop(0))
    return picked


def resolve_base(config: BenchConfig) -> tuple[Path, Callable[[str], Path | None] | None]:
    """The BF16 file, and (for a store model) a lookup of variants already in the store."""
    if (config.base is None) == (config.model is None):
        raise BenchSetupError("give either --base BF16.gguf or --model NAME")
    if config.base is not None:
        return Path(config.base), None
    from edge_sql.store import resolve_model
    from edge_sql.store.resolve import looks_like_path
    from edge_sql.store.spec import ModelSpec

    model = config.model
    assert model is not None  # exactly one of base and model (checked above)
    if looks_like_path(model):
        raise BenchSetupError(
            f"--model takes a model-store name such as synsql (got the path {model!r}); "
            "give a BF16 GGUF file with --base FILE.gguf"
        )
    spec = ModelSpec.parse(model)
    if spec.variant is not None:
        raise BenchSetupError(
            f"--model takes a model name without a variant (got {config.model!r}); "
            "the bench picks the variants (see --variants)"
        )

    def from_store(variant: str) -> Path | None:
        try:
            return resolve_model(str(spec.with_variant(variant)))
        except ModelFileError:
            return None

    return resolve_model(str(spec.with_variant(REFERENCE))), from_store


def _check_settings(config: BenchConfig, out_dir: Path, log: ResultsLog) -> None:
    path = out_dir / SETTINGS_FILE_NAME
    current = config.fingerprint()
    if config.resume and path.is_file() and log.path.is_file():
        previous = json.loads(path.read_text(encoding="utf-8"))
        if previous != current:
            changed = ", ".join(k for k in current if previous.get(k) != current[k])
            raise BenchSetupError(
                f"{out_dir} holds results made with other settings ({changed}); use --no-resume or another --out"
            )
    if not config.resume:
        log.clear()
    path.write_text(json.dumps(current, indent=2) + "\n", encoding="utf-8")


def run_bench(
    config: BenchConfig, *, log: Callable[[str], None] = lambda _msg: None, runner: WorkRunner | None = None
) -> BenchOutcome:
    """Run (or resume) a bench and write its reports into `config.out_dir`. `runner` says where
    the work runs (default: `LocalRunner`); a config with `ray` set needs the Ray runner
    (`edge_sql.cluster.runner.RayRunner`), which `edge-sql bench --ray` passes."""
    if runner is None:
        if config.ray is not None:
            raise BenchSetupError(
                f"a bench on Ray (ray={config.ray!r}) runs through edge_sql.cluster.runner.RayRunner: "
                "pass run_bench(config, runner=RayRunner())"
            )
        runner = LocalRunner()
    if config.ray is not None and config.parallel is not None and config.parallel > 1:
        raise BenchSetupError(
            "--parallel runs several episodes in one local process; with --ray each actor runs "
            "one at a time and --ray-workers sets how many run at once"
        )
    if config.ray is not None and config.vote:
        raise BenchSetupError(
            "--vote runs a question's K episodes at once in one local process; with --ray each "
            "actor runs one episode at a time"
        )
    if config.parallel is not None and config.parallel < 1:
        raise BenchSetupError(f"parallel must be at least 1, got {config.parallel}")
    problem = vote_refusal(config.vote, config.episodes.greedy, flags=True)
    if problem is not None:
        raise BenchSetupError(problem)
    out_dir = Path(config.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    results = ResultsLog(out_dir / RESULTS_FILE_NAME)
    _check_settings(config, out_dir, results)
    base, from_store = resolve_base(config)
    questions = spread_by_difficulty(
        load_dataset(config.dataset, fmt=config.dataset_format, db_root=config.db_root), config.limit
    )
    if not questions:
        raise BenchSetupError(f"the dataset {config.dataset} has no questions")
    require_databases(questions)
    variants = prepare_variants(
        base,
        config.variants,
        cache_dir=config.cache_dir or out_dir / CACHE_DIR_NAME,
        from_store=from_store,
        n_threads=config.episodes.n_threads,
        log=log,
        verbose=config.verbose,
    )
    config = resolve_bench_vote(config, variants, log)
    modes = bench_modes(config.modes, config.vote)
    planned = {WorkKey(v.name, mode, q.id, config.seed) for v in variants for mode in modes for q in questions}

    episodes_run = runner.episodes(config, variants, questions, results, log)
    fidelity_run = runner.fidelity(config, variants, planned, results, log)

    figures = summarize(
        variants,
        results.records(),
        planned=planned,
        questions={q.id: q for q in questions},
        modes=modes,
        reference_name=REFERENCE,
        cache=ResultCache(),
    )
    settings = {
        **config.settings_json(),
        "out_dir": str(out_dir),
        "base": str(base),
        "reference": REFERENCE,
        "variants": [v.name for v in variants],
        "questions": len(questions),
        "question_ids": [q.id for q in questions],
    }
    summary: BenchSummary = {
        "settings": json.loads(json.dumps(settings, default=str)),
        "machine": machine_description(),
        **figures,
    }
    files = [write_json(summary, out_dir), write_markdown(summary, out_dir), *write_plots(summary, out_dir, log)]
    return BenchOutcome(out_dir, summary, files, episodes_run, fidelity_run)


def resolve_bench_vote(config: BenchConfig, variants: Sequence[Variant], log: Callable[[str], None]) -> BenchConfig:
    """`config` with its vote resolved (`resolve_vote`): "auto" is the smallest of the variants'
    planned K (`plan_sessions`, each from its own calibration, as `run --vote auto` does; one K so
    that every variant's vote mode is the same and compares), no vote when that is 1."""
    choice = resolve_vote(config.vote, lambda: _smallest_auto_vote(config, variants, log))
    return replace(config, vote=choice.k, vote_auto=config.vote_auto or choice.auto)


def _smallest_auto_vote(
    config: BenchConfig, variants: Sequence[Variant], log: Callable[[str], None]
) -> tuple[int, str]:
    """The smallest of the variants' "auto" K, and each one's line (also logged)."""
    from edge_sql.api import plan_sessions

    picks, lines = [], []
    for variant in variants:
        # without --speculate's note on what fits: the variant's worker says it when it loads
        plan = plan_sessions(config.agent_settings(variant).with_(vote="auto", speculate="off"), log=log)
        lines.append(f"{variant.name}: {plan.auto_vote_line}")
        log(lines[-1])
        picks.append(plan.auto_vote)
    return min(picks, default=1), "; ".join(lines)
