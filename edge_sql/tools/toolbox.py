"""The eight tools the model calls, over one `ReadOnlyDatabase`. Model mistakes never raise:
unknown tools, bad arguments, SQL errors, refusals and time-outs come back as `ok=False` text."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from edge_sql.errors import EdgeSqlError
from edge_sql.tools.arguments import ToolCallError, checked_args
from edge_sql.tools.database import ForeignKey, QueryResult, ReadOnlyDatabase
from edge_sql.tools.formatting import format_result, one_line_ddl
from edge_sql.tools.identifiers import display_identifier, quote_identifier
from edge_sql.tools.schema_view import SchemaView
from edge_sql.tools.specs import TOOL_SPECS, TOOLS_BY_NAME

PREVIEW_ROWS = 5


@dataclass(frozen=True)
class ToolResult:
    """What a call returns to the model: `ok`, the text it reads, and the query result if any."""

    ok: bool
    output: str
    query: QueryResult | None = None


def _error(message: str) -> ToolResult:
    return ToolResult(ok=False, output=f"Error: {message}")


def _column(table: str, column: str) -> str:
    return f"{display_identifier(table)}.{display_identifier(column)}"


def _fk_line(fk: ForeignKey) -> str:
    sources = ", ".join(_column(fk.from_table, c) for c in fk.from_columns)
    targets = ", ".join(_column(fk.to_table, c) for c in fk.to_columns)
    return f"{sources} -> {targets}"


def _join_condition(fk: ForeignKey) -> str:
    return " AND ".join(
        f"{_column(fk.from_table, s)} = {_column(fk.to_table, t)}" for s, t in zip(fk.from_columns, fk.to_columns)
    )


class Toolbox:
    """Runs tool calls by name. `preview_rows` caps the rows `run_query` shows (5 in training).
    `question` (with its evidence) ranks tables and columns when the schema is too big to show
    whole (schema_view.py), into shares counted by `count_tokens` (the model's own tokenizer;
    without one, an estimate never under Qwen3.5's count); a schema that fits is shown as
    trained whatever it is."""

    def __init__(
        self,
        db: ReadOnlyDatabase,
        *,
        preview_rows: int = PREVIEW_ROWS,
        question: str = "",
        count_tokens: Callable[[str], int] | None = None,
    ) -> None:
        self.db = db
        self.preview_rows = preview_rows
        self.schema = SchemaView(db, question, count_tokens=count_tokens)
        self._tools: dict[str, Callable[..., ToolResult]] = {
            "list_tables": self.list_tables,
            "describe_table": self.describe_table,
            "foreign_keys": self.foreign_keys,
            "join_path": self.join_path,
            "sample_rows": self.sample_rows,
            "distinct_values": self.distinct_values,
            "run_query": self.run_query,
            "submit_sql": self.submit_sql,
        }
        assert set(self._tools) == set(TOOLS_BY_NAME), "every spec needs an implementation"

    def call(self, name: str, args: dict[str, Any] | None) -> ToolResult:  # Any: tool-args (checked against the spec)
        """Run one tool call; every mistake comes back as `ok=False` text, never an exception."""
        spec = TOOLS_BY_NAME.get(name) if isinstance(name, str) else None
        if spec is None:
            names = ", ".join(s.name for s in TOOL_SPECS)
            return _error(f"unknown tool {name!r}; the tools are: {names}")
        try:
            kwargs = checked_args(spec, {} if args is None else args)
            return self._tools[spec.name](**kwargs)
        except (ToolCallError, EdgeSqlError) as exc:
            return _error(str(exc))
        except Exception as exc:  # the model must get text, whatever went wrong
            return _error(f"{spec.name} failed: {type(exc).__name__}: {str(exc)[:200]}")

    # -- the tools -----------------------------------------------------------------------

    def list_tables(self) -> ToolResult:
        """One name per line, as trained; ranked with a note when they do not all fit."""
        return ToolResult(True, self.schema.listing().text)

    def describe_table(self, table_name: str) -> ToolResult:
        """The CREATE statement on one line, as the published outputs show it (the most related
        columns and a note for a table too wide for its share). A name that does not exist in a
        schema too big to list gets the closest existing tables."""
        try:
            ddl = one_line_ddl(self.db.create_statement(table_name))
        except EdgeSqlError as exc:
            closest = self.schema.suggestions(table_name) if str(exc).startswith("no such table") else []
            if not closest:
                raise
            return _error(f"{exc}; the closest existing tables: {', '.join(closest)}")
        return ToolResult(True, self.schema.describe(table_name, ddl))

    def foreign_keys(self, table_name: str) -> ToolResult:
        table = self.db.resolve_table(table_name)
        keys = self.db.foreign_keys()
        outgoing = [_fk_line(fk) for fk in keys if fk.from_table == table]
        incoming = [_fk_line(fk) for fk in keys if fk.to_table == table and fk.from_table != table]
        lines = [f"{display_identifier(table)} references:"] + (outgoing or ["(none)"])
        lines += ["Referenced by:"] + (incoming or ["(none)"])
        return ToolResult(True, "\n".join(lines))

    def join_path(self, table_a: str, table_b: str) -> ToolResult:
        start, goal = self.db.resolve_table(table_a), self.db.resolve_table(table_b)
        shown_start, shown_goal = display_identifier(start), display_identifier(goal)
        if start == goal:
            return ToolResult(True, f"{shown_start} is the same table; no join needed.")
        path = self._shortest_fk_path(start, goal)
        if path is None:
            return ToolResult(True, f"No foreign-key path between {shown_start} and {shown_goal}.")
        tables = [start] + [step for step, _ in path]
        lines = [" -> ".join(display_identifier(t) for t in tables), f"FROM {shown_start}"]
        lines += [f"JOIN {display_identifier(step)} ON {_join_condition(fk)}" for step, fk in path]
        return ToolResult(True, "\n".join(lines))

    def sample_rows(self, table_name: str, limit: int) -> ToolResult:
        """`limit` rows and no "more rows" note (the published `sample_rows(t, 10)` shows 10 rows,
        `sample_rows(t, 5)` on a large table 5 rows and nothing else)."""
        table = self.db.resolve_table(table_name)
        return self._query_result(f"SELECT * FROM {quote_identifier(table)}", limit, note_more=False)

    def distinct_values(self, table_name: str, column_name: str, limit: int) -> ToolResult:
        table = self.db.resolve_table(table_name)
        column = self.db.resolve_column(table, column_name)
        sql = f"SELECT DISTINCT {quote_identifier(column)} FROM {quote_identifier(table)}"
        return self._query_result(sql, limit)

    def run_query(self, sql: str) -> ToolResult:
        return self._query_result(sql, self.preview_rows)

    def submit_sql(self, sql: str) -> ToolResult:
        """Checks the final SQL runs; the agent ends the episode on this call."""
        return self.answer(sql, max_rows=self.preview_rows)

    def answer(self, sql: str, *, max_rows: int) -> ToolResult:
        """Run an answer (submitted, written in the final turn, or the fallback): up to
        `max_rows` rows in `.query`; `.output` is what the model reads, the first
        `preview_rows` rows and a note when there are more. Errors come back as `ok=False`."""
        try:
            result = self.db.execute(sql, max_rows=max_rows)
        except EdgeSqlError as exc:
            return _error(str(exc))
        more = result.truncated or len(result.rows) > self.preview_rows
        text = format_result(
            result.columns, result.rows[: self.preview_rows], max_rows=self.preview_rows, more_rows=more
        )
        return ToolResult(True, text, result)

    # -- helpers -------------------------------------------------------------------------

    def _query_result(self, sql: str, max_rows: int, *, note_more: bool = True) -> ToolResult:
        result = self.db.execute(sql, max_rows=max_rows)
        text = format_result(result.columns, result.rows, max_rows=max_rows, more_rows=note_more and result.truncated)
        return ToolResult(True, text, result)

    def _shortest_fk_path(self, start: str, goal: str) -> list[tuple[str, ForeignKey]] | None:
        """Breadth-first search over foreign keys, followed in either direction."""
        neighbours: dict[str, list[tuple[str, ForeignKey]]] = {}
        for fk in self.db.foreign_keys():
            if fk.from_table != fk.to_table:
                neighbours.setdefault(fk.from_table, []).append((fk.to_table, fk))
                neighbours.setdefault(fk.to_table, []).append((fk.from_table, fk))
        came_from: dict[str, tuple[str, ForeignKey] | None] = {start: None}
        queue = deque([start])
        while queue:
            table = queue.popleft()
            if table == goal:
                break
            for nxt, fk in neighbours.get(table, []):
                if nxt not in came_from:
                    came_from[nxt] = (table, fk)
                    queue.append(nxt)
        if goal not in came_from:
            return None
        path: list[tuple[str, ForeignKey]] = []
        node = goal
        while (step := came_from[node]) is not None:
            path.append((node, step[1]))
            node = step[0]
        return path[::-1]
