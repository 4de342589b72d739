"""Model specs as users type them: `synsql`, `synsql:Q4_K_M`, `owner/name:Q8_0`.

One parser for `pull`, `resolve_model` and the bench, so a spec means the same everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelSpec:
    """A model name (catalogue name, store name or repository id) and the variant asked for, if any."""

    base: str
    variant: str | None = None

    @classmethod
    def parse(cls, spec: str) -> ModelSpec:
        """`synsql:Q8_0` -> ModelSpec("synsql", "Q8_0"); without a colon (or when what follows it
        looks like a path, as in `C:\\models`), there is no variant."""
        name, sep, variant = spec.rpartition(":")
        if sep and name and variant and "/" not in variant and "\\" not in variant:
            return cls(name, variant)
        return cls(spec, None)

    def with_variant(self, variant: str) -> ModelSpec:
        return ModelSpec(self.base, variant)

    def __str__(self) -> str:
        return f"{self.base}:{self.variant}" if self.variant else self.base
