"""`edge-sql quantize`: a GGUF -> a quantized GGUF, with llama.cpp's quantizer."""

from __future__ import annotations

from pathlib import Path

import click

from edge_sql.convert.quantize import QUANT_TYPES, RECIPES


def _type_help() -> str:
    recipes = "; ".join(f"{r.name}: {r.description}" for r in RECIPES.values())
    return f"A type ({', '.join(QUANT_TYPES)}) or a recipe ({recipes})."


@click.command("quantize")
@click.argument("src", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("-t", "--type", "qtype", required=True, metavar="TYPE", help=_type_help())
@click.option(
    "-o",
    "--output",
    "output",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The quantized GGUF file to write (temporary file first, renamed at the end).",
)
@click.option("--threads", type=int, default=None, help="Threads for the quantizer (default: all cores).")
@click.option("--force", is_flag=True, help="Overwrite OUTPUT if it exists.")
@click.option("--verbose", is_flag=True, help="Show llama.cpp's quantizer log (a line per tensor).")
@click.option(
    "--imatrix",
    "imatrix",
    default=None,
    metavar="FILE",
    help="Weigh rounding by an importance matrix: a GGUF or legacy .dat imatrix file (from "
    "`edge-sql imatrix` or llama.cpp's llama-imatrix), or auto: the task imatrix of SRC, made "
    "beside it on first use (SRC.task.imatrix.gguf).",
)
def command(
    src: Path, qtype: str, output: Path, threads: int | None, force: bool, verbose: bool, imatrix: str | None
) -> None:
    """Quantize the F32/F16/BF16 GGUF SRC (e.g. from `edge-sql convert`) to TYPE.

    Example:

        edge-sql quantize synsql-bf16.gguf --type Q4_K_M -o synsql-Q4_K_M.gguf
    """
    from edge_sql.convert.quantize import quantize_gguf

    canonical = {name.casefold(): name for name in [*QUANT_TYPES, *RECIPES]}.get(qtype.casefold(), qtype)
    matrix = Path(imatrix) if imatrix not in (None, "auto") else None
    if imatrix == "auto":
        from edge_sql.evaluation.task_imatrix import task_imatrix_for

        matrix = task_imatrix_for(src, n_threads=threads, log=lambda message: click.echo(message, err=True))
    report = quantize_gguf(src, output, canonical, force=force, n_threads=threads, verbose=verbose, imatrix=matrix)
    click.echo(report.summary())
