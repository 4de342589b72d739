"""The model files a bench compares: the BF16 reference and its quantized variants.

A variant is named by a quantization type or recipe (`Q4_K_M`, a recipe name), or given as
a path to a GGUF file. Named variants come from the model store when the bench runs on a
store model (`--model synsql`), and otherwise are quantized from the BF16 file into the
bench's cache folder once (a later run finds them there).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from edge_sql.errors import BenchSetupError, ModelFileError
from edge_sql.store.variants import BASE_VARIANT, normalize_variant

REFERENCE = BASE_VARIANT  # "BF16": the variant every other one is compared against
PLAIN_VARIANTS = ("BF16", "Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M")


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
        name = item if _is_path(item) else normalize_variant(item)
        if name not in names:
            names.append(name)
    if REFERENCE in names:
        names.remove(REFERENCE)
    return [REFERENCE, *names]


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
            path = (from_store(name) if from_store else None) or _quantized(base, name, cache_dir, n_threads, log, verbose)
        label = variant_label(name)
        if any(v.name == label for v in variants):
            raise BenchSetupError(f"two variants are labelled {label!r}; rename one of the files")
        variants.append(Variant(label, path))
    return variants


def _quantized(base: Path, name: str, cache_dir: Path, n_threads: int | None, log: Callable[[str], None],
               verbose: bool) -> Path:
    """`cache_dir/<base stem>-<name>.gguf`, made by the converter's quantizer when absent or
    older than `base` (a base converted again under the same name)."""
    from edge_sql.convert.quantize import quantize_gguf

    target = Path(cache_dir) / f"{Path(base).stem}-{name}.gguf"
    stale = target.is_file() and target.stat().st_mtime_ns < Path(base).stat().st_mtime_ns
    if target.is_file() and not stale:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    why = " (the cached one is older than the base)" if stale else ""
    log(f"quantizing {Path(base).name} to {name} -> {target}{why}")
    quantize_gguf(Path(base), target, name, force=stale, n_threads=n_threads, verbose=verbose)
    return target
