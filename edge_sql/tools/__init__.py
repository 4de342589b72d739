"""The SQLite side of the agent: a read-only connection, the eight tools, result formatting."""

from edge_sql.tools.database import ForeignKey, QueryError, QueryResult, ReadOnlyDatabase, opened
from edge_sql.tools.formatting import format_result, format_value
from edge_sql.tools.specs import TOOL_SPECS, TOOLS_BY_NAME, ToolArg, ToolSpec, render_tool_list
from edge_sql.tools.toolbox import Toolbox, ToolResult

__all__ = [
    "TOOLS_BY_NAME",
    "TOOL_SPECS",
    "ForeignKey",
    "QueryError",
    "QueryResult",
    "ReadOnlyDatabase",
    "ToolArg",
    "ToolResult",
    "ToolSpec",
    "Toolbox",
    "format_result",
    "format_value",
    "opened",
    "render_tool_list",
]
