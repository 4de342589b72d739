"""`edge-sql convert`: a Hugging Face Qwen3.5 checkpoint -> a GGUF file (edge-sql's own converter)."""

from __future__ import annotations

import re
from pathlib import Path

import click

from edge_sql.errors import EdgeSqlError

HUB_ID = re.compile(r"^[\w.\-]+/[\w.\-]+$")


@click.command("convert")
@click.argument("src")
@click.option(
    "-o",
    "--output",
    "output",
    required=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="The GGUF file to write (written to a temporary file first, renamed at the end).",
)
@click.option(
    "--outtype",
    type=click.Choice(["bf16", "f16", "f32"]),
    default="bf16",
    show_default=True,
    help="Storage type of the weight matrices; norms and other 1-D tensors are always F32.",
)
@click.option("--force", is_flag=True, help="Overwrite OUTPUT if it exists.")
@click.option("--no-progress", is_flag=True, help="Do not show the progress bar.")
@click.option(
    "--no-mtp",
    is_flag=True,
    help="Leave out the multi-token-prediction head (kept by default, as llama.cpp's converter "
    "does, for MTP drafting; it costs about 3% more file and nothing at run time without it).",
)
def command(src: str, output: Path, outtype: str, force: bool, no_progress: bool, no_mtp: bool) -> None:
    """Convert the checkpoint SRC to GGUF (architecture qwen35) for llama.cpp.

    SRC is a local checkpoint folder (config.json, safetensors in one file or sharded, tokenizer
    files) or a Hugging Face repository id (owner/name), downloaded into the Hugging Face cache
    first. The text model, tokenizer, chat template and the multi-token-prediction head (as
    llama.cpp's converter writes it: an extra `nextn` block) go in; the vision tower is left
    out. Example:

        edge-sql convert ./qwen3.5-2b-grpo-synsql -o synsql-bf16.gguf
    """
    from edge_sql.convert.hf_to_gguf import convert_checkpoint

    folder, repo = _checkpoint_folder(src)
    report = convert_checkpoint(
        folder, output, outtype=outtype, force=force, show_progress=not no_progress, source_repo=repo, mtp=not no_mtp
    )
    click.echo(report.summary())


def _checkpoint_folder(src: str) -> tuple[Path, str | None]:
    """A local folder as is; a hub id downloaded (or found) in the Hugging Face cache."""
    path = Path(src).expanduser()
    if path.is_dir():
        return path, None
    if path.exists():
        raise EdgeSqlError(f"{src} is a file; give the checkpoint folder (with config.json and safetensors)")
    from edge_sql.store.resolve import looks_like_path

    if looks_like_path(src) or not HUB_ID.match(src):  # `./name` would pass for an owner/name id
        raise EdgeSqlError(f"{src} is neither a checkpoint folder nor a Hugging Face repository id (owner/name)")
    from edge_sql.store.hub import download_checkpoint

    snapshot = download_checkpoint(src)
    return snapshot.folder, snapshot.repo
