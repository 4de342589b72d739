"""Convert a Hugging Face Qwen3.5 checkpoint folder to a GGUF file (architecture `qwen35`).

`convert_checkpoint` plans the output from the checkpoint's config and tensor headers (every
dimension from config.json), checks that every tensor maps and has the shape llama.cpp
expects, then streams tensor by tensor, large tensors in blocks of rows, through
`edge_sql.convert.gguf_stream.write_gguf`. The multi-token-prediction head is kept (as
llama.cpp's converter writes it, for MTP drafting) unless `mtp=False`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from importlib import metadata
from pathlib import Path

import gguf
import numpy as np

from edge_sql.convert.checkpoint import Checkpoint, TensorSource
from edge_sql.convert.gguf_file import bf16_bits_to_f32, f32_to_bf16_bits
from edge_sql.convert.gguf_stream import PlannedTensor, write_gguf
from edge_sql.convert.qwen35 import (
    ARCH_NAME,
    DROPPED_PARTS,
    MappedTensor,
    Qwen35Dims,
    add_model_metadata,
    dropped_part,
    expected_shapes,
    map_tensor_name,
    mtp_layer_count,
)
from edge_sql.convert.tokenizer_meta import TokenizerData, add_tokenizer_metadata, read_tokenizer
from edge_sql.convert.transforms import ROW_WISE, TRANSFORMS
from edge_sql.errors import ConversionError

CONVERTER_NAME = "edge-sql convert"
OUTTYPES: dict[str, gguf.GGMLQuantizationType] = {
    "f32": gguf.GGMLQuantizationType.F32,
    "f16": gguf.GGMLQuantizationType.F16,
    "bf16": gguf.GGMLQuantizationType.BF16,
}
FILE_TYPES = {
    "f32": gguf.LlamaFileType.ALL_F32,
    "f16": gguf.LlamaFileType.MOSTLY_F16,
    "bf16": gguf.LlamaFileType.MOSTLY_BF16,
}
PIECE_ELEMENTS = 8 * 1024 * 1024  # rows are read and converted in blocks of about this many values


@dataclass
class ConversionReport:
    source: Path
    output: Path
    outtype: str
    tensors: int
    parameters: int
    dropped: dict[str, int] = field(default_factory=dict)  # "vision" / "mtp" / "tied lm_head" -> count
    file_size: int = 0
    seconds: float = 0.0
    mtp_layers: int = 0  # MTP layers written (the head llama.cpp drafts with)

    def summary(self) -> str:
        dropped = ", ".join(f"{n} {label}" for label, n in self.dropped.items()) or "none"
        mtp = f"kept ({self.mtp_layers} layer{'s' if self.mtp_layers != 1 else ''})" if self.mtp_layers else "none"
        return (
            f"wrote {self.output} ({self.outtype}, {self.file_size / 1e9:.2f} GB, {self.tensors} tensors, "
            f"{self.parameters / 1e9:.3f} B parameters) in {self.seconds:.1f} s; MTP head: {mtp}; "
            f"dropped tensors: {dropped}"
        )


def convert_checkpoint(
    src: Path,
    out: Path,
    *,
    outtype: str = "bf16",
    force: bool = False,
    show_progress: bool = True,
    source_repo: str | None = None,
    license: str | None = None,
    mtp: bool = True,
) -> ConversionReport:
    """Convert the checkpoint folder `src` to the GGUF file `out`; see the module docstring.

    `mtp=False` leaves the multi-token-prediction head out (llama.cpp's `--no-mtp`)."""
    started = time.perf_counter()
    if outtype not in OUTTYPES:
        raise ConversionError(f"unknown output type {outtype!r}; choose one of {', '.join(OUTTYPES)}")
    src, out = Path(src), Path(out)
    check_output_path(out, force=force)
    checkpoint = Checkpoint.open(src)
    dims = Qwen35Dims.from_config(checkpoint.config)
    dims = replace(dims, mtp_layers=_mtp_layers(checkpoint, dims) if mtp else 0)
    tensors, dropped = plan_tensors(checkpoint, dims, OUTTYPES[outtype])
    tokenizer = read_tokenizer(checkpoint.folder, dims.vocab_size)
    repo = source_repo or _repo_id_from_cache_path(checkpoint.folder)
    parameters = sum(int(np.prod(t.shape)) for t in tensors)
    metadata = partial(
        _add_metadata,
        dims=dims,
        tokenizer=tokenizer,
        name=(repo or checkpoint.folder.name).split("/")[-1],
        repo=repo,
        license=license or _license_from_model_card(checkpoint.folder),
        outtype=outtype,
        parameters=parameters,
    )
    write_gguf(out, ARCH_NAME, metadata, tensors, show_progress=show_progress, description=f"converting to {outtype}")
    return ConversionReport(
        source=src,
        output=out,
        outtype=outtype,
        tensors=len(tensors),
        parameters=parameters,
        dropped=dropped,
        file_size=out.stat().st_size,
        seconds=time.perf_counter() - started,
        mtp_layers=dims.mtp_layers,
    )


def _mtp_layers(checkpoint: Checkpoint, dims: Qwen35Dims) -> int:
    """MTP layers to write: the config's `mtp_num_hidden_layers` when the checkpoint holds them
    (0 when it ships no `mtp.layers.*`); llama.cpp's qwen35 runs exactly one."""
    present = mtp_layer_count(list(checkpoint.names()))
    if not present:
        return 0
    declared = dims.mtp_layers or present
    if declared != present:
        raise ConversionError(
            f"config.json declares {declared} MTP layers but the checkpoint holds {present}; "
            "convert with --no-mtp to leave the MTP head out"
        )
    if present > 1:
        raise ConversionError(
            f"the checkpoint has {present} MTP layers; llama.cpp's qwen35 runs one: convert with --no-mtp"
        )
    return present


def check_output_path(out: Path, *, force: bool) -> None:
    """Refuse to overwrite without `force`; the output folder must exist."""
    if out.exists() and not force:
        raise ConversionError(f"{out} already exists; use --force to overwrite it")
    if out.is_dir():
        raise ConversionError(f"{out} is a folder; give the path of the .gguf file to write")
    if not out.parent.is_dir():
        raise ConversionError(f"the output folder {out.parent} does not exist")


def plan_tensors(
    checkpoint: Checkpoint, dims: Qwen35Dims, outtype: gguf.GGMLQuantizationType
) -> tuple[list[PlannedTensor], dict[str, int]]:
    """Map every checkpoint tensor to its GGUF tensor or to a dropped part; check names and shapes."""
    expected = expected_shapes(dims)
    dropped: dict[str, int] = {}
    mapped: dict[str, tuple[MappedTensor, TensorSource]] = {}
    for name in sorted(checkpoint.names()):
        part = dropped_part(name, dims)
        if part is not None:
            dropped[part] = dropped.get(part, 0) + 1
            continue
        target = map_tensor_name(name, dims.n_layers)
        if target is None or target.gguf_name not in expected:
            if target is None and re.match(DROPPED_PARTS["mtp"], name):
                raise ConversionError(
                    f"cannot map the MTP head's tensor {name} to llama.cpp's nextn block; "
                    "convert with --no-mtp to leave the head out"
                )
            raise ConversionError(
                f"cannot map tensor {name} of this Qwen3.5 checkpoint to llama.cpp's qwen35 "
                f"(layer kinds: {', '.join(dims.layer_kinds)}); this variant is not supported"
            )
        source = checkpoint.get(name)
        shape = _output_shape(source.shape, target.rule.transforms)
        if shape != expected[target.gguf_name]:
            raise ConversionError(
                f"tensor {name} has shape {list(source.shape)}, but config.json implies "
                f"{list(expected[target.gguf_name])} for {target.gguf_name}"
            )
        mapped[target.gguf_name] = (target, source)
    missing = [n for n in expected if n not in mapped]
    if missing:
        raise ConversionError(f"the checkpoint lacks {len(missing)} tensors the model needs (first: {missing[0]})")
    plan = []
    for gguf_name in expected:  # embedding, blocks in order, MTP block, output norm (and output)
        target, source = mapped[gguf_name]
        shape = expected[gguf_name]
        storage = gguf.GGMLQuantizationType.F32 if target.rule.keep_f32 or len(shape) == 1 else outtype
        pieces = partial(_pieces, source, target.rule.transforms, storage, dims, gguf_name)
        plan.append(PlannedTensor(gguf_name, shape, storage, pieces))
    return plan, dropped


def _output_shape(shape: tuple[int, ...], transforms: tuple[str, ...]) -> tuple[int, ...]:
    if "squeeze_conv" in transforms and len(shape) == 3 and shape[1] == 1:
        return (shape[0], shape[2])
    return shape


def _pieces(
    source: TensorSource,
    transforms: tuple[str, ...],
    storage: gguf.GGMLQuantizationType,
    dims: Qwen35Dims,
    gguf_name: str,
) -> Iterator[np.ndarray]:
    """The tensor's converted data, in blocks of whole rows where the transforms allow it."""
    convert = partial(
        _convert_block, transforms=transforms, storage=storage, dims=dims, name=gguf_name, source_dtype=source.dtype
    )
    whole = transforms and not all(t in ROW_WISE for t in transforms)
    if whole or len(source.shape) <= 1:
        yield convert(source.read())
        return
    rows = source.shape[0]
    step = max(1, PIECE_ELEMENTS // int(np.prod(source.shape[1:])))
    for start in range(0, rows, step):
        yield convert(source.read_rows(start, min(rows, start + step)))


def _convert_block(
    raw: np.ndarray,
    *,
    transforms: tuple[str, ...],
    storage: gguf.GGMLQuantizationType,
    dims: Qwen35Dims,
    name: str,
    source_dtype: str,
) -> np.ndarray:
    passthrough = {
        "BF16": gguf.GGMLQuantizationType.BF16,
        "F16": gguf.GGMLQuantizationType.F16,
        "F32": gguf.GGMLQuantizationType.F32,
    }[source_dtype]
    if not transforms and storage == passthrough:
        return raw  # same storage type: the bytes go through untouched
    x = bf16_bits_to_f32(raw) if source_dtype == "BF16" else raw.astype(np.float32)
    for t in transforms:
        x = TRANSFORMS[t](x, dims)
    x = np.ascontiguousarray(x, dtype=np.float32)
    if storage == gguf.GGMLQuantizationType.F32:
        return x
    if storage == gguf.GGMLQuantizationType.BF16:
        return f32_to_bf16_bits(x)
    with np.errstate(over="ignore"):
        y = x.astype(np.float16)
    if not np.isfinite(y).all() and np.isfinite(x).all():
        raise ConversionError(f"{name} has values beyond F16's range (65504); use --outtype bf16 or f32")
    return y


def _add_metadata(
    writer: gguf.GGUFWriter,
    *,
    dims: Qwen35Dims,
    tokenizer: TokenizerData,
    name: str,
    repo: str | None,
    license: str | None,
    outtype: str,
    parameters: int,
) -> None:
    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_name(name)
    writer.add_size_label(gguf.size_label(parameters, 0, 0, 0))
    if repo:
        writer.add_source_repo_url(f"https://huggingface.co/{repo}")
        writer.add_string("general.source.huggingface.repository", repo)
    if license:
        writer.add_license(license)
    writer.add_string("general.converter.name", CONVERTER_NAME)
    writer.add_string("general.converter.version", metadata.version("edge-sql"))
    writer.add_file_type(FILE_TYPES[outtype])
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    add_model_metadata(writer, dims)
    add_tokenizer_metadata(writer, tokenizer)


def _repo_id_from_cache_path(folder: Path) -> str | None:
    """`owner/name` when `folder` lies in the Hugging Face cache (.../models--owner--name/snapshots/...)."""
    for part in Path(folder).resolve().parts:
        if part.startswith("models--"):
            return part[len("models--") :].replace("--", "/", 1)
    return None


def _license_from_model_card(folder: Path) -> str | None:
    """The `license:` field of README.md's YAML front matter, if the checkpoint has one."""
    readme = folder / "README.md"
    if not readme.is_file():
        return None
    text = readme.read_text(encoding="utf-8", errors="replace")
    front = re.match(r"^---\s*\n(.*?)\n---", text, re.S)
    if not front:
        return None
    match = re.search(r"^license:\s*['\"]?([\w.\-]+)", front.group(1), re.M)
    return match.group(1) if match else None
