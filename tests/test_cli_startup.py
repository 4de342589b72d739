"""The command line starts at once: `--help` and `config` import neither llama.cpp, sqlglot nor
the agent, a verified answer loads no model code, and the help's list of commands, written
from cli.SUBCOMMANDS without importing them, is what click writes from the commands themselves
(benchmarks/startup/bench_startup.py measures the times)."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from edge_sql.cli import SUBCOMMANDS, main

# the API's package is lazy: its settings files (what `config` reads) load without the Agent
HEAVY = ("llama_cpp", "sqlglot", "numpy", "edge_sql.agent", "edge_sql.runtime.session", "edge_sql.api.agent")
PROBE = (
    "import json, sys\n"
    "sys.argv = ['edge-sql', *json.loads(sys.argv[1])]\n"
    "from edge_sql.cli import main\n"
    "try:\n"
    "    main()\n"
    "except SystemExit as exc:\n"
    "    code = exc.code\n"
    "print(json.dumps([code, sorted(sys.modules)]))\n"
)


def loaded(args: list[str], home: Path, cwd: Path) -> tuple[int, set[str], str]:
    """Run `edge-sql ARGS` in a new process; its exit status, the modules it imported and its output."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(args)],
        capture_output=True,
        text=True,
        env={**os.environ, "EDGE_SQL_HOME": str(home)},
        cwd=cwd,
        timeout=120,
    )
    *output, last = done.stdout.rstrip("\n").split("\n")
    code, modules = json.loads(last)
    return code or 0, set(modules), "\n".join(output)


def heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


@pytest.mark.parametrize("args", [["--help"], ["config"], ["config", "serve"], ["run", "--help"]])
def test_help_and_config_import_nothing_heavy(args, tmp_path):
    code, modules, output = loaded(args, tmp_path / "home", tmp_path)
    assert code == 0, output
    assert heavy(modules) == [], heavy(modules)
    assert not any(
        m.startswith("edge_sql.commands.")
        and m[18:] not in {"config", "options", "settings", "files", "run", "serve", "chart_file", "ray_options"}
        for m in modules
    ), sorted(m for m in modules if m.startswith("edge_sql.commands."))


def test_a_verified_answer_loads_no_model_code(chinook_db, tmp_path):
    home, db = tmp_path / "home", str(chinook_db)
    code, modules, _ = loaded(
        ["notes", "verify", "--db", db, "How many albums?", "SELECT COUNT(*) FROM Album"], home, tmp_path
    )
    assert code == 0
    code, modules, output = loaded(["run", "--db", db, "--question", "How many albums?"], home, tmp_path)
    assert code == 0 and "no episode: a verified answer" in output and "347" in output, output
    # the checks need sqlglot, the answer the agent's result records; nothing that runs a model
    model_code = ("llama_cpp", "numpy", "edge_sql.runtime.session", "edge_sql.api.agent", "edge_sql.agent.episode")
    model_code += ("edge_sql.agent.grammar", "edge_sql.agent.prompt")
    assert sorted(m for m in modules if m.split(".")[0] in model_code or m in model_code) == []


def test_the_help_lists_each_command_as_click_would():
    """SUBCOMMANDS' sentences give the same `--help` as the commands' own help, imported."""
    real = click.Group(
        "edge-sql",
        commands={
            name: importlib.import_module(f"edge_sql.commands.{module}").command
            for name, (module, _) in SUBCOMMANDS.items()
        },
    )
    for width in (80, 120):
        ctx = click.Context(main, terminal_width=width)
        lazy_formatter, real_formatter = ctx.make_formatter(), ctx.make_formatter()
        main.format_commands(ctx, lazy_formatter)
        real.format_commands(click.Context(real, terminal_width=width), real_formatter)
        assert lazy_formatter.getvalue() == real_formatter.getvalue()
        assert lazy_formatter.getvalue().count("\n") == len(SUBCOMMANDS) + 1


def test_importing_the_agent_leaves_the_checks_parser_for_the_first_check(tmp_path):
    """Issue 64: `from edge_sql import Agent` loads llama.cpp but not sqlglot (the checks' parser,
    about a fifth of the import's time: benchmarks/startup/bench_import_agent.py), which loads
    with the first check; the checks' names still import as before."""
    probe = (
        "import sys\n"
        "from edge_sql import Agent\n"
        "before = 'sqlglot' in sys.modules\n"
        "from edge_sql.checks import Checks, check_sql\n"
        "print(before, 'sqlglot' in sys.modules, check_sql.__module__, Checks.__module__)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert done.stdout.split() == ["False", "True", "edge_sql.checks.checker", "edge_sql.checks.findings"], done.stderr
