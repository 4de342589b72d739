"""Packaging tells the truth: every package folder is installed, under one top-level name."""

from __future__ import annotations

import ast
import io
import tokenize
import tomllib
from collections.abc import Iterator
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


def test_the_public_api_is_exported_without_loading_llama_cpp() -> None:
    """`edge_sql` names its API in __all__; importing it (as the CLI does) leaves llama.cpp unloaded."""
    import subprocess
    import sys

    import edge_sql.errors

    errors = [
        name
        for name, value in vars(edge_sql.errors).items()
        if isinstance(value, type) and value.__module__ == "edge_sql.errors" and not name.startswith("_")
    ]
    assert len(errors) == 36  # every error a caller can meet, importable from the package itself
    assert sorted(edge_sql.__all__) == sorted(
        ["Agent", "Ask", "Budget", "Checks", "EpisodeResult", "check_sql", "list_tables_for", *errors]
    )
    assert all(getattr(edge_sql, name) is getattr(edge_sql.errors, name) for name in errors)
    code = (
        "import sys, edge_sql; import edge_sql.cli; loaded = 'llama_cpp' in sys.modules; "
        "from edge_sql import Agent, Budget, EdgeSqlError, EpisodeResult; "
        "print(loaded, Agent.__module__, Budget.__module__, EpisodeResult.__module__, EdgeSqlError.__module__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "edge_sql.api.agent", "edge_sql.agent.budget", "edge_sql.agent.result", "edge_sql.errors"]


LEAF_MODULES = ("edge_sql.errors", "edge_sql.interrupts", "edge_sql.lazy", "edge_sql.json_types")
# docs/architecture.md's package map, bottom to top: a module imports only from its own package
# and from packages on lower lines (function-level imports included)
LAYERS = (
    LEAF_MODULES,
    ("edge_sql.convert",),
    ("edge_sql.store",),
    ("edge_sql.files",),
    ("edge_sql.tools",),
    ("edge_sql.checks",),
    ("edge_sql.charts",),
    ("edge_sql.runtime",),
    ("edge_sql.agent",),
    ("edge_sql.knowledge",),
    ("edge_sql.api",),
    ("edge_sql",),  # the package itself: the public API, exported lazily from the modules below
    ("edge_sql.evaluation",),
    ("edge_sql.bench",),
    ("edge_sql.serve", "edge_sql.cluster"),
    ("edge_sql.commands",),
    ("edge_sql.cli",),
    ("edge_sql.__main__",),  # `python -m edge_sql`: the CLI
)


def _package_of(module: str) -> str:
    """The entry of LAYERS that `module` (a dotted name) belongs to."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 and parts[1] != "__init__" else "edge_sql"


def _absolute_imports(path: Path) -> set[str]:
    """The modules `path` imports by absolute name (`import a.b`, `from a.b import c`: "a.b"),
    function-level imports included."""
    import ast

    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def _edge_sql_imports(path: Path) -> set[str]:
    return {name for name in _absolute_imports(path) if name == "edge_sql" or name.startswith("edge_sql.")}


def test_imports_run_one_way_down_the_package_map() -> None:
    """Every edge-sql module imports only its own package and the layers below it: the converter
    only itself and the two leaf modules, which import nothing from edge-sql; the bench never
    the Ray runner above it (`edge-sql bench --ray` hands it in)."""
    layer = {package: i for i, packages in enumerate(LAYERS) for package in packages}
    sources = [
        (path, "edge_sql." + ".".join(path.relative_to(REPO / "edge_sql").with_suffix("").parts))
        for path in (REPO / "edge_sql").rglob("*.py")
    ]
    sources += [(path, f"edge_sql.convert.{path.stem}") for path in (REPO / "convert").glob("*.py")]
    assert {_package_of(module) for _, module in sources} == set(layer)  # every package is placed
    upward = []
    for path, module in sources:
        mine = _package_of(module)
        for name in _edge_sql_imports(path):
            theirs = _package_of(name)
            if theirs != mine and layer[theirs] >= layer[mine]:
                upward.append(f"{path.relative_to(REPO)} imports {name}")
    assert not upward, upward
    for leaf in LEAF_MODULES:
        assert not _edge_sql_imports(REPO / (leaf.replace(".", "/") + ".py")), leaf


def _runtime_order() -> list[list[str]]:
    """docs/architecture.md's table of the runtime's modules and packages (`tuning/`), in its
    order (first row lowest)."""
    import re

    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("### Import order inside `edge_sql/runtime/`", 1)[1].split("\n#", 1)[0]
    return [re.findall(r"`(\w+)(?:\.py|/)`", line) for line in section.splitlines() if re.match(r"\| \d+ \|", line)]


def test_runtime_modules_import_in_the_documented_order() -> None:
    """Inside the runtime a module imports only modules on lower rows of the table (by their
    own names: a `from edge_sql.runtime import x` would hide which), so no import circle forms;
    the modules of a subpackage (tuning/) count as one entry and may import each other."""
    rows = _runtime_order()
    row = {name: i for i, names in enumerate(rows) for name in names}
    folder = REPO / "edge_sql" / "runtime"
    assert sum(len(names) for names in rows) == len(row)  # each entry on one row
    entries = {path.stem for path in folder.glob("*.py")} | {init.parent.name for init in folder.glob("*/__init__.py")}
    assert set(row) == entries  # every module and subpackage placed
    wrong = []
    for path in sorted(folder.rglob("*.py")):
        mine = path.relative_to(folder).parts[0].removesuffix(".py")
        for name in _edge_sql_imports(path):
            if name == "edge_sql.runtime":
                wrong.append(f"{path.relative_to(folder)} imports from the package itself")
            elif name.startswith("edge_sql.runtime."):
                theirs = name.split(".")[2]
                if theirs != mine and row[theirs] >= row[mine]:
                    wrong.append(
                        f"{path.relative_to(folder)} (row {row[mine] + 1}) imports {theirs} (row {row[theirs] + 1})"
                    )
    assert not wrong, wrong


def _module_names() -> dict[str, Path]:
    """Every edge-sql module by dotted name (a package by its own name, from its __init__.py)."""
    names = {}
    for path in (REPO / "edge_sql").rglob("*.py"):
        parts = path.relative_to(REPO).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def _run_time_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of `tree` but those under `if TYPE_CHECKING:` (imports for the type checker
    only, which never run)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in (child, *_run_time_nodes(child)))
            continue
        yield node
        yield from _run_time_nodes(node)


def _imported_modules(path: Path, module: str, modules: dict[str, Path], *, type_only: bool = False) -> set[str]:
    """The edge-sql modules `path` (the module `module`) imports at run time, function-level
    imports and relative imports included (`type_only`: those under `if TYPE_CHECKING:` too);
    `from pkg import submodule` counts as an import of the submodule only (the package is
    already importing, so that makes no circle)."""
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree) if type_only else _run_time_nodes(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            source = ".".join([*base, *([node.module] if node.module else [])])
            submodules = {f"{source}.{a.name}" for a in node.names if f"{source}.{a.name}" in modules}
            found |= submodules
            if len(submodules) < len(node.names):
                found.add(source)
    return {name for name in found if name in modules and name != module}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan): each holds an import circle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return circles


def test_no_import_circle_inside_any_package() -> None:
    """Inside each package (serve, agent, ...) no modules import each other in a circle, not even
    through an import inside a function: a circle means the shared part wants a module of its own."""
    modules = _module_names()
    graph = {
        module: {name for name in _imported_modules(path, module, modules) if _package_of(name) == _package_of(module)}
        for module, path in modules.items()
    }
    assert not _circles(graph), _circles(graph)


def test_no_import_circle_even_for_the_type_checker() -> None:
    """No modules of edge-sql import each other in a circle even counting the imports under
    `if TYPE_CHECKING:`: a type the two sides share belongs in a module below both (or a
    Protocol where the lower one only reads a few attributes: knowledge/changes.py's Ledger,
    agent/doubt.py's Answer)."""
    modules = _module_names()
    graph = {module: _imported_modules(path, module, modules, type_only=True) for module, path in modules.items()}
    assert not _circles(graph), _circles(graph)


def test_the_circle_check_finds_the_circle_serve_had(tmp_path: Path) -> None:
    """http_app imported openai_api at the top and openai_api imported http_app inside a
    function; the check sees that circle, and a longer one, and not `from pkg import submodule`
    nor an import under `if TYPE_CHECKING:`."""
    files = {
        "http_app": "from edge_sql.serve.openai_api import routes\n",
        "openai_api": "def routes():\n    from edge_sql.serve.http_app import stream\n",
        "queue": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from edge_sql.serve.openai_api import Reply\n",
        "__init__": "from edge_sql.serve import http_app\n",
    }
    for name, text in files.items():
        (tmp_path / f"{name}.py").write_text(text, encoding="utf-8")
    modules = {"edge_sql.serve": tmp_path / "__init__.py"}
    modules |= {f"edge_sql.serve.{name}": tmp_path / f"{name}.py" for name in files if name != "__init__"}
    graph = {module: _imported_modules(path, module, modules) for module, path in modules.items()}
    assert graph["edge_sql.serve"] == {"edge_sql.serve.http_app"}
    assert graph["edge_sql.serve.queue"] == set()  # an import for the type checker only never runs
    assert _circles(graph) == [["edge_sql.serve.http_app", "edge_sql.serve.openai_api"]]
    assert _circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _circles({"a": {"b"}, "b": set()}) == []


# what benchmarks may take from tests/: the fixture model's definition, which the GPU check builds
# (`python -m tests.fixture_checkpoint`) and the scripts that run the trained fixture bound it by
FIXTURE_DEFINITION = {"tests.fixture_checkpoint", "tests.fixture_budget"}


def test_benchmark_scripts_import_nothing_from_tests() -> None:
    """Benchmarks measure the product: they import edge_sql and their own helpers, never test
    code (but the fixture model's definition, `FIXTURE_DEFINITION`)."""
    import ast

    test_modules = {path.stem for path in (REPO / "tests").glob("*.py")}
    for path in sorted((REPO / "benchmarks").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert '"tests"' not in text and "'tests'" not in text, f"{path.name} puts tests/ on sys.path"
        for node in ast.walk(ast.parse(text)):
            names = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            names = [name for name in names if name not in FIXTURE_DEFINITION]
            assert not {name.split(".")[0] for name in names} & (test_modules | {"tests"}), f"{path.name}: {names}"


def test_every_third_party_import_is_declared() -> None:
    """Each module edge-sql or its converter imports at run time comes from a declared dependency
    (matplotlib from the [bench] extra, ray from the [cluster] extra: edge_sql.cluster only)."""
    import re
    import sys
    from importlib import metadata

    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = {
        re.split(r"[<>=!~\[; ]", spec, maxsplit=1)[0].lower().replace("_", "-")
        for spec in [
            *project["dependencies"],
            *project["optional-dependencies"]["bench"],
            *project["optional-dependencies"]["cluster"],
            *project["optional-dependencies"]["files"],
            *project["optional-dependencies"]["charts"],
        ]
    }
    providers = metadata.packages_distributions()
    imported = set()
    for path in [*(REPO / "edge_sql").rglob("*.py"), *(REPO / "convert").glob("*.py")]:
        beside = {sibling.stem for sibling in path.parent.glob("*.py")}  # a script's own neighbours
        imported |= {name.split(".")[0] for name in _absolute_imports(path)} - beside
    third_party = {name for name in imported if name not in sys.stdlib_module_names and name != "edge_sql"}
    for name in sorted(third_party):
        distributions = {d.lower().replace("_", "-") for d in providers.get(name, [])}
        assert distributions & declared, f"{name} (from {distributions or 'nothing installed'}) is not declared"


# `Any` in edge_sql/ (issue 63): fewer than ANY_CEILING lines name it as code, and each such line
# says why in a trailing `# Any: <word>` comment (`# Any: pyarrow`, `# Any: sqlite3`, ...).
ANY_CEILING = 150


def any_lines(source: str) -> dict[int, str]:
    """The lines that name `Any` as code (not in an import, a string or a docstring) -> their comment."""
    found: dict[int, str] = {}
    comments: dict[int, str] = {}
    statement: list[str] = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string
        elif token.type == tokenize.NEWLINE:
            statement = []
        elif token.type in (tokenize.NAME, tokenize.OP, tokenize.NUMBER, tokenize.STRING):
            statement.append(token.string)
            if token.string == "Any" and token.type == tokenize.NAME and statement[0] not in ("import", "from"):
                found[token.start[0]] = ""
    return {line: comments.get(line, "") for line in found}


def _any_without_reason(path: str, source: str) -> list[str]:
    return [f"{path}:{line}" for line, comment in any_lines(source).items() if not comment.startswith("# Any: ")]


def test_any_is_rare_and_each_says_why() -> None:
    counted, unexplained = 0, []
    for file in sorted((REPO / "edge_sql").rglob("*.py")):
        path, source = file.relative_to(REPO).as_posix(), file.read_text(encoding="utf-8")
        counted += len(any_lines(source))
        unexplained += _any_without_reason(path, source)
    assert counted < ANY_CEILING
    assert unexplained == [], "each `Any` says why in a trailing `# Any: <word>` comment"


def test_the_any_check_sees_code_not_words() -> None:
    source = '''"""Any docstring."""
from typing import Any
import typing as t

x: Any = 1  # Any: sqlite3
y: dict[str, Any] = {}  # a reason, but not in the form
z = "Any text"
w: t.Any = 2
'''
    assert any_lines(source) == {5: "# Any: sqlite3", 6: "# a reason, but not in the form", 8: ""}
    assert _any_without_reason("m.py", source) == ["m.py:6", "m.py:8"]
