"""The bench's `WorkRunner` on a Ray cluster: what `edge-sql bench --ray` hands `run_bench`.

The bench (`edge_sql.bench.runner`) runs its work locally unless it is given a runner, and
never imports this package: a bench on Ray goes through this class, which the command picks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from edge_sql.cluster.bench import run_episodes_on_ray
from edge_sql.cluster.fidelity import run_fidelity_on_ray

if TYPE_CHECKING:
    from edge_sql.bench.config import BenchConfig
    from edge_sql.bench.results import ResultsLog, WorkKey
    from edge_sql.bench.variants import Variant
    from edge_sql.evaluation.datasets import Question


class RayRunner:
    """Episodes on Ray actors (one variant loaded per actor) and fidelity as Ray tasks, on the
    cluster at `config.ray` ("local" starts one in this process)."""

    def episodes(
        self,
        config: BenchConfig,
        variants: Sequence[Variant],
        questions: Sequence[Question],
        results: ResultsLog,
        log: Callable[[str], None],
    ) -> int:
        return run_episodes_on_ray(config, variants, questions, results, log=log)

    def fidelity(
        self,
        config: BenchConfig,
        variants: Sequence[Variant],
        planned: set[WorkKey],
        results: ResultsLog,
        log: Callable[[str], None],
    ) -> int:
        return run_fidelity_on_ray(config, variants, planned, results, log=log)
