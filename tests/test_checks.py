"""The checks of an answer's SQL on real Chinook and Northwind files: names resolved as SQLite
resolves them, values looked up against what `sqlite3` itself finds, result checks, provenance
on crafted transcripts, each confidence reason, and the database byte-identical afterwards."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from edge_sql.agent.result import CallRecord, RoundRecord
from edge_sql.checks import attach_provenance, check_sql
from edge_sql.checks.values import edit_distance
from edge_sql.tools import ReadOnlyDatabase, Toolbox


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def chinook(chinook_db: Path) -> Iterator[ReadOnlyDatabase]:
    before = digest(chinook_db)
    with ReadOnlyDatabase(chinook_db) as db:
        yield db
    assert digest(chinook_db) == before  # the checks never change the file


@pytest.fixture
def northwind(northwind_db: Path) -> Iterator[ReadOnlyDatabase]:
    before = digest(northwind_db)
    with ReadOnlyDatabase(northwind_db) as db:
        yield db
    assert digest(northwind_db) == before


def names(checks) -> list[str]:
    return [n.name for n in checks.names]


def codes(checks) -> list[str]:
    return [f.code for f in checks.findings]


# -- names ---------------------------------------------------------------------------------


def test_names_follow_aliases_ctes_subqueries_using_and_quoting(northwind: ReadOnlyDatabase) -> None:
    sql = (
        "WITH big AS (SELECT orderid, quantity AS q FROM [order details] WHERE Quantity > 10) "
        'SELECT o.customerid, p."PRODUCTNAME", b.q FROM big b JOIN orders o USING (OrderID) '
        'JOIN "Order Details" od ON od.orderid = o.OrderID JOIN `products` p ON p.productid = od.ProductID '
        "WHERE customerid IN (SELECT CustomerID FROM Orders WHERE ShipCity = 'Lyon') ORDER BY q"
    )
    checks = check_sql(northwind, sql)
    assert set(names(checks)) == {
        "Order Details",
        "Orders",
        "Products",
        "Order Details.OrderID",
        "Order Details.Quantity",
        "Orders.CustomerID",
        "Orders.ShipCity",
        "Products.ProductName",
        "Orders.OrderID",
        "Order Details.ProductID",
        "Products.ProductID",
    }
    assert [(v.target, v.op, v.value, v.found) for v in checks.values] == [("Orders.ShipCity", "=", "Lyon", True)]
    assert checks.confidence == "checked", checks.findings


def test_an_unknown_name_and_a_failing_query_are_doubtful(chinook: ReadOnlyDatabase) -> None:
    checks = check_sql(chinook, "SELECT Nope FROM Album")
    assert codes(checks) == ["unknown_name"]  # said once, not also as SQLite's "no such column: Nope"
    assert checks.confidence == "doubtful"
    assert [f.message for f in checks.findings] == ["no such column nope"]
    checks = check_sql(chinook, "SELECT count(*) FROM Album WHERE length(Title, 2) > 3")
    assert codes(checks) == ["failed"] and "wrong number of arguments" in checks.findings[0].message
    checks = check_sql(chinook, "SELECT a.Nope FROM Album a")
    assert "unknown_name" in codes(checks)


def test_sql_that_does_not_parse_is_unchecked_not_an_error(chinook: ReadOnlyDatabase) -> None:
    checks = check_sql(chinook, "SELEC * FROM Album")
    assert codes(checks) == ["unparsed"] and checks.confidence == "doubtful"  # and it failed to run
    assert checks.findings[0].message == 'it does not parse as SQL (near "SELEC": syntax error)'


@pytest.mark.parametrize(
    "sql, says",
    [
        ("SELEC * FROM Album", 'it does not parse as SQL (near "SELEC": syntax error)'),
        ("DELETE FROM Album", "it is a DELETE statement, not a query: only SELECT, WITH and VALUES are checked"),
        ("SELECT 1; SELECT 2", "it holds 2 statements; one is checked at a time"),
        ("  ;", None),
    ],
)
def test_edge_sql_check_refuses_sql_it_cannot_check(chinook_db: Path, sql: str, says: str | None) -> None:
    """Exit 1 with a plain sentence (no parser internals) for SQL that cannot be checked at all;
    a doubtful answer stays exit 0."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "edge_sql", "check", "--db", str(chinook_db), "--sql", sql],
        capture_output=True,
        text=True,
    )
    expected = f"this SQL cannot be checked: {says}" if says else "--sql is empty: give the SELECT statement to check"
    assert (done.returncode, done.stderr, done.stdout) == (1, f"Error: {expected}\n", "")
    doubtful = subprocess.run(
        [sys.executable, "-m", "edge_sql", "check", "--db", str(chinook_db), "--sql", "SELECT Nope FROM Album"],
        capture_output=True,
        text=True,
    )
    assert doubtful.returncode == 0 and doubtful.stdout.count("no such column") == 1, doubtful.stdout


# -- values --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "table, column, value",
    [
        ("Genre", "Name", "Rock"),
        ("Genre", "Name", "rock"),
        ("Customer", "Country", "Brazil"),
        ("Customer", "Country", "Brasil"),
        ("Artist", "Name", "AC/DC"),
        ("Track", "Composer", "Nobody at all"),
        ("Invoice", "BillingCity", "Paris"),
        ("Employee", "Title", "Sales Support Agent"),
        ("Track", "GenreId", 25),
        ("Track", "GenreId", 1),
    ],
)
def test_a_value_is_found_exactly_when_sqlite3_finds_it(
    chinook: ReadOnlyDatabase, chinook_db: Path, table: str, column: str, value: object
) -> None:
    literal = f"'{value}'" if isinstance(value, str) else str(value)
    checks = check_sql(chinook, f"SELECT * FROM {table} WHERE {column} = {literal}")
    with sqlite3.connect(f"file:{chinook_db}?mode=ro", uri=True) as conn:
        expected = conn.execute(f'SELECT count(*) FROM "{table}" WHERE "{column}" = ?', (value,)).fetchone()[0] > 0
    [check] = checks.values
    assert (check.target, check.value, check.found, check.scope) == (f"{table}.{column}", value, expected, "table")
    assert ("value_not_found" in codes(checks)) == (not expected)


def test_closest_values_other_case_then_prefix_then_nearest(chinook: ReadOnlyDatabase) -> None:
    [case] = check_sql(chinook, "SELECT * FROM Genre WHERE Name = 'rock'").values
    assert (case.found, case.closest, case.closest_how) == (False, ["Rock"], "case")
    [prefix] = check_sql(chinook, "SELECT * FROM Customer WHERE Country = 'Brasil'").values
    assert (prefix.closest, prefix.closest_how) == (["Brazil"], "prefix")
    [nearest] = check_sql(chinook, "SELECT * FROM Customer WHERE City = 'Sao Paulo'").values
    assert nearest.closest_how == "nearest" and nearest.closest[0] == "São Paulo"
    checks = check_sql(chinook, "SELECT * FROM Customer WHERE City = 'Sao Paulo'")
    assert "Customer.City = 'Sao Paulo' matches no row; closest: 'São Paulo'" in checks.summary()


def test_in_like_glob_between_and_wrapped_columns(chinook: ReadOnlyDatabase) -> None:
    sql = (
        "SELECT * FROM Customer WHERE Country IN ('Brazil', 'Narnia') AND Email LIKE '%@gmail.com' "
        "AND LastName GLOB 'Gon*' AND upper(City) = 'SAO PAULO' AND State BETWEEN 'A' AND 'C'"
    )
    checks = check_sql(chinook, sql)
    shown = [(v.target, v.op, v.value, v.found) for v in checks.values]
    assert sorted(shown, key=str) == sorted(
        [
            ("Customer.Country", "IN", "Brazil", True),
            ("Customer.Country", "IN", "Narnia", False),
            ("Customer.Email", "LIKE", "%@gmail.com", True),
            ("Customer.LastName", "GLOB", "Gon*", True),
            ("Customer.City", "=", "SAO PAULO", False),
            ("Customer.State", "BETWEEN", "A", True),
        ],
        key=str,
    )
    [glob] = check_sql(chinook, "SELECT * FROM Customer WHERE LastName GLOB 'gon*'").values
    assert (glob.found, glob.closest, glob.closest_how) == (False, ["Gonçalves"], "case")


def test_a_large_table_is_checked_through_its_index_or_a_bounded_scan(tmp_path: Path) -> None:
    path = tmp_path / "big.sqlite"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, code TEXT, label TEXT)")
        conn.execute("CREATE INDEX t_code ON t(code)")
        conn.executemany(
            "INSERT INTO t (code, label) VALUES (?, ?)", ((f"c{i}", f"label {i % 1000}") for i in range(250_000))
        )
        conn.execute("INSERT INTO t (code, label) VALUES ('last', 'only at the end')")
    conn.close()
    before = digest(path)
    with ReadOnlyDatabase(path) as db:
        checks = check_sql(db, "SELECT * FROM t WHERE code = 'last' OR label = 'only at the end' OR id = 3")
    assert digest(path) == before
    by_column = {v.column: v for v in checks.values}
    assert (by_column["code"].found, by_column["code"].scope) == (True, "index")
    assert (by_column["id"].found, by_column["id"].scope) == (True, "index")
    label = by_column["label"]
    assert (label.found, label.scope) == (None, "first 200,000 rows")
    assert "no match in the first 200,000 of about 250,001 rows" in label.note
    assert checks.confidence == "unchecked" and codes(checks) == ["value_unchecked"]


# -- results -------------------------------------------------------------------------------


def test_result_checks(chinook: ReadOnlyDatabase) -> None:
    assert codes(check_sql(chinook, "SELECT Name FROM Genre WHERE GenreId > 1000")) == ["no_rows"]
    assert codes(check_sql(chinook, "SELECT max(Total) FROM Invoice WHERE Total < 0")) == ["null_row"]
    truncated = check_sql(chinook, "SELECT Name FROM Track", max_rows=10)
    assert codes(truncated) == ["truncated"] and truncated.confidence == "checked"
    assert codes(check_sql(chinook, "SELECT COUNT(*) FROMcab")) == ["no_table"]  # FROMcab: a column alias
    forced = check_sql(chinook, "SELECT count(*) FROM Track", forced=True, fallback=True)
    assert codes(forced) == ["forced", "fallback"] and forced.confidence == "doubtful"
    assert forced.findings[0].message == "the answer was forced (tool rounds used up)"  # no reason given: rounds
    for reason, words in [("context", "context budget reached"), ("failed_queries", "too many failed queries")]:
        because = check_sql(chinook, "SELECT count(*) FROM Track", forced=True, force_reason=reason)
        assert because.findings[0].message == f"the answer was forced ({words})"  # the episode's own reason
    assert check_sql(chinook, "SELECT count(*) FROM Track").to_json()["confidence"] == "checked"


def test_edit_distance() -> None:
    assert [edit_distance("rock", "rock"), edit_distance("rock", "rok"), edit_distance("kitten", "sitting")] == [
        0,
        1,
        3,
    ]


# -- provenance ----------------------------------------------------------------------------


def rounds_of(toolbox: Toolbox, *rounds: list[tuple[str, dict]]) -> list[RoundRecord]:
    """Real tool calls on the database, recorded as an episode records them."""
    records = []
    for index, calls in enumerate(rounds, start=1):
        record = RoundRecord(index=index, think="")
        for tool, args in calls:
            result = toolbox.call(tool, args)
            record.calls.append(CallRecord(tool, args, result.ok, result.output))
        records.append(record)
    return records


def seen(checks, name: str) -> list[tuple]:
    use = next(
        n
        for n in [*checks.names, *checks.values]
        if getattr(n, "name", None) == name or getattr(n, "literal", None) == name
    )
    return [(s.tool, s.round, s.call) for s in use.seen]


def test_provenance_names_each_call_that_showed_a_name_or_value(northwind: ReadOnlyDatabase) -> None:
    toolbox = Toolbox(northwind)
    rounds = rounds_of(
        toolbox,
        [("list_tables", {}), ("describe_table", {"table_name": "[Order Details]"})],
        [
            ("describe_table", {"table_name": "products"}),
            ("run_query", {"sql": "SELECT DISTINCT CategoryName FROM Categories"}),
        ],
    )
    sql = (
        'SELECT p.ProductName FROM "order details" AS od JOIN Products p USING (ProductID) '
        "WHERE od.Quantity > 100 AND p.Discontinued = 1 AND p.CategoryID IN "
        "(SELECT CategoryID FROM Categories c WHERE c.CategoryName = 'Beverages') "
        "AND p.QuantityPerUnit = '24 - 12 oz bottles' "
        "AND p.SupplierID IN (SELECT SupplierID FROM Suppliers WHERE Country = 'Japan')"
    )
    checks = check_sql(northwind, sql)
    attach_provenance(
        checks, rounds, "Which products sold more than 100 at once?", "discontinued products have Discontinued = 1"
    )
    assert seen(checks, "Order Details") == [("list_tables", 1, 0), ("describe_table", 1, 1)]
    assert seen(checks, "Order Details.Quantity") == [("describe_table", 1, 1)]
    assert seen(checks, "Products.ProductName") == [("describe_table", 2, 0)]
    assert seen(checks, "Categories") == [("list_tables", 1, 0), ("run_query", 2, 1)]
    assert seen(checks, "Categories.CategoryName") == [("run_query", 2, 1)]
    assert seen(checks, "Categories.CategoryID") == [("describe_table", 2, 0)]  # Products' foreign key
    assert seen(checks, "'Beverages'") == [("run_query", 2, 1)]
    assert seen(checks, "1") == [("evidence", None, None)]  # a literal only in the evidence
    assert seen(checks, "Products.Discontinued") == [("describe_table", 2, 0), ("evidence", None, None)]
    assert seen(checks, "Suppliers") == [("list_tables", 1, 0)]  # listed, never described
    assert seen(checks, "Suppliers.Country") == []
    assert seen(checks, "'24 - 12 oz bottles'") == []
    assert [(f.level, f.message) for f in checks.findings] == [
        ("doubtful", "the query returned no rows"),
        ("unchecked", "table Suppliers was only listed, never described"),
        ("doubtful", "column Suppliers.Country was never shown to the model"),
        ("unchecked", "'24 - 12 oz bottles' was never shown to the model (found in Products.QuantityPerUnit)"),
        ("unchecked", "'Japan' was never shown to the model (found in Suppliers.Country)"),
    ]
    assert checks.confidence == "doubtful"
    assert checks.to_json()["names"][0] == {
        "kind": "table",
        "name": "Order Details",
        "table": "Order Details",
        "column": None,
        "seen": [{"tool": "list_tables", "round": 1, "call": 0}, {"tool": "describe_table", "round": 1, "call": 1}],
    }


def test_provenance_of_a_fully_explored_answer_is_checked(chinook: ReadOnlyDatabase) -> None:
    toolbox = Toolbox(chinook)
    rounds = rounds_of(
        toolbox,
        [("describe_table", {"table_name": "Genre"}), ("describe_table", {"table_name": "Track"})],
        [("distinct_values", {"table_name": "Genre", "column_name": "Name", "limit": 30})],
        [("submit_sql", {"sql": "SELECT count(*) FROM Track JOIN Genre USING (GenreId) WHERE Genre.Name = 'Rock'"})],
    )
    checks = check_sql(chinook, "SELECT count(*) FROM Track JOIN Genre USING (GenreId) WHERE Genre.Name = 'Rock'")
    attach_provenance(checks, rounds, "How many rock tracks are there?", None)
    assert seen(checks, "'Rock'") == [("distinct_values", 2, 0), ("question", None, None)]
    assert checks.confidence == "checked", checks.findings
    assert checks.summary() == ("checks: checked (2 tables, 3 columns, 1/1 value found, names traced to the episode)")


# -- the command and the API ---------------------------------------------------------------


def test_edge_sql_check_command_prints_the_line_and_the_json(chinook_db: Path) -> None:
    import json
    import subprocess
    import sys

    before = digest(chinook_db)
    sql = "SELECT count(*) FROM Track t JOIN Genre g ON g.GenreId = t.GenreId WHERE g.Name = 'rock'"
    run = subprocess.run(
        [sys.executable, "-m", "edge_sql", "check", "--db", str(chinook_db), "--sql", sql],
        capture_output=True,
        text=True,
        check=True,
    )
    assert run.stdout.splitlines() == [
        "checks: doubtful (2 tables, 3 columns, 0/1 value found)",
        "  doubtful: Genre.Name = 'rock' matches no row; closest: 'Rock' (in another case)",
        "  value Genre.Name = 'rock': not found (table)",
    ]
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "edge_sql",
            "check",
            "--db",
            str(chinook_db),
            "--sql",
            sql.replace("'rock'", "'Rock'"),
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    data = json.loads(run.stdout)
    assert (data["confidence"], data["reasons"], data["provenance"]) == ("checked", [], False)
    assert [(v["table"], v["column"], v["value"], v["found"]) for v in data["values"]] == [
        ("Genre", "Name", "Rock", True)
    ]
    assert [n["name"] for n in data["names"] if n["kind"] == "table"] == ["Track", "Genre"]
    missing = subprocess.run(
        [sys.executable, "-m", "edge_sql", "check", "--db", str(chinook_db.with_name("no.db")), "--sql", sql],
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 1 and missing.stderr.startswith("Error: database file not found")
    assert digest(chinook_db) == before


def test_the_python_api_checks_a_path(chinook_db: Path) -> None:
    import edge_sql

    checks = edge_sql.check_sql(chinook_db, "SELECT Email FROM Customer WHERE Country = 'Brasil'")
    assert isinstance(checks, edge_sql.Checks)
    assert checks.confidence == "doubtful"
    assert [f.code for f in checks.findings] == ["value_not_found", "no_rows"]


# -- the vote's agreement and abstention ---------------------------------------------------


def voted(agreed: int, k: int, chinook: ReadOnlyDatabase):
    from edge_sql.agent.result import EpisodeResult
    from edge_sql.agent.stats import EpisodeStats, VoteStats

    sql = "SELECT count(*) FROM Album"
    result = EpisodeResult(
        question="How many albums?",
        evidence=None,
        sql=sql,
        columns=["count(*)"],
        rows=[[347]],
        truncated=False,
        forced=False,
        fallback=False,
        answer=sql,
        rounds=[],
        stats=EpisodeStats(vote=VoteStats(k=k, agreed=agreed, voters=k, chosen=0, agreement=agreed / k, finished=k)),
        transcript="",
        stop="submitted",
    )
    result.checks = check_sql(chinook, sql)
    return result


def test_the_vote_joins_the_confidence_and_abstention_answers_not_sure(chinook: ReadOnlyDatabase) -> None:
    from edge_sql.agent.checked import abstain, join_vote

    most = voted(3, 4, chinook)
    join_vote(most)
    assert (most.checks.agreement, most.checks.confidence) == (0.75, "checked")
    assert [(f.level, f.message) for f in most.checks.findings] == [("note", "3 of 4 episodes agree on this result")]
    assert abstain(most, 0.75) is most  # 3 of 4 is not below 0.75
    half = voted(2, 4, chinook)
    join_vote(half)
    assert (half.checks.agreement, half.checks.confidence) == (0.5, "doubtful")
    assert half.checks.reasons == ["2 of 4 episodes agree on this result"]
    unsure = abstain(half, 0.75)
    assert (unsure.stop, unsure.sql, unsure.rows, unsure.answer, unsure.ok) == (
        "abstained",
        None,
        [],
        "SELECT count(*) FROM Album",
        False,
    )
    assert unsure.error == "not sure: 2 of 4 episodes agree on this result (50%, below 75%)"
    data = unsure.to_json(transcript=False)
    assert (data["stop"], data["sql"], data["checks"]["agreement"]) == ("abstained", None, 0.5)
    from edge_sql.agent.display import answer_text

    assert answer_text(unsure).splitlines()[0] == (
        "not sure: 2 of 4 episodes agree on this result (50%, below 75%); the voted SQL was: SELECT count(*) FROM Album"
    )


def test_abstain_below_is_refused_without_a_vote() -> None:
    from edge_sql.errors import BadRequest
    from edge_sql.serve.request import AskRequest

    with pytest.raises(BadRequest, match=r"^abstain_below needs vote"):
        AskRequest.from_json(b'{"question": "q", "database": "d", "abstain_below": 0.5}')
    with pytest.raises(BadRequest, match=r"field 'abstain_below': Input should be less than or equal to 1"):
        AskRequest.from_json(b'{"question": "q", "database": "d", "vote": 3, "abstain_below": 1.5}')
    assert AskRequest.from_json(b'{"question": "q", "database": "d", "vote": 3, "abstain_below": 0.5}').vote == 3
