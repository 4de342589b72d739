"""The SQaLe page's published text, read: tool results with the page's clipping, DDL as the
page shows it and as `sqlite_master` holds it, and the first rows each episode publishes per table.

`compare_to_published` and `parse_published_result` hold the page's clipping rules in one place;
benchmarks/sqale/replay.py builds the episodes' databases from what this reads.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from edge_sql.evaluation.sqale_published import call_args, published_calls

CLIP = "\u2026"  # the page's mark for a clipped line, or (alone on a line) for cut lines
MORE_ROWS_NOTE = re.compile(r"\.\.\. \(showing first \d+ rows; more rows exist\)\Z")
_SELECT_FIRST_ROWS = re.compile(r"SELECT \* FROM (\w+) LIMIT (\d+)\Z")


@dataclass(frozen=True)
class PublishedResult:
    """A published query result: header, rows (cells as text), and what the page says is missing.

    `clipped[i]` says row i's line was cut by the page (its last cell is a prefix, later cells
    are gone); `more_rows` is the tool's own note; `lines_cut` is the page's `…` line.
    """

    columns: list[str]
    rows: list[list[str]]
    clipped: list[bool]
    more_rows: bool
    lines_cut: bool


def parse_published_result(text: str) -> PublishedResult:
    lines = text.split("\n")
    columns = lines[0].split(" | ")
    rows: list[list[str]] = []
    clipped: list[bool] = []
    more_rows = lines_cut = False
    for line in lines[1:]:
        if line == CLIP:
            lines_cut = True
            break
        if MORE_ROWS_NOTE.match(line):
            more_rows = True
            break
        is_clipped = line.endswith(CLIP)
        rows.append((line[:-1] if is_clipped else line).split(" | "))
        clipped.append(is_clipped)
    return PublishedResult(columns, rows, clipped, more_rows, lines_cut)


def compare_to_published(ours: str, published: str) -> list[str]:
    """What in `ours` contradicts the published text, one message per line (empty: it matches).

    A published line ending in `…` must be a strict prefix of our line; a line that is only `…`
    means the page cut further lines (we must have at least one); every other line must be
    equal byte for byte, and without a `…` line the line counts must be equal.
    """
    our_lines, pub_lines = ours.split("\n"), published.split("\n")
    problems = []
    for i, pub in enumerate(pub_lines):
        if pub == CLIP:
            if len(our_lines) <= i:
                problems.append(f"line {i + 1}: the page cut lines here, ours ends before")
            return problems
        if i >= len(our_lines):
            problems.append(f"line {i + 1}: missing, published {pub!r}")
            continue
        mine = our_lines[i]
        if pub.endswith(CLIP):
            prefix = pub[:-1]
            if not (mine.startswith(prefix) and len(mine) > len(prefix)):
                problems.append(f"line {i + 1}: {mine!r} does not extend the clipped {pub!r}")
        elif mine != pub:
            problems.append(f"line {i + 1}: {mine!r} != published {pub!r}")
    if len(our_lines) > len(pub_lines):
        extra = our_lines[len(pub_lines) :]
        problems.append(f"{len(extra)} line(s) more than published: {extra!r}")
    return problems


def render_cell(value: Any) -> str:
    """A cell as the published outputs show it: NULL as `None`, a newline as one space."""
    return "None" if value is None else str(value).replace("\n", " ")


def one_line_ddl(sql: str) -> str:
    """DDL as the published `describe_table` outputs show it: whitespace runs as one space, no
    space after `(` or before `)`."""
    text = re.sub(r"\s+", " ", sql).strip()
    return text.replace("( ", "(").replace(" )", ")")


def multiline_ddl(one_line: str, indent: int) -> str:
    """`CREATE TABLE t (a, b)` written as `sqlite_master` holds hand-written DDL: one column or
    constraint a line, indented, closing parenthesis on its own line."""
    head, _, rest = one_line.partition("(")
    body = rest[: rest.rindex(")")]
    parts, depth, start = [], 0, 0
    for i, char in enumerate(body):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(body[start:i].strip())
            start = i + 1
    parts.append(body[start:].strip())
    pad = " " * indent
    return head.rstrip() + " (\n" + ",\n".join(pad + part for part in parts) + "\n)"


def published_ddl(ep: dict[str, Any]) -> dict[str, str]:
    """Table name -> the one-line DDL every published `describe_table` output shows for it."""
    found: dict[str, str] = {}
    for _, _, call in published_calls(ep):
        if call["tool"] == "describe_table" and call["out"] is not None:
            table = call_args("describe_table", call["args"])["table_name"]
            assert found.setdefault(table, call["out"]) == call["out"], f"two DDLs for {table}"
    return found


def published_first_rows(ep: dict[str, Any]) -> dict[str, list[tuple[str, bool]]]:
    """Table -> its first rows as published lines (text, clipped?), merged over every
    `SELECT * FROM t LIMIT k` and `sample_rows` output; an unclipped line wins over a clipped one.
    """
    tables: dict[str, list[tuple[str, bool]]] = {}
    for _, _, call in published_calls(ep):
        if call["out"] is None:
            continue
        if call["tool"] == "sample_rows":
            table = call_args("sample_rows", call["args"])["table_name"]
        elif call["tool"] == "run_query" and (m := _SELECT_FIRST_ROWS.match(call["args"])):
            table = m.group(1)
        else:
            continue
        if table == "sqlite_master":
            continue
        result = parse_published_result(call["out"])
        rows = tables.setdefault(table, [])
        for i, (cells, clipped) in enumerate(zip(result.rows, result.clipped)):
            line = " | ".join(cells)
            if i == len(rows):
                rows.append((line, clipped))
            elif rows[i][1] and not clipped:
                assert line.startswith(rows[i][0]), f"{table} row {i}: outputs disagree"
                rows[i] = (line, False)
            elif not clipped:
                assert rows[i][0] == line, f"{table} row {i}: outputs disagree"
    return tables
