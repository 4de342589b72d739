"""`edge-sql pull`: download a model, convert it to GGUF, quantize it, and record it in the store."""

from __future__ import annotations

from pathlib import Path

import click

from edge_sql.store import pull_model
from edge_sql.store.catalog import load_catalog


def _log(message: str) -> None:
    click.echo(message, err=True)


def _task_imatrix(bf16: Path) -> Path:
    from edge_sql.evaluation.task_imatrix import task_imatrix_for

    return task_imatrix_for(bf16, log=_log)


@click.command("pull")
@click.argument("model", required=False)
@click.option(
    "--quant",
    "-q",
    default=None,
    metavar="TYPE",
    help="Variant to make: a quantization type (Q4_K_M, Q8_0, ...), a recipe name, or BF16/F16/F32. Default: Q4_K_M.",
)
@click.option("--revision", default=None, metavar="REV", help="Hub branch, tag or commit to download (default: main).")
@click.option(
    "--force",
    is_flag=True,
    help="Convert and quantize again even if the variant is in the store (downloaded files that are "
    "still current stay in the Hugging Face cache).",
)
@click.option(
    "--name",
    default=None,
    help="Store name to record the model under (default: the catalogue name, "
    "the repository's name, or the folder's name).",
)
@click.option(
    "--keep-bf16/--no-keep-bf16",
    default=True,
    show_default=True,
    help="Keep the BF16 GGUF in the store (other variants are quantized from it without converting again).",
)
@click.option(
    "--imatrix/--no-imatrix",
    "use_imatrix",
    default=True,
    show_default=True,
    help="Quantize K- and I-quants (Q6_K, Q5_K_M, Q4_K_M, IQ4_XS, Q3_K_M and their recipes) with the task "
    "importance matrix: collected once on the BF16 file over agent transcripts (`edge-sql imatrix "
    "--calibration auto`; 13k tokens of prefill: 14 min for the 2B on a shared 2-core CPU) and kept beside "
    "it. Q8_0, BF16, F16 and F32 never use one. --no-imatrix quantizes without it.",
)
def command(
    model: str | None,
    quant: str | None,
    revision: str | None,
    force: bool,
    name: str | None,
    keep_bf16: bool,
    use_imatrix: bool,
) -> None:
    """Get MODEL into the local model store, ready for `edge-sql run`.

    MODEL is a short name (synsql, sqale, bird), optionally with a variant (synsql:Q8_0), a Hugging
    Face repository id (owner/name), or a local checkpoint folder. Without MODEL: the default model,
    cwolff/qwen3.5-2b-grpo-synsql. The checkpoint is downloaded into the Hugging Face cache
    (HF_HOME; interrupted downloads resume), converted to BF16 GGUF, quantized, and recorded in the
    store (EDGE_SQL_HOME, or the user data folder). Without network, a checkpoint already in the
    cache is used; otherwise point pull at a local folder.
    """
    result = pull_model(
        model,
        quant=quant,
        revision=revision,
        force=force,
        name=name,
        keep_bf16=keep_bf16,
        log=_log,
        imatrix=_task_imatrix if use_imatrix else None,
    )
    entry = result.model
    state = "already in the store" if result.already_present else "ready"
    default = load_catalog()
    hint = (
        ""
        if (entry.name, entry.variant) == (default.default_model, default.default_variant)
        else f" --model {entry.ref}"
    )
    click.echo(f"{entry.ref} {state}: {entry.path} ({entry.size / 1e9:.2f} GB)")
    click.echo(f"run it with: edge-sql run{hint} --db DATABASE.sqlite")
