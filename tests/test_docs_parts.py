"""The two maps of the code say what the code is: overview.md's parts table and
architecture.md's package table list every package on disk, in the order `LAYERS`
(tests/test_packaging.py) checks the imports against, and nothing else."""

from __future__ import annotations

import re
from pathlib import Path

from test_packaging import LAYERS, LEAF_MODULES

REPO = Path(__file__).resolve().parents[1]
# rows that are modules or the package itself, not packages: placed in LAYERS, not on disk as folders
NOT_FOLDERS = {*LEAF_MODULES, "edge_sql", "edge_sql.cli", "edge_sql.__main__"}


def _first_cells(page: str, heading: str) -> list[str]:
    """The first column of the first table under `heading` in docs/`page`."""
    text = (REPO / "docs" / page).read_text(encoding="utf-8")
    after = text[text.index(heading) :]
    rows = re.findall(r"^\| (.+?) \|", after[after.index("\n|") :], flags=re.M)
    cells = []
    for row in rows[1:] if rows and rows[0] in ("part", "package") else rows:
        if not row.startswith("`"):
            break
        cells.append(row)
    return cells


def _layer_packages() -> list[str]:
    """The packages of LAYERS, bottom first (the leaf modules and the package itself left out)."""
    return [name for layer in LAYERS for name in layer if name not in NOT_FOLDERS]


def test_the_packages_on_disk_are_the_layers() -> None:
    on_disk = {f"edge_sql.{init.parent.name}" for init in (REPO / "edge_sql").glob("*/__init__.py")}
    assert on_disk | {"edge_sql.convert"} == set(_layer_packages())


def test_architecture_lists_every_package_in_layer_order() -> None:
    cells = _first_cells("architecture.md", "## Packages, bottom to top")
    names = [name for cell in cells for name in re.findall(r"`(edge_sql(?:\.[a-z_]+)?)`", cell)]
    assert [name for name in names if name not in NOT_FOLDERS] == _layer_packages()
    assert {name for name in names if name in NOT_FOLDERS} == NOT_FOLDERS


def test_overview_lists_every_part_in_layer_order() -> None:
    cells = _first_cells("overview.md", "## The parts, in the order data flows")
    parts = [f"edge_sql.{name}" for cell in cells for name in re.findall(r"`([a-z_]+)/`", cell)]
    assert parts == _layer_packages()
