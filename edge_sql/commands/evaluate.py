"""`edge-sql eval`: score a predictions file (question id -> SQL) on a labelled dataset."""

from __future__ import annotations

from pathlib import Path

import click

from edge_sql.commands.ray_options import ray_address_option
from edge_sql.evaluation.datasets import load_dataset
from edge_sql.evaluation.predictions import load_predictions
from edge_sql.evaluation.scoring import DEFAULT_TIMEOUT_S, evaluate


@click.command(name="eval")
@click.option(
    "--dataset",
    required=True,
    metavar="FILE|bundled",
    help="Questions file (BIRD dev.json or Spider dev.json style), or 'bundled' for the "
    "64-question set shipped with edge-sql over Chinook and Northwind.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["bird", "spider"]),
    default="bird",
    show_default=True,
    help="Format of the questions file (ignored for 'bundled').",
)
@click.option(
    "--db-root",
    type=click.Path(path_type=Path),
    help="Folder holding the databases as <db_id>/<db_id>.sqlite (BIRD's dev_databases/, "
    "Spider's database/). Not needed for 'bundled'.",
)
@click.option(
    "--predictions",
    required=True,
    type=click.Path(path_type=Path),
    help="JSON object mapping question id to predicted SQL; BIRD's predict_dev.json "
    "(position -> 'SQL\\t----- bird -----\\tdb_id') is accepted too.",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0.001),
    default=DEFAULT_TIMEOUT_S,
    show_default=True,
    help="Seconds each query may run; a prediction that takes longer scores 0.",
)
@click.option(
    "--json",
    "json_out",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Also write the full report (every question's result) to this JSON file.",
)
@click.option(
    "--parallel",
    "score_threads",  # the scorer's threads, not the agent's `parallel` setting
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Questions scored at the same time, each on connections of its own (every connection "
    "runs its SQL in a process of its own). The report is the same.",
)
@ray_address_option
def command(
    dataset: str,
    fmt: str,
    db_root: Path | None,
    predictions: Path,
    timeout_s: float,
    json_out: Path | None,
    ray_address: str | None,
    score_threads: int = 1,
) -> None:
    """Score predicted SQL by execution accuracy, with BIRD's rules.

    A prediction is correct when its result rows, as a set, equal the gold query's: row order
    and duplicate rows are ignored, column order counts, and values compare exactly as Python
    compares them (1 equals 1.0, 1 does not equal '1', 0.1 + 0.2 does not equal 0.3). SQL
    errors and time-outs score 0. Prints accuracy overall and per difficulty.

    Example: edge-sql eval --dataset bundled --predictions pred.json --json report.json
    """
    if ray_address is not None and score_threads > 1:
        raise click.UsageError(
            "--parallel scores on this machine; with --ray each database is a Ray task "
            "and the cluster runs them side by side"
        )
    questions = load_dataset(dataset, fmt=fmt, db_root=db_root)
    predicted = load_predictions(predictions, questions)
    if ray_address is not None:  # one Ray task per database (edge_sql.cluster)
        from edge_sql.cluster.evaluate import evaluate_on_ray

        report = evaluate_on_ray(
            questions,
            predicted,
            address=ray_address,
            timeout_s=timeout_s,
            dataset=str(dataset),
            log=lambda message: click.echo(message, err=True),
        )
    else:
        report = evaluate(
            questions,
            predicted,
            timeout_s=timeout_s,
            dataset=str(dataset),
            show_progress=True,
            threads=score_threads,
        )
    click.echo(report.format_table())
    if json_out is not None:
        report.write_json(json_out)
        click.echo(f"report written to {json_out}")
