"""Issue 62's fifth pass: a folded line of few members names the member the question matched
(a count alone hid `ACADEMIC_TERMS_ALL` behind `ACADEMIC_TERMS (+1 copy)`), and a wide table's
column is a repeat only as one of a family (`access_ip_v4` is a plain name).

Real SQLite files and the real index in the test's store."""

from __future__ import annotations

from pathlib import Path

from edge_sql.tools import ReadOnlyDatabase
from edge_sql.tools.schema_ranking import REPEATS, Ranking, rank_columns
from edge_sql.tools.schema_view import FEW_MEMBERS, SchemaView
from test_big_schemas import WORD_TABLES, make_db

TERMS = [  # a data warehouse's table and its copy with every term, both matched by the question
    "CREATE TABLE academic_terms (term_code TEXT PRIMARY KEY, term_description TEXT, is_current_term TEXT)",
    "CREATE TABLE academic_terms_all (term_code TEXT PRIMARY KEY, term_description TEXT, is_current_term TEXT)",
]
QUESTION = "For each term, list the term code, the term description, whether the term is current or not"


def test_a_line_of_few_members_names_the_one_the_question_matched(tmp_path: Path) -> None:
    db_path = make_db(tmp_path / "terms.db", 0, extra=[*WORD_TABLES, *TERMS])
    with ReadOnlyDatabase(db_path) as db:
        listing = SchemaView(db, QUESTION).listing()
        counted = SchemaView(db, QUESTION, ranking=Ranking(few_named=False)).listing()
    assert listing.text.splitlines()[0] == "academic_terms (+1 copy: academic_terms_all)"
    assert "academic_terms_all" in listing.named()
    assert counted.text.splitlines()[0] == "academic_terms (+1 copy)"  # the fourth pass: a count only
    assert "academic_terms_all" not in counted.named()


def test_a_line_of_many_members_still_only_counts_them(tmp_path: Path) -> None:
    """Past `FEW_MEMBERS`, a matched member is named only where it raised the line (the fourth
    pass): naming every line's members cost a third of the share at 5,000 tables."""
    copies = [
        f"CREATE TABLE academic_terms_{2000 + i} (term_code TEXT, term_description TEXT, is_current_term TEXT)"
        for i in range(FEW_MEMBERS)
    ]
    db_path = make_db(tmp_path / "many.db", 0, extra=[*WORD_TABLES, *TERMS, *copies])
    with ReadOnlyDatabase(db_path) as db:
        listing = SchemaView(db, QUESTION).listing()
    assert listing.text.splitlines()[0] == f"academic_terms (+{FEW_MEMBERS + 1} copies)"


def test_a_numbered_name_is_a_repeat_only_in_a_family() -> None:
    """`access_ip_v4` and `access_ip_v6` are two of the table's own names (a family of two): they
    keep their place among the plain columns; `reading_avg_0` ... are `REPEATS` or more alike."""
    repeats = [f"reading_avg_{i}" for i in range(REPEATS)]
    columns = ["id", "access_ip_v4", *repeats, "access_ip_v6", "name", "hostname"]
    order = [columns[i] for i in rank_columns(columns, "Which one?")]
    assert order == ["id", "name", "hostname", "access_ip_v4", "access_ip_v6", *repeats]
    before = [columns[i] for i in rank_columns(columns, "Which one?", families=False)]
    assert before == ["id", "name", "hostname", *repeats, "access_ip_v4", "access_ip_v6"]
    two = ["id", "reading_avg_1", "reading_avg_2", "name"]  # too few alike to be repeats: plain, by words
    assert [two[i] for i in rank_columns(two, "Which one?")] == ["id", "name", "reading_avg_1", "reading_avg_2"]
