"""Issue 62's fourth pass: a hub's hundreds of neighbours no longer bury another matched table's
neighbours, a schema that glues every name (`LISTEDSECURITY.HASLASTTRADEDVALUE`) is split into
English words, a folded line counts its members, and a wide table's matched repeats and
long carried-over names give way to its own columns.

Real SQLite files and the real index in the test's store."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from edge_sql.tools import ReadOnlyDatabase
from edge_sql.tools.schema_ranking import FAMILY_SHOWN, NEIGHBOUR_LIMIT, Ranking, rank_columns
from edge_sql.tools.schema_view import SchemaView
from edge_sql.tools.schema_words import english_parts, split_words
from test_big_schemas import WORD_TABLES, make_db

HUB_LINKS = 300  # tables that join the hub: more than a share lists
HUB = [
    "CREATE TABLE patients (patients_id INTEGER PRIMARY KEY, dob TEXT)",
    *(
        f"CREATE TABLE {s.split()[2]}_ref (rid INTEGER, pid INTEGER REFERENCES patients (patients_id))"
        for s in WORD_TABLES[:HUB_LINKS]
    ),
]
SECOND = [  # another schema's patients, one column longer: ranked just below the hub
    "CREATE TABLE patient (patientunitstayid INTEGER PRIMARY KEY, gender TEXT, age TEXT)",
    "CREATE TABLE lab (labid INTEGER PRIMARY KEY, stay INTEGER REFERENCES patient (patientunitstayid), labname TEXT)",
]
QUESTION = "What was the last value of patient 10 measured?"


def test_a_hub_s_neighbours_leave_room_for_the_next_matched_table_s(tmp_path: Path) -> None:
    """`patients` and `patient` both match; `patients` ranks first and is linked to 300 tables.
    Raised all at one score, those 300 fill the share in schema order and `lab`, the neighbour
    of `patient`, is cut; raised up to `NEIGHBOUR_LIMIT`, the best-linked first, `lab` is listed."""
    db_path = make_db(tmp_path / "hub.db", 0, extra=[*HUB, *WORD_TABLES[HUB_LINKS:], *SECOND])
    with ReadOnlyDatabase(db_path) as db:
        listing = SchemaView(db, QUESTION).listing()
        unspread = SchemaView(db, QUESTION, ranking=Ranking(spread=False)).listing()
    ranked = {t.name: t for t in listing.ranking}
    assert listing.shown[:2] == ["patients", "patient"]
    assert ranked["lab"].via == "link" and "lab" in listing.shown
    assert "lab" not in unspread.shown  # the hub's links, raised higher, filled the share first
    raised = [t for t in listing.ranking if t.via == "link" and t.name.endswith("_ref")]
    assert len(raised) == NEIGHBOUR_LIMIT
    assert sum(t.via == "link" and t.name.endswith("_ref") for t in unspread.ranking) == HUB_LINKS
    assert (
        f"({len(listing.ranking) - len(listing.shown):,} of {len(listing.ranking):,} tables not listed" in listing.text
    )


def test_the_best_linked_neighbours_are_raised_first(tmp_path: Path) -> None:
    """Of a hub's neighbours, those linked to more tables are raised (a fact table joins many;
        a link table to the hub only one): `visit`, linked to three tables, is raised; among tables
    linked alike, the first in schema order."""
    visit = [
        "CREATE TABLE ward (ward_id INTEGER PRIMARY KEY, floor TEXT)",
        "CREATE TABLE doctor (doctor_id INTEGER PRIMARY KEY, surname TEXT)",
        "CREATE TABLE visit (visit_id INTEGER PRIMARY KEY, pid INTEGER REFERENCES patients (patients_id), "
        "ward INTEGER REFERENCES ward (ward_id), doc INTEGER REFERENCES doctor (doctor_id))",
    ]
    db_path = make_db(tmp_path / "hub.db", 0, extra=[*HUB, *WORD_TABLES[HUB_LINKS:], *visit])
    with ReadOnlyDatabase(db_path) as db:
        ranking = SchemaView(db, "How old are the patients?").listing().ranking
    raised = [t.name for t in ranking if t.via == "link" and t.name not in ("ward", "doctor")]  # those: visit's
    assert "visit" in raised and len(raised) == NEIGHBOUR_LIMIT  # last of 301 in schema order, yet raised
    assert raised[:-1] == [f"{s.split()[2]}_ref" for s in WORD_TABLES[: NEIGHBOUR_LIMIT - 1]]  # the rest: ties


def test_glued_capitals_are_split_into_english_words(tmp_path: Path) -> None:
    """FIBEN-like names: no part is spelt apart anywhere in the schema, so its own words split
    nothing; English word frequency finds "last traded value" in `HASLASTTRADEDVALUE`."""
    assert english_parts("haslasttradedvalue") == ["has", "last", "traded", "value"]
    assert english_parts("custno") == []  # short: an abbreviation, not English words
    assert english_parts("organization") == []  # one word, left whole
    assert split_words("LISTEDSECURITY", frozenset(), english=True) == ["listedsecurity", "listed", "security"]
    assert split_words("LISTEDSECURITY", frozenset()) == ["listedsecurity"]
    glued = [
        "CREATE TABLE LISTEDSECURITY (LISTEDSECURITYID INTEGER PRIMARY KEY, HASLASTTRADEDVALUE INTEGER, "
        "HASTICKERSYMBOL TEXT)",
        "CREATE TABLE MONETARYAMOUNT (MONETARYAMOUNTID INTEGER PRIMARY KEY, HASAMOUNT REAL)",
    ]
    db_path = make_db(tmp_path / "fiben.db", 0, extra=[*WORD_TABLES, *glued])
    question = "Which stocks have a last traded value over 1500?"
    with ReadOnlyDatabase(db_path) as db:
        listing = SchemaView(db, question).listing()
        whole = SchemaView(db, question, ranking=Ranking(english=False)).listing()
    assert listing.shown[0] == "LISTEDSECURITY" and listing.ranking[0].via == "words"
    assert {t.name: t for t in whole.ranking}["LISTEDSECURITY"].score == 0.0  # unmatched without the split


def test_an_index_file_is_kept_per_option(tmp_path: Path) -> None:
    """The English split changes what the index holds: each setting has its own file."""
    from edge_sql.tools.schema_index import IndexOptions, index_path

    db_path = tmp_path / "one.db"
    sqlite3.connect(db_path).execute("CREATE TABLE t (a INTEGER)").connection.close()
    with ReadOnlyDatabase(db_path) as db:
        assert index_path(db) != index_path(db, IndexOptions(english=False))


def test_a_folded_line_counts_its_members_and_names_only_one_that_raised_it(tmp_path: Path) -> None:
    """Naming a member on every folded line cost a third of the share at 5,000 tables; a line
    names one only where that member matched the question better than the table itself."""
    copies = [
        f"CREATE TABLE customers_{2000 + i} (id INTEGER, name TEXT, email TEXT, archived_at TEXT)" for i in range(9)
    ]
    copies.append("CREATE TABLE customers_2024_vip (id INTEGER, name TEXT, email TEXT, vip_since TEXT)")
    extra = ["CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT, email TEXT)", *copies]
    db_path = make_db(tmp_path / "copies.db", 0, extra=[*WORD_TABLES, *extra])
    with ReadOnlyDatabase(db_path) as db:
        plain = SchemaView(db, "email of customers").listing()
        vip = SchemaView(db, "email of vip customers").listing()
        named = SchemaView(db, "email of customers", ranking=Ranking(counts_only=False)).listing()
    assert plain.text.splitlines()[0] == "customers (+10 copies)"
    assert vip.text.splitlines()[0] == "customers (+10 copies: customers_2024_vip, ...)"  # it raised the line
    assert "customers_2024_vip" in vip.named() and "customers_2024_vip" not in plain.named()
    assert named.text.splitlines()[0].startswith("customers (+10 copies: customers_20")  # as before


def test_a_wide_table_s_matched_repeats_give_way_to_its_own_columns() -> None:
    """ "cost" matches `cost` and its 100 repeats; `title`, which the question filters by value,
    is unmatched: it follows the best `FAMILY_SHOWN` repeats, not all of them."""
    repeats = [f"cost_{2000 + i // 4}_q{i % 4 + 1}" for i in range(100)]
    columns = ["id", *repeats[:50], "cost", "department", *repeats[50:], "title"]
    order = [columns[i] for i in rank_columns(columns, "total cost per department of the project Theseus")]
    assert set(order[:2]) == {"cost", "department"}
    assert all(name.startswith("cost_") for name in order[2 : 2 + FAMILY_SHOWN])
    assert order[2 + FAMILY_SHOWN : 4 + FAMILY_SHOWN] == ["id", "title"]  # the plain rest, before the other repeats
    before = [columns[i] for i in rank_columns(columns, "total cost per department", repeats_last=False)]
    assert before.index("title") > 100
    dated = [columns[i] for i in rank_columns(columns, "cost in 2019 per department")]
    assert all(name.startswith("cost_2019_q") for name in dated[1 : 1 + FAMILY_SHOWN])  # a year picks its repeats


def test_plain_columns_of_fewer_words_come_first() -> None:
    """A denormalised table carries other tables' columns under their table's name."""
    columns = ["projects_title_name", "id", "customers_city", "title", "acronym"]
    assert [columns[i] for i in rank_columns(columns, "Which one?")] == [
        "id",
        "title",
        "acronym",
        "customers_city",
        "projects_title_name",
    ]
    assert rank_columns(columns, "Which one?", short_first=False) == list(range(len(columns)))
