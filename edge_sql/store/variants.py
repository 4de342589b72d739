"""Variant names: the converter's float types (BF16, F16, F32) and the quantizer's types and recipes."""

from __future__ import annotations

from edge_sql.errors import EdgeSqlError

# variant -> the converter's `outtype`; every other variant is quantized from BF16
CONVERTED_VARIANTS = {"BF16": "bf16", "F16": "f16", "F32": "f32"}
BASE_VARIANT = "BF16"


def known_variants() -> dict[str, str]:
    """Every variant edge-sql can make, keyed by its case-folded name, valued by its canonical name."""
    from edge_sql.convert.quantize import QUANT_TYPES, RECIPES

    names = [*CONVERTED_VARIANTS, *QUANT_TYPES, *RECIPES]
    return {name.casefold(): name for name in reversed(names)}


def normalize_variant(text: str) -> str:
    """The canonical spelling of variant `text` (`q4_k_m` -> `Q4_K_M`); raises for unknown names."""
    variants = known_variants()
    canonical = variants.get(text.strip().casefold())
    if canonical is None:
        listed = ", ".join(sorted(set(variants.values())))
        raise EdgeSqlError(f"unknown quantization {text!r}; choose one of: {listed}")
    return canonical


def is_converted(variant: str) -> bool:
    """True for variants the converter writes directly (no quantization step)."""
    return variant in CONVERTED_VARIANTS
