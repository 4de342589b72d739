"""benchmarks/ is importable as it is laid out: a package of folders whose scripts run as
`python -m benchmarks.FOLDER.SCRIPT` from the repository's root, reaching their helpers by package
name. Nothing puts a folder on sys.path (here or in tests/), no script is over 450 lines, and
every command the docs write for a benchmark names a module that is there."""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "benchmarks"
# At the top stay the package itself and the GPU check's pack builder and shell script (the
# paths the GPU device check is named by).
TOP = {"__init__.py", "gpu_pack.py"}
MAX_LINES = 450
COMMAND = re.compile(r"\bpython3? (?:-m (benchmarks(?:\.\w+)+)|(benchmarks/[\w/]+\.py))")


def _tracked(*patterns: str) -> list[Path]:
    listed = subprocess.run(["git", "ls-files", *patterns], cwd=REPO, check=True, capture_output=True, text=True)
    return [REPO / name for name in listed.stdout.split() if (REPO / name).is_file()]


def test_every_script_is_in_a_folder_of_the_package() -> None:
    assert {path.name for path in BENCH.glob("*.py")} == TOP
    folders = {path.parent for path in BENCH.rglob("*.py")}
    assert sorted(str(f.relative_to(REPO)) for f in folders if not (f / "__init__.py").is_file()) == []


def test_nothing_puts_a_folder_on_sys_path() -> None:
    changed = []
    for path in sorted([*BENCH.rglob("*.py"), *(REPO / "tests").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            called = isinstance(node, ast.Attribute) and node.attr in ("insert", "append", "extend")
            if called and ast.unparse(node.value) == "sys.path":
                changed.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert changed == []


def test_no_benchmark_module_is_over_450_lines() -> None:
    sizes = {str(p.relative_to(REPO)): len(p.read_text(encoding="utf-8").splitlines()) for p in BENCH.rglob("*.py")}
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}


def test_every_documented_benchmark_command_names_a_module_that_is_there() -> None:
    """README.md, docs/, the results' READMEs and the scripts' own docstrings: `python -m
    benchmarks.X.Y` names a module file; a script run by its path is only the pack builder
    (benchmarks/gpu_pack.py, which imports nothing of the package)."""
    texts = _tracked("README.md", "docs/*.md", "benchmarks/**/README.md", "benchmarks/*.py", "benchmarks/**/*.py")
    history = BENCH / "results" / "README.md"  # maps the commands the results were made with to today's
    found, wrong = 0, []
    for path in [p for p in texts if p != history]:
        for module, script in COMMAND.findall(path.read_text(encoding="utf-8")):
            found += 1
            if module and not (REPO / (module.replace(".", "/") + ".py")).is_file():
                wrong.append(f"{path.relative_to(REPO)}: {module}")
            if script and script != "benchmarks/gpu_pack.py":
                wrong.append(f"{path.relative_to(REPO)}: python {script}")
    assert found > 30 and wrong == []
