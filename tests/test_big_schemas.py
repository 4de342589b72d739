"""Databases with thousands of tables or columns: list_tables and describe_table rank by the
question and say what they left out; schemas that fit are shown exactly as trained.

Real SQLite files, the real index in the test's store, the real tokenizer (the fixture
checkpoint's), and real episodes with the fixture model (scripted turns, real tools)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from benchmarks.retrieval.bird_schemas import load_bird, write_database
from edge_sql.agent import Budget, run_episode
from edge_sql.agent.prompt import load_prompt
from edge_sql.cli import main as cli
from edge_sql.tools import ReadOnlyDatabase, Toolbox
from edge_sql.tools.formatting import one_line_ddl
from edge_sql.tools.schema_index import index_path
from edge_sql.tools.schema_ranking import Ranking
from edge_sql.tools.schema_view import (
    DESCRIBE_SHARE_TOKENS,
    LIST_SHARE_TOKENS,
    SchemaView,
    estimated_tokens,
    list_tables_for,
)
from episode_checks import check_turns_parse, sha256
from scripted_session import ScriptedSession

DATA_DIR = Path(__file__).resolve().parents[1] / "edge_sql" / "data"
TOKEN_LIMIT = 1500  # what list_tables may show of a big schema, in tokens (issue 55)
DESCRIBE_TOKEN_LIMIT = 2500  # describe_table of a too-wide table (BIRD's widest, Match, is 1,264)


def make_db(path: Path, tables: int, *, extra: list[str] = (), alike: bool = False, rows: bool = False) -> Path:
    """`tables` tables named `sales_orders_12` and so on (with the same five columns when
    `alike`, else columns of their own), plus the `extra` CREATE statements."""
    conn = sqlite3.connect(path)
    with conn:
        for i in range(tables):
            domain = ("sales", "crm", "erp", "hr", "ops")[i % 5]
            own = "" if alike else f"_{i}"
            cols = ", ".join(f"{word}{own} TEXT" for word in ("code", "status", "amount", "placed", "region"))
            conn.execute(f"CREATE TABLE {domain}_orders_{i} (id INTEGER PRIMARY KEY, {cols})")
        for statement in extra:
            conn.execute(statement)
        if rows:
            conn.execute("INSERT INTO t_x9 VALUES (1, 'Ada Lovelace', 100.0, '2020-01-01', 'Zanzibar branch')")
    conn.close()
    return path


_PLACES = ("north", "south", "east", "west", "upper", "lower", "inner", "outer", "river", "harbour")
_THINGS = ("alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "lambda", "theta", "zeta")
WORD_TABLES = [  # 600 tables whose names differ in words, not numbers: none are look-alikes
    f"CREATE TABLE {p}_{t}_{k} (id INTEGER, {k} TEXT)"
    for p in _PLACES
    for t in _THINGS
    for k in ("note", "memo", "tag", "flag", "mark", "label")
]
HIDDEN = "CREATE TABLE t_x9 (id INTEGER PRIMARY KEY, employee_name TEXT, salary REAL, hire_date TEXT, office TEXT)"


@pytest.fixture(scope="module")
def qwen_tokens(tiny_checkpoint: Path):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_checkpoint)
    return lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])


def trained_list(db: ReadOnlyDatabase) -> str:
    """list_tables as it was before ranking existed: every name, one a line."""
    return "\n".join(db.table_names() + [f"{v} (view)" for v in db.view_names()])


def test_bundled_and_bird_databases_are_shown_as_trained(tmp_path: Path) -> None:
    databases, _ = load_bird()
    paths = [DATA_DIR / "chinook" / "chinook.sqlite", DATA_DIR / "northwind" / "northwind.sqlite"]
    paths += [write_database(tables, tmp_path / f"{name}.sqlite") for name, tables in databases.items()]
    assert len(paths) == 13
    before = indexed()  # the store is the pytest process's: another test may have indexed its own schema
    for path in paths:
        with ReadOnlyDatabase(path) as db:
            toolbox = Toolbox(db, question="How many rows are in the biggest table of each kind?")
            assert toolbox.call("list_tables", {}).output == trained_list(db)
            for table in db.table_names() + db.view_names():
                described = toolbox.call("describe_table", {"table_name": table}).output
                assert described == one_line_ddl(db.create_statement(table))
    assert indexed() == before  # nothing was indexed for schemas that fit


def index_path_root() -> Path:
    from edge_sql.store.home import store_root

    return store_root() / "schema-index"


def indexed() -> set[Path]:
    """Every index file in the store."""
    root = index_path_root()
    return set(root.iterdir()) if root.exists() else set()


def test_a_telling_table_with_an_unhelpful_name_is_listed_first(tmp_path: Path, qwen_tokens, capfd) -> None:
    db_path = make_db(tmp_path / "big.db", 3000, extra=[HIDDEN], rows=True)
    listing = list_tables_for(db_path, "What is the average salary of employees hired in 2020?")
    lines = listing.text.splitlines()
    assert lines[0] == "t_x9"
    assert listing.ranked and listing.total == 3001
    assert "tables not listed" in lines[-1] and "describe_table accepts any table name" in lines[-1]
    assert estimated_tokens(listing.text) <= LIST_SHARE_TOKENS and qwen_tokens(listing.text) < TOKEN_LIMIT
    assert "indexing the 3,001 tables of big.db" in capfd.readouterr().err  # progress for a big build
    # a stored value finds it too: no word of this question is in its name or columns
    assert list_tables_for(db_path, "Who works at the Zanzibar branch?").shown[0] == "t_x9"


def test_hidden_count_is_exact(tmp_path: Path) -> None:
    db_path = make_db(tmp_path / "big.db", 1400, extra=[HIDDEN, *WORD_TABLES])
    listing = list_tables_for(db_path, "salary of each employee")
    covered = len(listing.shown) + sum(len(v) for v in listing.folded.values())
    assert listing.text.splitlines()[-1].startswith(f"({2001 - covered:,} of 2,001 tables not listed;")
    assert 0 < covered < 2001 and listing.shown[0] == "t_x9"


def test_wide_table_shows_related_columns_and_how_to_see_the_rest(tmp_path: Path, qwen_tokens) -> None:
    cols = ", ".join(f"measure_{i} REAL" for i in range(1998))
    path = tmp_path / "wide.db"
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(f"CREATE TABLE patients (patient_id INTEGER PRIMARY KEY, {cols}, systolic_blood_pressure REAL)")
    conn.close()
    with ReadOnlyDatabase(path) as db:
        toolbox = Toolbox(db, question="Which patients have a blood pressure over 140?")
        text = toolbox.call("describe_table", {"table_name": "patients"}).output
        head, note = text.split("\n")
        assert head.startswith("CREATE TABLE patients (patient_id INTEGER PRIMARY KEY, systolic_blood_pressure REAL,")
        shown = head.count(", ") + 1
        assert note.startswith(f"-- {2000 - shown:,} of 2,000 columns not shown")
        assert estimated_tokens(text) <= DESCRIBE_SHARE_TOKENS and qwen_tokens(text) < DESCRIBE_TOKEN_LIMIT
        listed = note.split("run_query: ")[-1]
        assert listed == "SELECT name, type FROM pragma_table_info('patients')"
        result = toolbox.call("run_query", {"sql": listed})  # the way the note gives runs
        assert result.ok and result.query is not None and result.query.rows[0] == ("patient_id", "INTEGER")


def test_unknown_table_gets_the_closest_names_in_a_big_schema(tmp_path: Path) -> None:
    db_path = make_db(tmp_path / "big.db", 3000, extra=[HIDDEN])
    with ReadOnlyDatabase(db_path) as db:
        toolbox = Toolbox(db, question="salaries")
        typo = toolbox.call("describe_table", {"table_name": "sales_order_15"}).output
        assert typo.startswith("Error: no such table: sales_order_15; the closest existing tables: sales_orders_15, ")
        assert len(typo.split(": ")[-1].split(", ")) == 5
        guessed = toolbox.call("describe_table", {"table_name": "employees"}).output
        assert guessed == "Error: no such table: employees; the closest existing tables: t_x9"
    with ReadOnlyDatabase(DATA_DIR / "chinook" / "chinook.sqlite") as db:  # fits: the trained error
        assert Toolbox(db).call("describe_table", {"table_name": "Albums"}).output == "Error: no such table: Albums"


def test_a_changed_schema_gets_a_new_index(tmp_path: Path) -> None:
    db_path = make_db(tmp_path / "big.db", 1500)
    question = "Which patients visited in March?"
    with ReadOnlyDatabase(db_path) as db:
        first = index_path(db)
        assert "patient_visits" not in list_tables_for(db, question).text
    assert first.exists()
    conn = sqlite3.connect(db_path)
    with conn:
        conn.execute("CREATE TABLE patient_visits (visit_id INTEGER PRIMARY KEY, patient TEXT, visited_on TEXT)")
    conn.close()
    with ReadOnlyDatabase(db_path) as db:
        second = index_path(db)
        assert second != first
        assert list_tables_for(db, question).shown[0] == "patient_visits"
    assert second.exists() and first.exists()  # the old one stays for the old schema (another copy)


def test_a_corrupt_index_falls_back_to_the_plain_list(tmp_path: Path, capfd) -> None:
    db_path = make_db(tmp_path / "big.db", 1500, extra=[HIDDEN])
    with ReadOnlyDatabase(db_path) as db:
        path = index_path(db)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"this is not an index" * 100)
        capfd.readouterr()
        listing = list_tables_for(db, "salary of employees")
    errors = capfd.readouterr().err.strip().splitlines()
    assert len(errors) == 1 and "cannot be read" in errors[0] and errors[0].endswith("listing tables in schema order")
    lines = listing.text.splitlines()
    assert lines[:-1] == [
        f"{d}_orders_{i}" for i, d in zip(range(len(lines) - 1), ["sales", "crm", "erp", "hr", "ops"] * 400)
    ]
    assert lines[-1].startswith(f"({1501 - (len(lines) - 1):,} of 1,501 tables not listed; listed: in schema order")


def test_a_locked_index_falls_back_to_the_plain_list(tmp_path: Path, capfd) -> None:
    db_path = make_db(tmp_path / "big.db", 1500, extra=[HIDDEN])
    with ReadOnlyDatabase(db_path) as db:
        assert list_tables_for(db, "salary").shown[0] == "t_x9"  # builds the index
        holder = sqlite3.connect(index_path(db), isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        try:
            capfd.readouterr()
            listing = list_tables_for(db, "salary")
        finally:
            holder.execute("ROLLBACK")
            holder.close()
    errors = capfd.readouterr().err.strip().splitlines()
    assert len(errors) == 1 and "locked" in errors[0]
    assert not listing.ranked and listing.text.splitlines()[0] == "sales_orders_0"


def test_tables_command_prints_what_the_model_sees(tmp_path: Path) -> None:
    db_path = make_db(tmp_path / "big.db", 1200, extra=[HIDDEN])
    question = "average salary per office"
    expected = list_tables_for(db_path, question)
    runner = CliRunner()
    plain = runner.invoke(cli, ["tables", "--db", str(db_path), "--question", question])
    assert plain.exit_code == 0 and plain.stdout == expected.text + "\n"
    as_json = runner.invoke(cli, ["tables", "--db", str(db_path), "--question", question, "--json"])
    figures = json.loads(as_json.stdout)
    assert figures["text"] == expected.text and figures["total_tables"] == 1201
    top = figures["ranking"][0]
    assert top["name"] == "t_x9" and top["shown"] and top["score"] > 0 and top["via"] == "words"
    assert [t["score"] for t in figures["ranking"]] == sorted((t["score"] for t in figures["ranking"]), reverse=True)
    missing = runner.invoke(cli, ["tables", "--db", str(tmp_path / "nope.db"), "--question", "x"])
    assert missing.exit_code == 1 and missing.output.count("\n") == 1


def call(tool: str, **args: object) -> str:
    return json.dumps({"tool": tool, "args": args})


@pytest.mark.parametrize("shape", ["3000 tables", "2000 columns"])
def test_a_big_schema_through_a_real_episode(tiny_gguf_fast: Path, tmp_path: Path, shape: str) -> None:
    if shape == "3000 tables":
        db_path = make_db(tmp_path / "big.db", 3000, extra=[HIDDEN], rows=True)
        first = call("list_tables")
        answer = "SELECT AVG(salary) FROM t_x9"
    else:
        db_path = tmp_path / "wide.db"
        conn = sqlite3.connect(db_path)
        with conn:
            cols = ", ".join(f"measure_{i} REAL" for i in range(1998))
            conn.execute(f"CREATE TABLE t_x9 (id INTEGER PRIMARY KEY, {cols}, salary REAL)")
        conn.close()
        first = call("describe_table", table_name="t_x9")
        answer = "SELECT AVG(salary) FROM t_x9"
    question = "What is the average salary?"
    script = [f"Look first.</think>\n\n{first}", "", f"Now answer.</think>\n\n{call('submit_sql', sql=answer)}"]
    before = sha256(db_path)
    budget = Budget()
    with ScriptedSession(tiny_gguf_fast, script=script, n_ctx=budget.max_tokens) as session:
        with ReadOnlyDatabase(db_path) as database:
            result = run_episode(session, Toolbox(database, question=question), question, budget=budget)
        assert not session.script
    assert sha256(db_path) == before
    check_turns_parse(result)
    output = result.rounds[0].calls[0].output
    assert load_prompt().results_cut_note not in result.transcript  # the tool text fitted
    assert output in result.transcript
    if shape == "3000 tables":
        assert output.splitlines()[0] == "t_x9" and "tables not listed" in output.splitlines()[-1]
    else:
        assert output.startswith("CREATE TABLE t_x9 (id INTEGER PRIMARY KEY, salary REAL,")
        assert "\n-- " in output and "of 2,000 columns not shown" in output
    assert result.stop == "submitted"


def test_look_alikes_fold_into_one_line_when_asked(tmp_path: Path) -> None:
    db_path = make_db(tmp_path / "shards.db", 3000, extra=[HIDDEN], alike=True)
    with ReadOnlyDatabase(db_path) as db:
        view = SchemaView(db, "salary of employees", ranking=Ranking(fold=True))
        listing = view.listing()
        view.close()
    lines = listing.text.splitlines()
    assert lines[0] == "t_x9"
    assert lines[1] == "sales_orders_0 (+599 alike, same columns)"  # the best-ranked heads it: no member to name
    assert len(lines) == 7 and lines[-1].startswith("(0 of 3,001 tables not listed;")
    assert sorted(listing.folded["sales_orders_0"], key=lambda n: int(n.rsplit("_", 1)[1]))[0] == "sales_orders_5"


def test_a_schema_that_cannot_be_read_in_time_gets_the_plain_list(tmp_path: Path, capfd, monkeypatch) -> None:
    from edge_sql.tools import schema_index

    monkeypatch.setattr(schema_index, "READ_TIME_LIMIT_S", 0.5)
    db_path = make_db(tmp_path / "big.db", 1500, extra=[HIDDEN])
    with ReadOnlyDatabase(db_path) as db:
        writer = sqlite3.connect(db_path, isolation_level=None)
        writer.execute("BEGIN EXCLUSIVE")  # another program writing: every read waits
        try:
            capfd.readouterr()
            listing = list_tables_for(db, "salary of employees")
        finally:
            writer.execute("ROLLBACK")
            writer.close()
    errors = capfd.readouterr().err.strip().splitlines()
    assert len(errors) == 1 and "could not be read for ranking" in errors[0]
    assert not listing.ranked and listing.text.splitlines()[0] == "sales_orders_0"
    assert "tables not listed; listed: in schema order (no ranking)" in listing.text.splitlines()[-1]
    assert not index_path(db).exists()


def test_the_token_estimate_is_never_under_the_real_count(qwen_tokens) -> None:
    texts = [
        "\n".join(f"frpm_{2019 + i % 4}_{i}" for i in range(200)),
        "\n".join(f"SalesOrderHeader{i}" for i in range(200)),
        "CREATE TABLE t (" + ", ".join(f"measure_{i} REAL" for i in range(300)) + ")",
        "Überweisungen_Größe, café_crème (x) -- 12.5%",
    ]
    for text in texts:
        assert estimated_tokens(text) >= qwen_tokens(text)


def test_copies_of_a_table_fold_into_its_line_and_a_join_table_does_not(tmp_path: Path) -> None:
    copies = [f"customers_{2000 + i}" for i in range(20)] + [f"customers_archive_{i}" for i in range(20)]
    extra = ["CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, city TEXT, email TEXT)"]
    extra += [
        f"CREATE TABLE {name} (id INTEGER, name TEXT, city TEXT, email TEXT, archived_at TEXT)" for name in copies
    ]
    extra += ["CREATE TABLE customers_orders (customer_id INTEGER, order_id INTEGER, quantity INTEGER)"]
    extra += ["CREATE TABLE customers_in_region (id INTEGER, region_id INTEGER)"]  # a link table: one column shared
    db_path = make_db(tmp_path / "copies.db", 3000, extra=extra)
    listing = list_tables_for(db_path, "email and city of customers and the quantity they ordered")
    lines = listing.text.splitlines()
    customers = next(line for line in lines if line.startswith("customers ("))
    assert customers == "customers (+40 copies)"  # `customers` matched best itself: no copy named
    assert "customers_orders" in lines and "customers_in_region" in lines  # no copies: their own lines
    assert not any(line.startswith("customers_2") for line in lines)
    assert sorted(listing.folded["customers"]) == sorted(copies)
    assert listing.named()[: len(listing.shown)] == listing.shown
    covered = len(listing.shown) + sum(len(v) for v in listing.folded.values())
    assert lines[-1].startswith(f"({3043 - covered:,} of 3,043 tables not listed;")


def test_one_copy_is_a_copy_and_the_best_ranked_look_alike_heads_its_line(tmp_path: Path) -> None:
    """A new user's company schema: quarterly tables whose columns changed are look-alikes,
    not copies of `hr_employees`, and the one the question matches best is named first."""
    extra = ["CREATE TABLE hr_employees (id INTEGER PRIMARY KEY, name TEXT, department TEXT, hired TEXT)"]
    extra += ["CREATE TABLE hr_employees_old (id INTEGER, name TEXT, department TEXT, hired TEXT)"]
    for year in range(2015, 2025):
        for quarter in (1, 2):
            headcount = ", headcount_2023 INTEGER" if year == 2023 else ""
            extra.append(
                f"CREATE TABLE hr_employees_{year}_q{quarter} (id INTEGER, name TEXT, grade_{year} TEXT{headcount})"
            )
    db_path = make_db(tmp_path / "company.db", 2000, extra=extra)
    listing = list_tables_for(db_path, "How many employees did HR have in 2023?")
    lines = listing.text.splitlines()
    line = next(line for line in lines if line.startswith("hr_employees"))
    assert line.startswith(
        "hr_employees (+1 copy: hr_employees_old; +20 look-alikes (other columns): hr_employees_2023_q"
    )
    assert {"hr_employees_2023_q1", "hr_employees_2023_q2"} & set(listing.named())  # the best-ranked is named
    assert not any(other.startswith("hr_employees_") for other in lines)


def test_glued_and_spaced_names_meet_and_an_undeclared_key_raises_its_table(tmp_path: Path) -> None:
    extra = [
        "CREATE TABLE workorder (wo_id INTEGER PRIMARY KEY, opened TEXT, work_type TEXT, order_total REAL)",
        "CREATE TABLE car_makers (maker_id INTEGER PRIMARY KEY, maker TEXT, country TEXT)",
        "CREATE TABLE customers (number INTEGER PRIMARY KEY, surname TEXT, segment TEXT)",
        "CREATE TABLE orders (order_no INTEGER PRIMARY KEY, cust_no INTEGER, shipped_on TEXT, freight REAL)",
    ]
    db_path = make_db(tmp_path / "words.db", 3000, extra=extra)
    assert list_tables_for(db_path, "How many work orders were opened in May?").shown[0] == "workorder"
    assert list_tables_for(db_path, "Which carmakers are from Japan?").shown[0] == "car_makers"
    listing = list_tables_for(db_path, "total freight of the orders shipped in May")
    ranked = {t.name: t for t in listing.ranking}
    assert listing.shown[0] == "orders" and ranked["customers"].via == "link"  # cust_no -> customers(number)
    assert listing.shown.index("customers") < 12


def test_no_real_bird_table_counts_as_a_copy_of_another() -> None:
    from benchmarks.retrieval.bird_schemas import merged_schema
    from edge_sql.tools.schema_index import TableFacts, copy_roots

    databases, _ = load_bird()
    for target in databases:
        tables = merged_schema(databases, target, [])
        facts = tuple(TableFacts(t.name, "table", tuple(c for c, _ in t.columns)) for t in tables)
        assert len(facts) > 70 and copy_roots(facts) == {}
    copies = (TableFacts("Team", "table", ("id", "team_api_id", "team_long_name")),)
    copies += (TableFacts("Team_2019", "table", ("id", "team_api_id", "team_long_name", "note")),)
    copies += (TableFacts("Team_in_league", "table", ("team_api_id", "league_id")),)  # a link table
    copies += (TableFacts("Team_2020", "table", ("id", "team_api_id", "coach", "stadium")),)  # changed shape
    assert copy_roots(copies) == {1: 0}
    assert copy_roots(copies, same_shape=False) == {1: 0, 2: 0, 3: 0}  # the rule before: half of its columns


def test_the_share_is_filled_in_the_model_s_own_tokens(tmp_path: Path, tiny_gguf_fast: Path, qwen_tokens) -> None:
    """`--model` counts with that model's vocabulary (no weights loaded), as the agent counts
    with its own: the share holds more tables than the estimate allows, and stays within it."""
    db_path = make_db(tmp_path / "big.db", 2400, extra=[HIDDEN, *WORD_TABLES])
    question = "average salary per office"
    runner = CliRunner()
    estimated = json.loads(
        runner.invoke(cli, ["tables", "--db", str(db_path), "--question", question, "--json"]).stdout
    )
    args = ["tables", "--db", str(db_path), "--question", question, "--json", "--model", str(tiny_gguf_fast)]
    counted = json.loads(runner.invoke(cli, args).stdout)
    assert estimated["tokens_counted_with"] == "estimate" and counted["tokens_counted_with"] == str(tiny_gguf_fast)
    assert counted["shown"][0] == estimated["shown"][0] == "t_x9"
    assert qwen_tokens(estimated["text"]) < 0.8 * TOKEN_LIMIT < qwen_tokens(counted["text"]) <= TOKEN_LIMIT
    assert counted["text"] == list_tables_for(db_path, question, count_tokens=qwen_tokens).text


def test_tables_command_shows_what_describe_table_shows(tmp_path: Path, qwen_tokens) -> None:
    cols = ", ".join(f"measure_{i} REAL" for i in range(1997))
    path = tmp_path / "wide.db"
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("CREATE TABLE wards (ward_id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute(
            f"CREATE TABLE patients (patient_id INTEGER PRIMARY KEY, {cols}, ward_id INTEGER, "
            "systolic_blood_pressure REAL, FOREIGN KEY (ward_id) REFERENCES wards (ward_id))"
        )
    conn.close()
    question = "Which patients have a blood pressure over 140?"
    runner = CliRunner()
    args = ["tables", "--db", str(path), "--question", question, "--table", "patients"]
    plain = runner.invoke(cli, args)
    with ReadOnlyDatabase(path) as db:
        expected = Toolbox(db, question=question).call("describe_table", {"table_name": "patients"}).output
    assert plain.exit_code == 0 and plain.stdout == expected + "\n"
    assert expected.startswith(
        "CREATE TABLE patients (patient_id INTEGER PRIMARY KEY, ward_id INTEGER, systolic_blood_pressure REAL, "
    )  # the key, the foreign key, then the columns the question names
    figures = json.loads(runner.invoke(cli, [*args, "--json"]).stdout)
    assert figures["text"] == expected and figures["table"] == "patients" and len(figures["columns"]) == 2000
    by_name = {c["name"]: c for c in figures["columns"]}
    assert by_name["systolic_blood_pressure"]["score"] > 0 and by_name["systolic_blood_pressure"]["shown"]
    assert by_name["measure_5"]["score"] == 0
    shown = sum(c["shown"] for c in figures["columns"])
    assert expected.split("\n")[1].startswith(f"-- {2000 - shown:,} of 2,000 columns not shown")
    small = runner.invoke(cli, ["tables", "--db", str(path), "--question", question, "--table", "wards"])
    assert small.stdout == "CREATE TABLE wards (ward_id INTEGER PRIMARY KEY, name TEXT)\n"  # fits: as trained
    unknown = runner.invoke(cli, ["tables", "--db", str(path), "--question", question, "--table", "nurses"])
    assert unknown.exit_code == 0 and unknown.stdout == "Error: no such table: nurses\n"


def test_words_split_against_the_schema_s_own_vocabulary() -> None:
    from edge_sql.tools.schema_words import schema_vocabulary, split_glued, split_words

    vocabulary = schema_vocabulary(["GasStationID", "work_type", "order_total", "car_makers", "workorder"])
    assert split_glued("gasstations", vocabulary) == ["gas", "stations"]
    assert split_glued("carmakers", vocabulary) == ["car", "makers"]
    assert split_words("workorder", vocabulary) == ["workorder", "work", "order"]
    assert split_glued("order", vocabulary) == [] and split_glued("orchestra", vocabulary) == []


def test_each_question_word_s_best_named_table_ranks_above_a_strong_word_s_neighbours(tmp_path: Path) -> None:
    """ "teachers that teach": `teaches` matches best and its neighbours are raised next to it;
    `teacher`, named by the question but wide (BM25 weighs the whole row), must not sink below them."""
    topics = [*_THINGS, "music", "drama", "art", "latin"]  # names of words: no numbered family folds them
    linked = [f"CREATE TABLE {t}_lesson ({t}_lesson_id INTEGER PRIMARY KEY, {t}_topic TEXT)" for t in topics]
    refs = ", ".join(f"{t}_lesson_id INTEGER REFERENCES {t}_lesson ({t}_lesson_id)" for t in topics)
    wide = ", ".join(f"detail_{i} TEXT" for i in range(40))
    rooms = [f"CREATE TABLE room_{i} (room_{i}_id INTEGER, teacher TEXT)" for i in range(300)]  # "teacher" is common
    extra = [
        *linked,
        *rooms,
        f"CREATE TABLE teaches (teach_id INTEGER PRIMARY KEY, {refs})",
        f"CREATE TABLE teacher (teacher_id INTEGER PRIMARY KEY, {wide})",
    ]
    db_path = make_db(tmp_path / "teach.db", 1000, extra=extra)
    question = "Show names of teachers that teach at least two courses."
    with ReadOnlyDatabase(db_path) as db:
        before = SchemaView(db, question, ranking=Ranking(cover=False)).listing().shown
        after = SchemaView(db, question).listing().shown
    assert before[0] == after[0] == "teaches"
    assert before.index("teacher") > 14  # under the fourteen lessons `teaches` links to
    assert after.index("teacher") == 1


def test_two_question_words_meet_a_name_the_schema_glues(tmp_path: Path) -> None:
    extra = ["CREATE TABLE highschooler (id INTEGER PRIMARY KEY, name TEXT, grade INTEGER)"]
    db_path = make_db(tmp_path / "glued.db", 3000, extra=extra)
    question = "How many high schoolers are there?"
    with ReadOnlyDatabase(db_path) as db:
        assert SchemaView(db, question).listing().shown[0] == "highschooler"
        assert (
            "highschooler"
            not in SchemaView(db, question, ranking=Ranking(joined=False, english=False)).listing().shown[:1]
        )


def test_describe_table_meets_names_numbers_and_totals() -> None:
    """The ranking masks "name", "number" and "total" in questions (every table has such a
    column); describe_table does not: they name the very column a question asks for."""
    from edge_sql.tools.schema_ranking import column_scores, query_terms

    columns = ["singer_id", "name", "phone_number", "total_sales", "average_age", "country"]
    scores = column_scores(columns, "What are the names, total sales and average age of singers?")
    assert sorted(scores) == [0, 1, 3, 4]  # singer_id, name, total_sales, average_age
    assert "names" not in query_terms("What are the names of singers?")  # tables: still masked


def test_describe_table_meets_a_year_an_age_and_a_glued_first_name() -> None:
    from edge_sql.tools.schema_ranking import column_terms, rank_columns

    columns = [f"reading_{i}" for i in range(300)] + ["Fname", "LName", "Age", "Year", "Country"]
    question = "Find the first name and last name of students older than 20 who enrolled in 2014."
    assert sorted(rank_columns(columns, question)[:4]) == [300, 301, 302, 303]  # Fname, LName, Age, Year
    assert column_terms("How many concerts in 2014?")[-1] == "year"
    assert "age" in column_terms("the youngest singer") and "age" not in column_terms("the newest singer")
