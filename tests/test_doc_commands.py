"""Every `edge-sql` command written in README.md and docs/ parses: its command exists, every
option it names is one of that command's, an option that takes a value has one, and no word is
left over that the command takes no argument for (`edge-sql run --db app.db "question"` did not
parse: run takes --question). Commands with placeholders (`[--mcp]`, `A|B`, `<FILE>`, `...`)
are templates, not commands, and are left out; an inline mention that ends in an option
(`edge-sql run --question`) names that option without its value."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from edge_sql.cli import SUBCOMMANDS, main

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELL = {"", "bash", "console", "sh", "shell"}  # the fenced blocks' languages that hold commands
INLINE = re.compile(r"`(edge-sql (?:{})\b[^`]*)`".format("|".join(SUBCOMMANDS)))
TEMPLATE = re.compile(r"[\[\]<>|…]|\.\.\.")


def doc_commands() -> list[tuple[str, str]]:
    """(file, command) for each `edge-sql ...` line of a shell block and each inline one."""
    found = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        language = None  # inside a fenced block: its language ("" for none)
        for line in text.splitlines():
            if line.lstrip().startswith("```"):
                language = line.strip().strip("`") if language is None else None
            elif language in SHELL:
                for command in re.split(r"\s+#\s", line.strip().removeprefix("$ "))[0].split("&&"):
                    words = command.split()
                    if words[:1] == ["edge-sql"] and len(words) > 1 and (words[1] in SUBCOMMANDS or words[1][0] == "-"):
                        found.append((path.name, command.strip()))  # not a log line: `edge-sql serve: listening`
            elif language is None:
                found += [(path.name, span) for span in INLINE.findall(line)]
    return [(name, command) for name, command in found if not TEMPLATE.search(command)]


def parse_problem(command: str) -> str | None:
    """Why `command` would not parse (None: it parses)."""
    args = shlex.split(command)[1:]
    if not args or args[0].startswith("-"):
        return None  # `edge-sql --help`, `edge-sql --version`
    ctx = click.Context(main, info_name="edge-sql")
    sub = main.get_command(ctx, args[0])
    if sub is None:
        return f"no command {args[0]!r}"
    while isinstance(sub, click.Group) and len(args) > 1 and not args[1].startswith("-"):
        inner = sub.get_command(ctx, args[1])
        if inner is None:
            return f"no command {args[1]!r} in {args[0]}"
        args, sub = args[1:], inner
    parser = sub.make_parser(click.Context(sub, info_name=args[0], parent=ctx))
    try:
        _, left, _ = parser.parse_args(args=list(args[1:]))
    except click.BadOptionUsage as exc:
        if "requires an argument" in str(exc) and args[-1].startswith("--"):
            return None  # an inline mention of the option itself
        return str(exc)
    except click.UsageError as exc:
        return str(exc)
    takes_more = any(isinstance(p, click.Argument) and p.nargs == -1 for p in sub.params)
    if left and not takes_more and not isinstance(sub, click.Group):
        return f"unexpected argument(s) {left}"
    return None


def test_the_docs_name_commands():
    commands = doc_commands()
    assert len(commands) > 50 and {c.split()[1] for _, c in commands} >= {"run", "serve", "pull", "notes", "config"}


@pytest.mark.parametrize(("file", "command"), doc_commands())
def test_every_documented_command_parses(file, command):
    assert parse_problem(command) is None, f"{file}: {command}: {parse_problem(command)}"


@pytest.mark.parametrize(
    ("command", "problem"),
    [
        ('edge-sql run --db app.db "How many orders last month?"', "unexpected argument(s)"),
        ("edge-sql run --dbs app.db", "No such option '--dbs'"),
        ("edge-sql runs --db app.db", "no command 'runs'"),
        ("edge-sql run --db", None),  # a mention of the option
        ("edge-sql notes verify --db app.db 'How many?' 'SELECT 1'", None),
    ],
)
def test_the_check_finds_what_the_issue_found(command, problem):
    found = parse_problem(command)
    assert (found is None) if problem is None else (found is not None and problem in found), found
