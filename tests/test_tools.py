"""The eight tools on real Chinook and Northwind files: exact output formats, limits, errors."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from edge_sql.tools import (
    ReadOnlyDatabase,
    Toolbox,
    format_result,
    render_tool_list,
)
from edge_sql.tools.specs import DISTINCT_VALUES_MAX, SAMPLE_ROWS_MAX, TOOL_SPECS

MORE = "... (showing first 5 rows; more rows exist)"

CHINOOK_TABLES = [
    "Album",
    "Artist",
    "Customer",
    "Employee",
    "Genre",
    "Invoice",
    "InvoiceLine",
    "MediaType",
    "Playlist",
    "PlaylistTrack",
    "Track",
]


@pytest.fixture
def chinook(chinook_db: Path) -> Iterator[Toolbox]:
    db = ReadOnlyDatabase(chinook_db)
    yield Toolbox(db)
    db.close()


@pytest.fixture
def northwind(northwind_db: Path) -> Iterator[Toolbox]:
    db = ReadOnlyDatabase(northwind_db)
    yield Toolbox(db)
    db.close()


def ok(tools: Toolbox, name: str, **args: object) -> str:
    result = tools.call(name, args)
    assert result.ok, result.output
    return result.output


def error(tools: Toolbox, name: str, args: object) -> str:
    result = tools.call(name, args)  # type: ignore[arg-type]
    assert result.ok is False
    assert result.output.startswith("Error: ")
    return result.output


# -- specs --------------------------------------------------------------------------------


def test_specs_list_the_eight_tools_in_order() -> None:
    assert [s.name for s in TOOL_SPECS] == [
        "list_tables",
        "describe_table",
        "foreign_keys",
        "join_path",
        "sample_rows",
        "distinct_values",
        "run_query",
        "submit_sql",
    ]
    by_name = {s.name: s for s in TOOL_SPECS}
    assert by_name["join_path"].required_args == ("table_a", "table_b")
    assert by_name["distinct_values"].required_args == ("table_name", "column_name")
    limit = by_name["sample_rows"].arg("limit")
    assert limit is not None and limit.type == "integer" and not limit.required
    assert "default 5" in limit.description and limit.maximum == SAMPLE_ROWS_MAX
    assert by_name["list_tables"].args == () and by_name["list_tables"].required_args == ()


def test_rendered_tool_list() -> None:
    lines = render_tool_list().splitlines()
    assert len(lines) == 8
    assert lines[0].startswith("- list_tables(): ")
    assert lines[5].startswith("- distinct_values(table_name: string, column_name: string, limit?: integer): ")
    assert lines[7].startswith("- submit_sql(sql: string): ")


# -- formatting ---------------------------------------------------------------------------


def test_format_result_rules() -> None:
    rows = [(i, None if i % 2 else f"v{i}") for i in range(7)]
    assert format_result(["a", "b"], rows, max_rows=5) == "\n".join(
        ["a | b", "0 | v0", "1 | None", "2 | v2", "3 | None", "4 | v4", MORE]
    )
    assert format_result(["a"], [(1,), (2,)], max_rows=5) == "a\n1\n2"
    assert format_result(["a"], [(1,)], max_rows=5, more_rows=True) == (
        "a\n1\n... (showing first 1 rows; more rows exist)"
    )
    assert format_result(["a", "b"], [], max_rows=5) == "a | b\n(no rows)"
    # a line break inside a cell shows as one space (the published sqlite_master rows)
    assert format_result(["t"], [("line1\nline2\r\nline3",)], max_rows=5) == "t\nline1 line2 line3"
    assert format_result(["x"], [(12.037037037037036,), (23.9,)], max_rows=5) == "x\n12.037037037037036\n23.9"


# -- the tools on Chinook -----------------------------------------------------------------


def test_list_tables_chinook(chinook: Toolbox) -> None:
    assert ok(chinook, "list_tables").splitlines() == CHINOOK_TABLES


def test_list_tables_northwind_marks_views(northwind: Toolbox) -> None:
    lines = ok(northwind, "list_tables").splitlines()
    assert lines[:13] == [
        "Categories",
        "CustomerCustomerDemo",
        "CustomerDemographics",
        "Customers",
        "Employees",
        "EmployeeTerritories",
        "Order Details",
        "Orders",
        "Products",
        "Regions",
        "Shippers",
        "Suppliers",
        "Territories",
    ]
    assert "Order Details Extended (view)" in lines and "sqlite_sequence" not in lines


def test_describe_table(chinook: Toolbox) -> None:
    # one line, single spaces, no space after `(` or before `)`, as the published outputs
    text = ok(chinook, "describe_table", table_name="track")
    assert text.startswith("CREATE TABLE [Track] ([TrackId] INTEGER NOT NULL, [Name] NVARCHAR(200) NOT NULL,")
    assert "[Milliseconds] INTEGER NOT NULL" in text and text.endswith("ON UPDATE NO ACTION)")
    assert "\n" not in text and "  " not in text and "( " not in text and " )" not in text
    assert error(chinook, "describe_table", {"table_name": "Tracks"}) == ("Error: no such table: Tracks")


def test_foreign_keys_both_directions(chinook: Toolbox) -> None:
    assert ok(chinook, "foreign_keys", table_name="Track") == "\n".join(
        [
            "Track references:",
            "Track.AlbumId -> Album.AlbumId",
            "Track.GenreId -> Genre.GenreId",
            "Track.MediaTypeId -> MediaType.MediaTypeId",
            "Referenced by:",
            "InvoiceLine.TrackId -> Track.TrackId",
            "PlaylistTrack.TrackId -> Track.TrackId",
        ]
    )
    assert ok(chinook, "foreign_keys", table_name="Genre") == "\n".join(
        ["Genre references:", "(none)", "Referenced by:", "Track.GenreId -> Genre.GenreId"]
    )


def test_join_path_and_its_sql_runs(chinook: Toolbox) -> None:
    text = ok(chinook, "join_path", table_a="Artist", table_b="InvoiceLine")
    assert text == "\n".join(
        [
            "Artist -> Album -> Track -> InvoiceLine",
            "FROM Artist",
            "JOIN Album ON Album.ArtistId = Artist.ArtistId",
            "JOIN Track ON Track.AlbumId = Album.AlbumId",
            "JOIN InvoiceLine ON InvoiceLine.TrackId = Track.TrackId",
        ]
    )
    joins = " ".join(text.splitlines()[1:])
    assert ok(chinook, "run_query", sql=f"SELECT count(*) {joins}") == "count(*)\n2240"
    assert ok(chinook, "join_path", table_a="genre", table_b="GENRE") == ("Genre is the same table; no join needed.")


@pytest.mark.parametrize("limit", [-5, 0, 21, 1000, 10**9, 10**100, -(10**100), "1" + "0" * 99, 1e300])
def test_every_integer_out_of_range_clamps_and_the_description_says_so(chinook: Toolbox, limit: object) -> None:
    """One behaviour for any out-of-range integer, however written or large: clamped."""
    number = int(limit)  # the test's own reading of the value; the tool gets it as written
    shown = ok(chinook, "sample_rows", table_name="Track", limit=limit).splitlines()
    assert len(shown) == 1 + max(1, min(SAMPLE_ROWS_MAX, number))  # a header, the rows, no note
    distinct = ok(chinook, "distinct_values", table_name="Track", column_name="Composer", limit=limit)
    assert len(distinct.splitlines()) == 1 + max(1, min(DISTINCT_VALUES_MAX, number)) + 1  # and "more rows"
    for tool in ("sample_rows", "distinct_values"):  # the argument says so (MCP and JSON schemas show it) ...
        spec = next(s for s in TOOL_SPECS if s.name == tool)
        assert next(a for a in spec.args if a.name == "limit").description.endswith("; out of range is clamped).")
    line = next(x for x in render_tool_list().splitlines() if x.startswith("- sample_rows("))
    assert line == "- sample_rows(table_name: string, limit?: integer): Show the first rows of a table."  # ... the
    # prompt's tool line stays as the model met it in training (a longer line changed SmolLM2's greedy episodes)


def test_sample_rows(chinook: Toolbox) -> None:
    # n rows and no "more rows" note, as the published sample_rows(t, 10) and (t, 5)
    assert ok(chinook, "sample_rows", table_name="Genre", limit=2) == "GenreId | Name\n1 | Rock\n2 | Jazz"
    default = ok(chinook, "sample_rows", table_name="Genre").splitlines()
    assert default[0] == "GenreId | Name" and len(default) == 6 and default[-1] == "5 | Rock And Roll"
    clamped = ok(chinook, "sample_rows", table_name="Track", limit=1000).splitlines()
    assert len(clamped) == 1 + SAMPLE_ROWS_MAX and "more rows" not in clamped[-1]
    assert ok(chinook, "sample_rows", table_name="Genre", limit=0).splitlines()[1] == "1 | Rock"
    assert ok(chinook, "sample_rows", table_name="MediaType", limit="5") == "\n".join(
        [
            "MediaTypeId | Name",
            "1 | MPEG audio file",
            "2 | Protected AAC audio file",
            "3 | Protected MPEG-4 video file",
            "4 | Purchased AAC audio file",
            "5 | AAC audio file",
        ]
    )


def test_distinct_values(chinook: Toolbox) -> None:
    assert ok(chinook, "distinct_values", table_name="MediaType", column_name="name", limit=3) == "\n".join(
        [
            "Name",
            "MPEG audio file",
            "Protected AAC audio file",
            "Protected MPEG-4 video file",
            "... (showing first 3 rows; more rows exist)",
        ]
    )
    assert (
        error(chinook, "distinct_values", {"table_name": "Track", "column_name": "Singer"})
        == "Error: no such column: Singer (in table Track)"
    )


def test_run_query_formats(chinook: Toolbox) -> None:
    assert ok(chinook, "run_query", sql="SELECT count(*) FROM Track") == "count(*)\n3503"
    preview = ok(chinook, "run_query", sql="SELECT GenreId, Name FROM Genre ORDER BY GenreId")
    assert preview == "\n".join(
        ["GenreId | Name", "1 | Rock", "2 | Jazz", "3 | Metal", "4 | Alternative & Punk", "5 | Rock And Roll", MORE]
    )
    exactly_five = ok(chinook, "run_query", sql="SELECT GenreId FROM Genre LIMIT 5")
    assert exactly_five == "GenreId\n1\n2\n3\n4\n5"
    assert ok(
        chinook, "run_query", sql="SELECT TrackId, Composer FROM Track WHERE Composer IS NULL ORDER BY TrackId LIMIT 2"
    ) == ("TrackId | Composer\n63 | None\n64 | None")
    assert ok(chinook, "run_query", sql="SELECT * FROM Genre WHERE 0") == ("GenreId | Name\n(no rows)")
    result = chinook.call("run_query", {"sql": "SELECT Name FROM Artist ORDER BY ArtistId"})
    assert result.query is not None and result.query.truncated
    assert result.query.rows[0] == ("AC/DC",)


def test_submit_sql(chinook: Toolbox) -> None:
    result = chinook.call("submit_sql", {"sql": "SELECT count(*) AS n FROM Invoice"})
    assert result.ok and result.output == "n\n412"
    assert result.query is not None and result.query.rows == [(412,)]
    assert error(chinook, "submit_sql", {"sql": "SELECT * FROM Invoices"}) == ("Error: no such table: Invoices")


# -- Northwind: a table name with a space, everywhere -------------------------------------


def test_order_details_in_every_tool(northwind: Toolbox) -> None:
    assert "Order Details" in ok(northwind, "list_tables").splitlines()
    assert ok(northwind, "describe_table", table_name="Order Details").startswith("CREATE TABLE [Order Details](")
    assert ok(northwind, "describe_table", table_name="[order details]").startswith("CREATE TABLE [Order Details](")
    assert ok(northwind, "foreign_keys", table_name="Order Details") == "\n".join(
        [
            '"Order Details" references:',
            '"Order Details".OrderID -> Orders.OrderID',
            '"Order Details".ProductID -> Products.ProductID',
            "Referenced by:",
            "(none)",
        ]
    )
    path = ok(northwind, "join_path", table_a="Order Details", table_b="Categories")
    assert path == "\n".join(
        [
            '"Order Details" -> Products -> Categories',
            'FROM "Order Details"',
            'JOIN Products ON "Order Details".ProductID = Products.ProductID',
            "JOIN Categories ON Products.CategoryID = Categories.CategoryID",
        ]
    )
    joins = " ".join(path.splitlines()[1:])
    assert ok(northwind, "run_query", sql=f"SELECT count(*) {joins}") == "count(*)\n2155"
    assert ok(northwind, "sample_rows", table_name="Order Details", limit=2) == "\n".join(
        [
            "OrderID | ProductID | UnitPrice | Quantity | Discount",
            "10248 | 11 | 14 | 12 | 0.0",
            "10248 | 42 | 9.8 | 10 | 0.0",
        ]
    )
    assert ok(northwind, "distinct_values", table_name="Order Details", column_name="Discount", limit=3) == (
        "Discount\n0.0\n0.15\n0.05\n... (showing first 3 rows; more rows exist)"
    )
    assert ok(northwind, "run_query", sql='SELECT count(*) FROM "Order Details"') == ("count(*)\n2155")
    assert ok(northwind, "submit_sql", sql="SELECT count(*) FROM [Order Details]") == ("count(*)\n2155")


def test_long_cells_are_capped_in_tool_output(northwind: Toolbox) -> None:
    text = ok(northwind, "sample_rows", table_name="Categories", limit=1)
    assert text.splitlines()[1] == ("1 | Beverages | Soft drinks, coffees, teas, beers, and ales | <blob, 10151 bytes>")


def test_odd_identifiers_everywhere(tmp_path: Path) -> None:
    path = tmp_path / "odd.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript("""
        CREATE TABLE "Größe ""Q"" table" ("naïve id" INTEGER PRIMARY KEY, "it's" TEXT);
        CREATE TABLE "select" ("from" INTEGER REFERENCES "Größe ""Q"" table", v TEXT);
        INSERT INTO "Größe ""Q"" table" VALUES (1, 'a'), (2, 'b');
        INSERT INTO "select" VALUES (1, 'x'), (2, 'y'), (2, 'z');
    """)
    conn.close()
    odd = 'Größe "Q" table'
    with ReadOnlyDatabase(path) as db:
        tools = Toolbox(db)
        assert ok(tools, "list_tables").splitlines() == [odd, "select"]
        # SQLite folds ASCII letters only: "GRöße" matches "Größe", "GRÖßE" does not.
        assert ok(tools, "describe_table", table_name='GRöße "q" TABLE').startswith('CREATE TABLE "Größe ""Q"" table"')
        assert error(tools, "describe_table", {"table_name": 'GRÖßE "Q" TABLE'}) == (
            'Error: no such table: GRÖßE "Q" TABLE'
        )
        assert ok(tools, "sample_rows", table_name=odd, limit=1) == "naïve id | it's\n1 | a"
        assert ok(tools, "distinct_values", table_name="SELECT", column_name="FROM") == "from\n1\n2"
        assert ok(tools, "foreign_keys", table_name="select") == "\n".join(
            [
                '"select" references:',
                '"select"."from" -> "Größe ""Q"" table"."naïve id"',
                "Referenced by:",
                "(none)",
            ]
        )
        path_text = ok(tools, "join_path", table_a=odd, table_b="select")
        joins = " ".join(path_text.splitlines()[1:])
        assert ok(tools, "run_query", sql=f"SELECT count(*) {joins}") == "count(*)\n3"


# -- model mistakes come back as text -----------------------------------------------------


@pytest.mark.parametrize(
    ("name", "args", "expected"),
    [
        (
            "drop_everything",
            {},
            "Error: unknown tool 'drop_everything'; the tools are: list_tables, "
            "describe_table, foreign_keys, join_path, sample_rows, distinct_values, run_query, "
            "submit_sql",
        ),
        ("describe_table", {}, "Error: describe_table needs the argument 'table_name'"),
        ("describe_table", {"table_name": 3}, "Error: describe_table: table_name must be a string"),
        (
            "describe_table",
            {"table_name": "Track", "verbose": True},
            "Error: describe_table got an unexpected argument 'verbose' (its arguments: table_name)",
        ),
        (
            "sample_rows",
            {"table_name": "Track", "limit": "many"},
            "Error: sample_rows: limit must be an integer from 1 to 20",
        ),
        (
            "sample_rows",
            {"table_name": "Track", "limit": True},
            "Error: sample_rows: limit must be an integer from 1 to 20",
        ),
        ("join_path", {"table_a": "Track"}, "Error: join_path needs the argument 'table_b'"),
        ("join_path", {"table_a": "Track", "table_b": "Nope"}, "Error: no such table: Nope"),
        ("run_query", ["SELECT 1"], "Error: run_query expects its args as a JSON object"),
        ("run_query", {"sql": ""}, "Error: empty SQL statement"),
        ("run_query", {"sql": "SELECT * FROM Foo"}, "Error: no such table: Foo"),
        (
            "run_query",
            {"sql": "DROP TABLE Track"},
            "Error: not allowed: the database is read-only (changing the schema is refused)",
        ),
        ("list_tables", {"x": 1}, "Error: list_tables got an unexpected argument 'x' (its arguments: none)"),
    ],
)
def test_mistakes_are_error_text(chinook: Toolbox, name: str, args: object, expected: str) -> None:
    assert error(chinook, name, args) == expected


def test_list_tables_accepts_missing_args(chinook: Toolbox) -> None:
    assert chinook.call("list_tables", None).ok
    assert chinook.call("list_tables", {}).ok


def test_time_out_is_error_text(chinook_db: Path) -> None:
    with ReadOnlyDatabase(chinook_db, time_limit_s=0.3) as db:
        sql = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c) SELECT count(*) FROM c"
        assert error(Toolbox(db), "run_query", {"sql": sql}) == ("Error: query exceeded the 0.3 s time limit")
