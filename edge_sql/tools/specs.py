"""The eight tools the model was trained with, as data: names, descriptions and typed arguments.

The agent builds both the system prompt's tool list and the call grammar from `TOOL_SPECS`,
so this module is the single place that says which tools exist and what they take.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

ArgType = Literal["string", "integer"]

SAMPLE_ROWS_DEFAULT = 5
SAMPLE_ROWS_MAX = 20
DISTINCT_VALUES_DEFAULT = 10
DISTINCT_VALUES_MAX = 50


@dataclass(frozen=True)
class ToolArg:
    """One argument of a tool call."""

    name: str
    type: ArgType
    description: str
    required: bool = True
    default: int | str | None = None
    minimum: int | None = None
    maximum: int | None = None


@dataclass(frozen=True)
class ToolSpec:
    """A tool: its name, what it does, and its arguments in call order."""

    name: str
    description: str
    args: tuple[ToolArg, ...] = field(default_factory=tuple)

    @property
    def required_args(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.args if a.required)

    def arg(self, name: str) -> ToolArg | None:
        """The argument called `name`, or None."""
        return next((a for a in self.args if a.name == name), None)

    def signature(self) -> str:
        """`name(arg: type, opt?: type)`, as shown in the prompt's tool list."""
        parts = [f"{a.name}{'' if a.required else '?'}: {a.type}" for a in self.args]
        return f"{self.name}({', '.join(parts)})"


_TABLE = ToolArg("table_name", "string", "Name of a table (or view) in the database.")
_SQL = ToolArg("sql", "string", "One SQLite SELECT statement.")

TOOL_SPECS: tuple[ToolSpec, ...] = (
    ToolSpec("list_tables", "List the names of all tables in the database, one per line."),
    ToolSpec(
        "describe_table",
        "Return the table's CREATE TABLE statement (column names, types, keys).",
        (_TABLE,),
    ),
    ToolSpec(
        "foreign_keys",
        "List the table's foreign keys in both directions: the columns it references and the tables that reference it.",
        (_TABLE,),
    ),
    ToolSpec(
        "join_path",
        "Find the shortest chain of foreign-key joins between two tables, with the JOIN clauses to use.",
        (
            ToolArg("table_a", "string", "The table to start from."),
            ToolArg("table_b", "string", "The table to reach."),
        ),
    ),
    ToolSpec(
        "sample_rows",
        "Show the first rows of a table.",
        (
            _TABLE,
            ToolArg(
                "limit",
                "integer",
                f"How many rows to show (default {SAMPLE_ROWS_DEFAULT}, "
                f"at most {SAMPLE_ROWS_MAX}; out of range is clamped).",
                required=False,
                default=SAMPLE_ROWS_DEFAULT,
                minimum=1,
                maximum=SAMPLE_ROWS_MAX,
            ),
        ),
    ),
    ToolSpec(
        "distinct_values",
        "Show distinct values of one column of a table.",
        (
            _TABLE,
            ToolArg("column_name", "string", "Name of a column of that table."),
            ToolArg(
                "limit",
                "integer",
                f"How many values to show (default {DISTINCT_VALUES_DEFAULT}, at most "
                f"{DISTINCT_VALUES_MAX}; out of range is clamped).",
                required=False,
                default=DISTINCT_VALUES_DEFAULT,
                minimum=1,
                maximum=DISTINCT_VALUES_MAX,
            ),
        ),
    ),
    ToolSpec(
        "run_query",
        "Run a read-only SQL query and see its first rows (or the error).",
        (_SQL,),
    ),
    ToolSpec(
        "submit_sql",
        "Submit the final SQL query that answers the question. This ends the episode.",
        (ToolArg("sql", "string", "The final SQLite SELECT statement."),),
    ),
)

TOOLS_BY_NAME: dict[str, ToolSpec] = {spec.name: spec for spec in TOOL_SPECS}


def render_tool_list(specs: tuple[ToolSpec, ...] = TOOL_SPECS) -> str:
    """The tool list for a prompt: one `- name(args): description` line per tool."""
    return "\n".join(f"- {spec.signature()}: {spec.description}" for spec in specs)
