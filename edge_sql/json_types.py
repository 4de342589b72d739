"""The type of JSON data, for the records the parts write and read.

A leaf module (it imports nothing from edge_sql), so every layer can name it. `JSONValue` is what
`json.loads` returns and `json.dumps` takes, recursively: a reader narrows it with `isinstance`
where it uses a field. A record that carries SQLite's cells (rows, a chart's data) is a
`dict[str, object]` instead: a blob is no JSON value until `agent.result.json_value` writes it.
"""

from __future__ import annotations

from typing import TypeAlias

JSONValue: TypeAlias = "str | int | float | bool | list[JSONValue] | dict[str, JSONValue] | None"
JSONObject: TypeAlias = "dict[str, JSONValue]"
