"""Quantize a GGUF with llama.cpp's own quantizer (`llama_model_quantize` in llama-cpp-python).

`quantize_gguf` takes a plain type (Q4_K_M, Q8_0, ...) or a named recipe: a base type plus
per-tensor overrides (regular expressions on GGUF tensor names, llama.cpp's `tt_overrides`),
e.g. `Q4_K_M-sensitive-q8`, which keeps the tensors most sensitive to quantization in the
Qwen3.5 family (`ssm_out`, `attn_qkv`, `attn_gate`) at Q8_0. The output is written to a
temporary file and renamed into place, so a failure leaves nothing behind.
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

import gguf

from edge_sql.convert.atomic import atomic_output
from edge_sql.convert.gguf_layout import read_layout
from edge_sql.errors import ConversionError, ModelFileError
from edge_sql.interrupts import signals_deferred
from edge_sql.runtime.gguf_check import validate_gguf

T = gguf.GGMLQuantizationType

# type name -> llama_ftype (values of llama.h's LLAMA_FTYPE_*)
QUANT_TYPES: dict[str, int] = {
    "Q8_0": 7,
    "Q6_K": 18,
    "Q5_K_M": 17,
    "Q4_K_M": 15,
    "Q4_0": 2,
    "IQ4_XS": 30,
    "Q3_K_M": 12,
    "F16": 1,
    "BF16": 32,
}

# general.file_type values of files llama.cpp will quantize (it does not requantize by default)
UNQUANTIZED_FILE_TYPES = frozenset({0, 1, 32})  # ALL_F32, MOSTLY_F16, MOSTLY_BF16
_FILE_TYPE_NAMES = {value: name for name, value in QUANT_TYPES.items()}


@dataclass(frozen=True)
class Recipe:
    """A base type plus per-tensor type overrides (regex on GGUF tensor names -> storage type)."""

    name: str
    base: str
    overrides: tuple[tuple[str, T], ...]
    description: str


SENSITIVE_TENSORS = (r"\.ssm_out\.weight$", r"\.attn_qkv\.weight$", r"\.attn_gate\.weight$")

RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe(
            "Q4_K_M-sensitive-q8", "Q4_K_M", tuple((p, T.Q8_0) for p in SENSITIVE_TENSORS),
            "Q4_K_M, with ssm_out, attn_qkv and attn_gate (most sensitive in Qwen3.5) kept at Q8_0",
        ),
        Recipe(
            "Q3_K_M-sensitive-q8", "Q3_K_M", tuple((p, T.Q8_0) for p in SENSITIVE_TENSORS),
            "Q3_K_M, with ssm_out, attn_qkv and attn_gate kept at Q8_0",
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

    def summary(self) -> str:
        types = ", ".join(f"{n} {t}" for t, n in sorted(self.tensor_types.items(), key=lambda kv: -kv[1]))
        return f"wrote {self.output} ({self.qtype}, {self.file_size / 1e9:.3f} GB) in {self.seconds:.1f} s; tensors: {types}"


def choices() -> list[str]:
    """Every accepted `qtype`: plain types, then recipes."""
    return list(QUANT_TYPES) + list(RECIPES)


def quantize_gguf(
    src: Path, out: Path, qtype: str, *, force: bool = False, n_threads: int | None = None
) -> QuantizeReport:
    """Quantize the GGUF `src` to `out` as `qtype` (a type name or a recipe name)."""
    started = time.perf_counter()
    src, out = Path(src), Path(out)
    recipe = RECIPES.get(qtype)
    base = recipe.base if recipe else qtype
    if base not in QUANT_TYPES:
        raise ConversionError(f"unknown quantization type {qtype!r}; choose one of {', '.join(choices())}")
    _check_input(src)
    _check_output(src, out, force=force)
    with atomic_output(out) as tmp:
        _run_llama_quantize(src, tmp, QUANT_TYPES[base], recipe.overrides if recipe else (), n_threads)
        types = tensor_type_counts(tmp)
    return QuantizeReport(src, out, qtype, out.stat().st_size, time.perf_counter() - started, types)


def tensor_type_counts(path: Path) -> dict[str, int]:
    return dict(Counter(read_layout(path).tensor_types().values()))


def _check_input(src: Path) -> None:
    """A complete GGUF of a model edge-sql runs, not yet quantized."""
    try:
        info = validate_gguf(src)
    except ModelFileError as e:
        raise ConversionError(f"cannot quantize: {e}") from e
    file_type = info.metadata.get("general.file_type")
    if file_type is not None and file_type not in UNQUANTIZED_FILE_TYPES:
        name = _FILE_TYPE_NAMES.get(file_type, f"file type {file_type}")
        raise ConversionError(f"{src} is already quantized ({name}); quantize from the F32/F16/BF16 GGUF")


def _check_output(src: Path, out: Path, *, force: bool) -> None:
    if out.exists() and not force:
        raise ConversionError(f"{out} already exists; use --force to overwrite it")
    if out.exists() and out.resolve() == src.resolve():
        raise ConversionError("the output path is the input file; choose another output path")
    if not out.parent.is_dir():
        raise ConversionError(f"the output folder {out.parent} does not exist")


def _run_llama_quantize(
    src: Path, out: Path, ftype: int, overrides: tuple[tuple[str, T], ...], n_threads: int | None
) -> None:
    """llama.cpp's quantizer in a child process: a signal cannot interrupt a C call in this one
    (Ctrl-C or SIGTERM would wait minutes for it), but the child can be stopped at once."""
    request = json.dumps({"src": str(src), "out": str(out), "ftype": ftype, "n_threads": n_threads,
                          "overrides": [[pattern, int(storage)] for pattern, storage in overrides]})
    process = None
    try:
        with signals_deferred():  # a signal inside Popen would leave the child running unseen
            process = subprocess.Popen([sys.executable, "-m", "edge_sql.convert.quantize", request],
                                       stdin=subprocess.DEVNULL)
        status = process.wait()
    except BaseException:  # Ctrl-C or SIGTERM: stop the child; atomic_output removes its file
        if process is not None:
            process.kill()
            process.wait()
        raise
    if status != 0:
        raise ConversionError(f"llama.cpp failed to quantize {src.name} (its log above says why)")


def _quantize_in_this_process(
    src: Path, out: Path, ftype: int, overrides: tuple[tuple[str, int], ...], n_threads: int | None
) -> int:
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = ftype
    params.nthread = n_threads or os.cpu_count() or 1
    table = None
    if overrides:
        # a C array of {pattern, type}, terminated by a NULL pattern
        table = (llama_cpp.llama_model_tensor_override * (len(overrides) + 1))()
        for entry, (pattern, storage) in zip(table, overrides):
            entry.pattern = pattern.encode()
            entry.type = int(storage)
        params.tt_overrides = ctypes.cast(table, ctypes.POINTER(llama_cpp.llama_model_tensor_override))
    return llama_cpp.llama_model_quantize(str(src).encode(), str(out).encode(), ctypes.byref(params))


if __name__ == "__main__":  # the child of _run_llama_quantize
    job = json.loads(sys.argv[1])
    sys.exit(1 if _quantize_in_this_process(
        Path(job["src"]), Path(job["out"]), job["ftype"],
        tuple((pattern, storage) for pattern, storage in job["overrides"]), job["n_threads"],
    ) else 0)
