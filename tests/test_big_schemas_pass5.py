"""Issue 62's fifth pass: a wide table's numbered column is a repeat only as one of a family or
numbered from 10 on (`access_ip_v4` and `sub_region_1` are plain names, `reading_avg_17` and
`cost_2019` repeats)."""

from __future__ import annotations

from edge_sql.tools.schema_ranking import REPEATS, rank_columns


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
    indexed = ["amount_archive_17", "id", "sub_region_1", "population_2019", "name"]  # from 10 on: repeats
    assert [indexed[i] for i in rank_columns(indexed, "Which one?")] == [
        "id",
        "name",
        "sub_region_1",
        "amount_archive_17",
        "population_2019",
    ]
