"""Packaging tells the truth: every package folder is installed, under one top-level name."""

from __future__ import annotations

import tomllib
from pathlib import Path

import edge_sql

REPO = Path(__file__).resolve().parents[1]


def _setuptools() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]


def _packages_in(folder: Path, name: str) -> set[str]:
    """Dotted names of the packages (folders with __init__.py) under `folder`, installed as `name`."""
    return {".".join((name, *init.parent.relative_to(folder).parts)) for init in folder.rglob("__init__.py")}


def test_every_package_folder_is_listed_and_nothing_else() -> None:
    config = _setuptools()
    expected = _packages_in(REPO / "edge_sql", "edge_sql") | _packages_in(REPO / "convert", "edge_sql.convert")
    assert set(config["packages"]) == expected
    assert config["package-dir"] == {"edge_sql.convert": "convert"}


def test_the_converter_is_installed_inside_edge_sql() -> None:
    import edge_sql.convert.hf_to_gguf as converter

    assert Path(converter.__file__).resolve().parent == REPO / "convert"


def test_version_has_one_source() -> None:
    from importlib import metadata

    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert metadata.version("edge-sql") == edge_sql.__version__
