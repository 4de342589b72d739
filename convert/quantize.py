"""Quantize a GGUF with llama.cpp's own quantizer (`llama_model_quantize` in llama-cpp-python).

`quantize_gguf` takes a plain type (Q4_K_M, Q8_0, ...) or a named recipe: a base type plus
per-tensor overrides (regular expressions on GGUF tensor names, llama.cpp's `tt_overrides`,
made from the converter's tensor table), e.g. `SENSITIVE_RECIPE`, which keeps the tensors most
sensitive to quantization in the Qwen3.5 family (`SENSITIVE_TENSORS`) at Q8_0. The output is written to a
temporary file and renamed into place, so a failure leaves nothing behind.

The MTP head (the extra `blk.{n_layers}` block of a file converted with it) is quantized by
llama.cpp like any block for a plain type, so plain types match `llama-quantize`'s files. The
recipes keep it at Q8_0: it is about 3% of the weights (1.5% more file), and its precision only
decides how many drafted tokens verification accepts, the whole point of running it.

With an importance matrix (`imatrix`, convert/imatrix_file.py: checked against the model first)
the quantizer gets each weight's mean squared input per column, normalised as llama.cpp's
`llama-quantize` normalises it, and the output records the matrix as `llama-quantize` does
(`quantize.imatrix.file`, `.dataset`, `.entries_count`, `.chunks_count`). The MTP head is never
run while collecting, so it has no entries and is quantized as without a matrix.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gguf
from gguf import MODEL_TENSOR as MT
from gguf import LlamaFileType

from edge_sql.convert.atomic import atomic_output
from edge_sql.convert.gguf_file import UNQUANTIZED_FILE_TYPES, GGUFFile, read_gguf, validate_gguf
from edge_sql.convert.imatrix_file import Imatrix, check_imatrix, read_imatrix
from edge_sql.convert.qwen35 import tensor_pattern
from edge_sql.errors import ConversionError, ModelFileError
from edge_sql.interrupts import signals_deferred

T = gguf.GGMLQuantizationType

# type name -> the file type llama.cpp makes (llama_ftype)
QUANT_TYPES: dict[str, LlamaFileType] = {
    "Q8_0": LlamaFileType.MOSTLY_Q8_0,
    "Q6_K": LlamaFileType.MOSTLY_Q6_K,
    "Q5_K_M": LlamaFileType.MOSTLY_Q5_K_M,
    "Q4_K_M": LlamaFileType.MOSTLY_Q4_K_M,
    "Q4_0": LlamaFileType.MOSTLY_Q4_0,
    "IQ4_XS": LlamaFileType.MOSTLY_IQ4_XS,
    "Q3_K_M": LlamaFileType.MOSTLY_Q3_K_M,
    "F16": LlamaFileType.MOSTLY_F16,
    "BF16": LlamaFileType.MOSTLY_BF16,
}
_FILE_TYPE_NAMES = {value: name for name, value in QUANT_TYPES.items()}
# the types whose quantization an importance matrix steers (K- and I-quants; Q8_0 and Q4_0 round
# each block to its own scale, the float types do not round)
IMATRIX_TYPES = frozenset({"Q6_K", "Q5_K_M", "Q4_K_M", "IQ4_XS", "Q3_K_M"})


@dataclass(frozen=True)
class Recipe:
    """A base type plus per-tensor type overrides (regex on GGUF tensor names -> storage type)."""

    name: str
    base: str
    overrides: tuple[tuple[str, T], ...]
    description: str
    mtp_head: T | None = None  # storage of the MTP block's matrices (None: as the base type decides)


# The tensors most sensitive to quantization in Qwen3.5 (benchmarks/results/variants): the
# Gated DeltaNet output and input projections.
SENSITIVE_TENSORS = (MT.SSM_OUT, MT.ATTN_QKV, MT.ATTN_GATE)
SENSITIVE_PATTERNS = tuple(tensor_pattern(t) for t in SENSITIVE_TENSORS)
SENSITIVE_RECIPE = "Q4_K_M-sensitive-q8"  # the recipe the bench compares with the plain types
_SENSITIVE_NAMES = [gguf.TENSOR_NAMES[t].rsplit(".", 1)[-1] for t in SENSITIVE_TENSORS]  # ssm_out, ...
_SENSITIVE_LIST = ", ".join(_SENSITIVE_NAMES[:-1]) + " and " + _SENSITIVE_NAMES[-1]

RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe(
            SENSITIVE_RECIPE,
            "Q4_K_M",
            tuple((p, T.Q8_0) for p in SENSITIVE_PATTERNS),
            f"Q4_K_M, with {_SENSITIVE_LIST} (most sensitive in Qwen3.5) and the MTP head kept at Q8_0",
            mtp_head=T.Q8_0,
        ),
        Recipe(
            "Q3_K_M-sensitive-q8",
            "Q3_K_M",
            tuple((p, T.Q8_0) for p in SENSITIVE_PATTERNS),
            f"Q3_K_M, with {_SENSITIVE_LIST} and the MTP head kept at Q8_0",
            mtp_head=T.Q8_0,
        ),
    )
}


@dataclass
class QuantizeReport:
    source: Path
    output: Path
    qtype: str  # the type or recipe name asked for
    file_size: int
    seconds: float
    tensor_types: dict[str, int] = field(default_factory=dict)  # storage type -> tensor count
    imatrix: Path | None = None  # the importance matrix it was made with

    def summary(self) -> str:
        types = ", ".join(f"{n} {t}" for t, n in sorted(self.tensor_types.items(), key=lambda kv: -kv[1]))
        made = f", imatrix {self.imatrix.name}" if self.imatrix else ""
        return (
            f"wrote {self.output} ({self.qtype}{made}, {self.file_size / 1e9:.3f} GB) in {self.seconds:.1f} s; "
            f"tensors: {types}"
        )


def uses_imatrix(qtype: str) -> bool:
    """True when an importance matrix changes what `qtype` (a type or a recipe) writes."""
    recipe = RECIPES.get(qtype)
    return (recipe.base if recipe else qtype) in IMATRIX_TYPES


def choices() -> list[str]:
    """Every accepted `qtype`: plain types, then recipes."""
    return list(QUANT_TYPES) + list(RECIPES)


def quantize_gguf(
    src: Path,
    out: Path,
    qtype: str,
    *,
    force: bool = False,
    n_threads: int | None = None,
    verbose: bool = False,
    imatrix: Path | None = None,
) -> QuantizeReport:
    """Quantize the GGUF `src` to `out` as `qtype` (a type name or a recipe name), weighted by the
    importance matrix file `imatrix` when given (ImatrixError if it does not fit `src`).

    llama.cpp's log (a line per tensor) goes to stderr only when `verbose`."""
    started = time.perf_counter()
    src, out = Path(src), Path(out)
    recipe = RECIPES.get(qtype)
    base = recipe.base if recipe else qtype
    if base not in QUANT_TYPES:
        raise ConversionError(f"unknown quantization type {qtype!r}; choose one of {', '.join(choices())}")
    info = _check_input(src)
    if imatrix is not None:
        check_imatrix(read_imatrix(imatrix), info, source=Path(imatrix))
    _check_output(src, out, force=force)
    overrides = (*recipe.overrides, *mtp_overrides(info, recipe.mtp_head)) if recipe else ()
    with atomic_output(out) as tmp:
        _run_llama_quantize(src, tmp, QUANT_TYPES[base], overrides, n_threads, verbose, imatrix)
        types = tensor_type_counts(tmp)
    return QuantizeReport(
        src,
        out,
        qtype,
        out.stat().st_size,
        time.perf_counter() - started,
        types,
        Path(imatrix) if imatrix is not None else None,
    )


def tensor_type_counts(path: Path) -> dict[str, int]:
    return dict(Counter(read_gguf(path).tensor_types().values()))


def mtp_overrides(info: GGUFFile, storage: T | None) -> tuple[tuple[str, T], ...]:
    """Type overrides putting the file's MTP blocks (the last `mtp_layers` blocks) at `storage`."""
    if storage is None or not info.mtp_layers or not info.block_count:
        return ()
    first = info.block_count - info.mtp_layers
    return tuple((rf"^blk\.{bid}\.", storage) for bid in range(first, info.block_count))


def _check_input(src: Path) -> GGUFFile:
    """A complete GGUF of a model edge-sql runs, not yet quantized."""
    try:
        info = validate_gguf(src)
    except ModelFileError as e:
        raise ConversionError(f"cannot quantize: {e}", path=src) from e
    raw = info.metadata.get("general.file_type")
    if raw is not None and info.file_type not in UNQUANTIZED_FILE_TYPES:
        name = (
            _FILE_TYPE_NAMES.get(info.file_type, f"file type {raw}")
            if info.file_type is not None
            else f"file type {raw}"
        )
        raise ConversionError(f"{src} is already quantized ({name}); quantize from the F32/F16/BF16 GGUF", path=src)
    return info


def _check_output(src: Path, out: Path, *, force: bool) -> None:
    if out.exists() and not force:
        raise ConversionError(f"{out} already exists; use --force to overwrite it")
    if out.exists() and out.resolve() == src.resolve():
        raise ConversionError("the output path is the input file; choose another output path")
    if not out.parent.is_dir():
        raise ConversionError(f"the output folder {out.parent} does not exist")


def _run_llama_quantize(
    src: Path,
    out: Path,
    ftype: LlamaFileType,
    overrides: tuple[tuple[str, T], ...],
    n_threads: int | None,
    verbose: bool,
    imatrix: Path | None = None,
) -> None:
    """llama.cpp's quantizer in a child process: a signal cannot interrupt a C call in this one
    (Ctrl-C or SIGTERM would wait minutes for it), but the child can be stopped at once."""
    request = json.dumps(
        {
            "src": str(src),
            "out": str(out),
            "ftype": int(ftype),
            "n_threads": n_threads,
            "verbose": verbose,
            "imatrix": str(imatrix) if imatrix is not None else None,
            "overrides": [[pattern, int(storage)] for pattern, storage in overrides],
        }
    )
    process = None
    try:
        with signals_deferred():  # a signal inside Popen would leave the child running unseen
            process = subprocess.Popen(
                [sys.executable, "-m", "edge_sql.convert.quantize", request], stdin=subprocess.DEVNULL
            )
        status = process.wait()
    except BaseException:  # Ctrl-C or SIGTERM: stop the child; atomic_output removes its file
        if process is not None:
            process.kill()
            process.wait()
        raise
    if status != 0:
        why = "its log above says why" if verbose else "run with --verbose for its log"
        raise ConversionError(f"llama.cpp failed to quantize {src.name} ({why})")


def _quantize_in_this_process(
    src: Path,
    out: Path,
    ftype: int,
    overrides: tuple[tuple[str, int], ...],
    n_threads: int | None,
    verbose: bool,
    imatrix: Path | None = None,
) -> int:
    import llama_cpp

    from edge_sql.convert.llama_log import route_llama_log

    route_llama_log(verbose=verbose)
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = int(ftype)
    params.nthread = n_threads or os.cpu_count() or 1
    table = None
    if overrides:
        # a C array of {pattern, type}, terminated by a NULL pattern
        table = (llama_cpp.llama_model_tensor_override * (len(overrides) + 1))()
        for entry, (pattern, storage) in zip(table, overrides):
            entry.pattern = pattern.encode()
            entry.type = int(storage)
        params.tt_overrides = ctypes.cast(table, ctypes.POINTER(llama_cpp.llama_model_tensor_override))
    kept = _pass_imatrix(params, imatrix, read_imatrix(imatrix)) if imatrix is not None else None
    status = llama_cpp.llama_model_quantize(str(src).encode(), str(out).encode(), ctypes.byref(params))
    del kept  # the C arrays the quantizer read
    return status


def _pass_imatrix(params: Any, path: Path, imatrix: Imatrix) -> tuple[Any, ...]:  # params: llama_cpp's ctypes struct
    """Point `params.imatrix` at a NULL-terminated array of {name, data, size} holding the
    normalised matrix, and `params.kv_overrides` at the four keys `llama-quantize` records.
    Returns what must stay alive until the quantizer has run."""
    import llama_cpp

    values = imatrix.normalized()
    names = [name.encode() for name in values]
    table = (llama_cpp.llama_model_imatrix_data * (len(values) + 1))()
    for entry, name, data in zip(table, names, values.values()):
        entry.name = name
        entry.data = data.ctypes.data_as(ctypes.POINTER(ctypes.c_float))
        entry.size = data.size
    params.imatrix = ctypes.cast(table, ctypes.POINTER(llama_cpp.llama_model_imatrix_data))
    keys: list[tuple[str, str | int]] = [
        ("quantize.imatrix.file", str(path)),
        ("quantize.imatrix.entries_count", len(values)),
        ("quantize.imatrix.chunks_count", imatrix.chunk_count),
    ]
    if imatrix.datasets:
        keys.insert(1, ("quantize.imatrix.dataset", imatrix.datasets[0]))
    kv = (llama_cpp.llama_model_kv_override * (len(keys) + 1))()
    for entry, (key, value) in zip(kv, keys):
        entry.key = key.encode()
        if isinstance(value, str):
            entry.tag = llama_cpp.LLAMA_KV_OVERRIDE_TYPE_STR
            entry.value.val_str = value.encode()[:127]
        else:
            entry.tag = llama_cpp.LLAMA_KV_OVERRIDE_TYPE_INT
            entry.value.val_i64 = int(value)
    params.kv_overrides = ctypes.cast(kv, ctypes.POINTER(llama_cpp.llama_model_kv_override))
    return values, names, table, kv


if __name__ == "__main__":  # the child of _run_llama_quantize
    job = json.loads(sys.argv[1])
    sys.exit(
        1
        if _quantize_in_this_process(
            Path(job["src"]),
            Path(job["out"]),
            job["ftype"],
            tuple((pattern, storage) for pattern, storage in job["overrides"]),
            job["n_threads"],
            job["verbose"],
            Path(job["imatrix"]) if job["imatrix"] else None,
        )
        else 0
    )
