"""The catalogue of models edge-sql knows by short name (data in `edge_sql/catalog.json`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

CATALOG_FILE = Path(__file__).resolve().parents[1] / "catalog.json"


@dataclass(frozen=True)
class CatalogEntry:
    """One known model: its short name, hub repository (plus public mirrors) and license."""

    name: str
    repo: str
    mirrors: tuple[str, ...]
    license: str
    description: str

    @property
    def repos(self) -> tuple[str, ...]:
        """The repository ids to try, in order: the primary one, then its mirrors."""
        return (self.repo, *self.mirrors)

    def matches(self, spec: str) -> bool:
        """True when `spec` is this entry's short name or one of its repository ids."""
        wanted = spec.casefold()
        return wanted == self.name.casefold() or any(wanted == r.casefold() for r in self.repos)


@dataclass(frozen=True)
class Catalog:
    """The known models and which of them (and which variant) is the default."""

    entries: tuple[CatalogEntry, ...]
    default_model: str
    default_variant: str

    def find(self, spec: str) -> CatalogEntry | None:
        """The entry whose short name or repository id is `spec` (case-insensitive), if any."""
        return next((e for e in self.entries if e.matches(spec)), None)

    @property
    def default(self) -> CatalogEntry:
        """The entry of the default model."""
        entry = self.find(self.default_model)
        if entry is None:
            raise ValueError(f"catalogue default {self.default_model!r} is not one of its models")
        return entry


def parse_catalog(data: dict) -> Catalog:
    """Builds a Catalog from the JSON structure of `catalog.json`."""
    entries = tuple(
        CatalogEntry(
            name=m["name"],
            repo=m["repo"],
            mirrors=tuple(m.get("mirrors", ())),
            license=m["license"],
            description=m["description"],
        )
        for m in data["models"]
    )
    catalog = Catalog(entries, data["default_model"], data["default_variant"])
    catalog.default  # noqa: B018 - validates the default entry
    return catalog


@lru_cache(maxsize=1)
def load_catalog() -> Catalog:
    """The catalogue shipped with edge-sql."""
    return parse_catalog(json.loads(CATALOG_FILE.read_text(encoding="utf-8")))
