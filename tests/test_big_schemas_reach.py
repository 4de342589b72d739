"""Issue 62's third pass: a big schema's tables that a question never names are reached through
the ones it does (a column named as a table links to it; unmatched tables near the matched ones
fill the list before the rest), and a wide table's plain columns come before its numbered repeats.

Real SQLite files and the real index in the test's store."""

from __future__ import annotations

from pathlib import Path

from edge_sql.tools import ReadOnlyDatabase
from edge_sql.tools.schema_ranking import Ranking, rank_columns
from edge_sql.tools.schema_view import SchemaView
from test_big_schemas import WORD_TABLES, make_db

ADVISING = [  # a course catalogue with one foreign key declared; `semester` is named bare
    "CREATE TABLE course (course_id INTEGER PRIMARY KEY, title TEXT, department TEXT)",
    "CREATE TABLE offering (offering_id INTEGER PRIMARY KEY, crs INTEGER REFERENCES course (course_id), "
    "semester INTEGER, start_time TEXT)",
    "CREATE TABLE offering_instructor (offering_instructor_id INTEGER PRIMARY KEY, offering_id INTEGER, "
    "instructor_id INTEGER)",
    "CREATE TABLE instructor (instructor_id INTEGER PRIMARY KEY, surname TEXT, uniqname TEXT)",
    "CREATE TABLE semester (semester_id INTEGER PRIMARY KEY, term TEXT, year INTEGER)",
]
QUESTION = "Which courses does Prof. Delapa teach in the Fall?"


def test_a_table_three_links_away_and_one_named_by_a_bare_column_are_listed(tmp_path: Path) -> None:
    """ "courses" names only `course`. `instructor` is three links away (course -> offering
    -> offering_instructor -> instructor): beyond the neighbours, so without `reach` it sits in
    schema order after 600 other tables. `semester` is joined by `offering.semester`,
    which no rule linked before `table_columns`."""
    db_path = make_db(tmp_path / "advising.db", 0, extra=[*WORD_TABLES, *ADVISING])  # 605 names: no look-alikes
    with ReadOnlyDatabase(db_path) as db:
        listing = SchemaView(db, QUESTION).listing()
        without_reach = SchemaView(db, QUESTION, ranking=Ranking(reach=False)).listing().shown
        without_bare_column = SchemaView(db, QUESTION, ranking=Ranking(table_columns=False)).listing()
    ranked = {t.name: t for t in listing.ranking}
    assert listing.shown[0] == "course"
    assert {"offering", "offering_instructor", "instructor", "semester"} <= set(listing.shown)
    assert ranked["offering"].via == ranked["semester"].via == "link"  # one and two links from `course`
    assert ranked["instructor"].via == "near" and ranked["instructor"].score == 0.0  # three links: near, unscored
    assert "instructor" not in without_reach and "semester" in without_reach
    assert "semester" not in without_bare_column.shown
    assert {t.name: t for t in without_bare_column.ranking}["instructor"].via == "near"
    assert f"({605 - len(listing.shown):,} of 605 tables not listed" in listing.text  # never a silent cut


def test_with_nothing_matched_the_list_keeps_the_schema_order(tmp_path: Path) -> None:
    """No matched table, nothing to be near: the ranked list is the schema's order, as before."""
    db_path = make_db(tmp_path / "advising.db", 0, extra=[*WORD_TABLES, *ADVISING])
    with ReadOnlyDatabase(db_path) as db:
        shown = SchemaView(db, "Is it hard?").listing().shown
        assert shown == SchemaView(db, "Is it hard?", ranking=Ranking(reach=False)).listing().shown
        assert shown[:3] == db.table_names()[:3]


def test_a_wide_table_s_plain_columns_come_before_its_numbered_repeats() -> None:
    columns = [f"amount_{2000 + i}_q{q}" for i in range(25) for q in range(1, 5)] + ["department", "title"]
    columns = columns[:50] + ["course_id"] + columns[50:]
    order = rank_columns(columns, "Which ones are hard?", short_first=False)  # the fourth pass's word count aside
    assert [columns[i] for i in order[:3]] == ["course_id", "department", "title"]  # plain, in table order
    assert order[3:] == [i for i in range(len(columns)) if columns[i][-1].isdigit()]  # then the repeats, in order
    assert rank_columns(columns, "Which ones are hard?", plain_first=False, short_first=False) == list(
        range(len(columns))
    )
    matched = rank_columns(columns, "the amount in 2003")
    assert columns[matched[0]].startswith("amount_2003")  # a matched repeat still ranks by its words first
