"""The model files a bench compares: the BF16 reference and its quantized variants.

A variant is named by a quantization type or recipe (`Q4_K_M`, a recipe name), optionally
with `-imatrix` for a K- or I-quant made with the task importance matrix (`Q4_K_M-imatrix`:
evaluation/task_imatrix.py, collected once per base into the cache folder), or given as a path
to a GGUF file. Named variants come from the model store when the bench runs on a store model
(`--model synsql`) and the stored file was made with an imatrix exactly when the name says so
(its header's `quantize.imatrix.file`); otherwise they are quantized from the BF16 file into
the bench's cache folder once (a later run finds them there).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from edge_sql.errors import BenchSetupError, ModelFileError
from edge_sql.store.variants import BASE_VARIANT, normalize_variant

REFERENCE = BASE_VARIANT  # "BF16": the variant every other one is compared against
PLAIN_VARIANTS = ("BF16", "Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M")
IMATRIX_SUFFIX = "-imatrix"
IMATRIX_VARIANTS = ("Q4_K_M-imatrix", "IQ4_XS-imatrix", "Q3_K_M-imatrix")  # with the task imatrix


@dataclass(frozen=True)
class Variant:
    """One model file under test; `name` labels it in every report."""

    name: str
    path: Path

    @property
    def size_bytes(self) -> int:
        return self.path.stat().st_size


def default_variant_names() -> list[str]:
    """BF16, Q8_0, Q6_K, Q5_K_M, Q4_K_M and the quantizer's sensitive-tensors recipe."""
    from edge_sql.convert.quantize import SENSITIVE_RECIPE

    return [*PLAIN_VARIANTS, SENSITIVE_RECIPE]


def parse_variant_names(text: str | None) -> list[str]:
    """`"BF16,q8_0,./x.gguf"` -> canonical names (paths kept); the reference always comes first."""
    items = [item.strip() for item in text.split(",")] if text else default_variant_names()
    names: list[str] = []
    for item in filter(None, items):
        name = item if _is_path(item) else _variant_name(item)
        if name not in names:
            names.append(name)
    if REFERENCE in names:
        names.remove(REFERENCE)
    return [REFERENCE, *names]


def _variant_name(item: str) -> str:
    """The canonical name of a named variant, `-imatrix` kept for the types an imatrix steers."""
    from edge_sql.convert.quantize import uses_imatrix

    base, weighted = split_imatrix(item)
    name = normalize_variant(base)
    if not weighted:
        return name
    if not uses_imatrix(name):
        raise BenchSetupError(
            f"{name} is not steered by an importance matrix; {IMATRIX_SUFFIX} applies to "
            "K- and I-quants (Q6_K, Q5_K_M, Q4_K_M, IQ4_XS, Q3_K_M and their recipes)"
        )
    return name + IMATRIX_SUFFIX


def split_imatrix(name: str) -> tuple[str, bool]:
    """`Q4_K_M-imatrix` -> ("Q4_K_M", True); `Q4_K_M` -> ("Q4_K_M", False)."""
    if name.casefold().endswith(IMATRIX_SUFFIX):
        return name[: -len(IMATRIX_SUFFIX)], True
    return name, False


def _steered(name: str) -> bool:
    from edge_sql.convert.quantize import uses_imatrix

    return uses_imatrix(split_imatrix(name)[0])


def made_with_imatrix(path: Path) -> bool:
    """Whether the GGUF at `path` records an importance matrix (as llama-quantize and edge-sql do)."""
    from edge_sql.convert.gguf_file import read_gguf

    return "quantize.imatrix.file" in read_gguf(path, max_array=0).metadata


def _is_path(item: str) -> bool:
    return item.lower().endswith(".gguf") or "/" in item or "\\" in item


def variant_label(name: str) -> str:
    """A path is labelled by its file name without `.gguf`."""
    return Path(name).stem if _is_path(name) else name


def prepare_variants(
    base: Path,
    names: Sequence[str],
    *,
    cache_dir: Path,
    from_store: Callable[[str], Path | None] | None = None,
    n_threads: int | None = None,
    log: Callable[[str], None] = lambda _msg: None,
    verbose: bool = False,
) -> list[Variant]:
    """The file of every variant, quantizing from `base` into `cache_dir` what is missing
    (llama.cpp's quantizer log only when `verbose`).

    `from_store(name)` may supply a variant's file (the model store); it returns None when the
    store lacks it. Raises BenchSetupError for a missing file or a duplicate label.
    """
    if not Path(base).is_file():
        raise ModelFileError(f"no such BF16 model file: {base}")
    variants: list[Variant] = []
    for name in names:
        if name == REFERENCE:
            path = Path(base)
        elif _is_path(name):
            path = Path(name).expanduser()
            if not path.is_file():
                raise ModelFileError(f"no such variant file: {path}")
        else:
            stored = from_store(split_imatrix(name)[0]) if from_store else None
            if stored is not None and _steered(name) and made_with_imatrix(stored) != split_imatrix(name)[1]:
                stored = None  # made with an imatrix where the name says without, or the other way round
            path = stored or _quantized(base, name, cache_dir, n_threads, log, verbose)
        label = variant_label(name)
        if any(v.name == label for v in variants):
            raise BenchSetupError(f"two variants are labelled {label!r}; rename one of the files")
        variants.append(Variant(label, path))
    return variants


def _quantized(
    base: Path, name: str, cache_dir: Path, n_threads: int | None, log: Callable[[str], None], verbose: bool
) -> Path:
    """`cache_dir/<base stem>-<name>.gguf`, made by the converter's quantizer when absent or
    older than `base` (a base converted again under the same name) or than its imatrix."""
    from edge_sql.convert.quantize import quantize_gguf

    qtype, weighted = split_imatrix(name)
    matrix = None
    target = Path(cache_dir) / f"{Path(base).stem}-{name}.gguf"
    target.parent.mkdir(parents=True, exist_ok=True)
    if weighted:
        from edge_sql.evaluation.task_imatrix import task_imatrix_for

        matrix = task_imatrix_for(Path(base), folder=Path(cache_dir), n_threads=n_threads, log=log)
    inputs = [Path(base)] + ([matrix] if matrix else [])
    stale = target.is_file() and target.stat().st_mtime_ns < max(p.stat().st_mtime_ns for p in inputs)
    if target.is_file() and not stale:
        return target
    why = " (the cached one is older than the base)" if stale else ""
    log(f"quantizing {Path(base).name} to {name} -> {target}{why}")
    quantize_gguf(Path(base), target, qtype, force=stale, n_threads=n_threads, verbose=verbose, imatrix=matrix)
    return target
