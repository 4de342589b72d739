"""`edge-sql imatrix`: an importance matrix for `edge-sql quantize --imatrix` (and llama.cpp's own)."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("imatrix")
@click.argument("model", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--calibration",
    default="auto",
    show_default=True,
    metavar="auto|FILE",
    help="auto: agent transcripts in the model's protocol (the published SQaLe episodes replayed, "
    "and episodes on the bundled databases written from the bundled questions' gold SQL through "
    "the real tools; each transcript's first 2,048 tokens: 13k tokens, about 14 minutes for a 2B BF16 model "
    "on a 2-core CPU); or a UTF-8 text file.",
)
@click.option(
    "-o",
    "--output",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The imatrix file to write (llama.cpp's GGUF imatrix format, e.g. NAME.imatrix.gguf).",
)
@click.option(
    "--chunk",
    "chunk_size",
    type=click.IntRange(16),
    default=2048,
    show_default=True,
    help="Longest piece of text decoded from an empty context (longer transcripts are cut).",
)
@click.option("--threads", type=int, default=None, help="Threads for llama.cpp (default: all cores).")
@click.option("--force", is_flag=True, help="Overwrite OUTPUT if it exists.")
def command(model: Path, calibration: str, output: Path, chunk_size: int, threads: int | None, force: bool) -> None:
    """Collect the importance matrix of the BF16/F16/F32 GGUF MODEL over calibration text.

    Example:

    \b
        edge-sql imatrix synsql-BF16.gguf -o synsql.imatrix.gguf
        edge-sql quantize synsql-BF16.gguf -t IQ4_XS --imatrix synsql.imatrix.gguf -o synsql-IQ4_XS.gguf
    """
    from edge_sql.evaluation.task_imatrix import make_imatrix

    report = make_imatrix(
        model,
        output,
        calibration=calibration,
        chunk_size=chunk_size,
        n_threads=threads,
        force=force,
        log=lambda message: click.echo(message, err=True),
    )
    click.echo(report.summary())
