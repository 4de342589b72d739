"""What `list_tables` and `describe_table` show when the schema is too big for the episode.

While the whole list fits its share of the episode it is shown exactly as the model was
trained on it (one name per line). When it does not fit: the tables most related to the
question first, up to the share, look-alike tables (same columns, names differing only in
numbers) folded into one line and a table's copies (`Team_2019`, `Team_archive`) into its own,
then one line saying how many were not listed and that
`describe_table` accepts any name. A table too wide for its share shows its most related
columns first and a line saying how to see the rest. Never a silent cut.
"""

from __future__ import annotations

import re
import sqlite3
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edge_sql.tools.database import ReadOnlyDatabase, opened
from edge_sql.tools.identifiers import display_identifier
from edge_sql.tools.schema_index import SchemaIndexError, index_for
from edge_sql.tools.schema_ranking import (
    ALL_PARTS,
    RankedTable,
    Ranking,
    alike_key,
    closest_tables,
    rank_columns,
    rank_tables,
)

# The shares of the 12,288-token episode, in tokens as `estimated_tokens` counts them: never
# under the Qwen3.5 tokenizer's count (every digit is a token there, so `frpm_2019_52` is 11
# tokens for 12 characters; measured 1.0 to 1.5 times the real count on numbered table and column
# lists, 2.4 times on the word-like names of the published SQaLe training schemas).
# A whole list estimated at up to WHOLE_LIST_TOKENS is shown as trained: the published training
# episodes list 106, 225 and 239 tables (239: 1,100 real tokens, estimated 2,623), so the share
# holds every schema the model was seen exploring, with room; tests/test_protocol_conformance.py
# replays them. A longer list is ranked into LIST_SHARE_TOKENS (so under 1,500 real tokens, about
# 1,000 typically: 8-12% of the episode; benchmarks/results/schemas/ has recall at other shares),
# leaving the rest of the episode for exploring. describe_table's share is 2,500: BIRD's widest
# table, european_football_2's Match (115 columns, 1,264 real tokens, estimated 2,130), is shown
# as trained.
WHOLE_LIST_TOKENS = 3500
LIST_SHARE_TOKENS = 1500
DESCRIBE_SHARE_TOKENS = 2500
_LETTERS = re.compile(r"[^\W\d_]+")
MIN_ALIKE = 3  # fewer look-alikes than this are listed one by one


@dataclass
class TableListing:
    """What `list_tables` shows for a question, and why (for `edge-sql tables --json`)."""

    text: str
    total: int
    ranked: bool  # False: the whole list fitted (the trained form) or the ranking was unavailable
    shown: list[str] = field(default_factory=list)  # names on the lines shown, in order
    folded: dict[str, list[str]] = field(default_factory=dict)  # a shown name -> its look-alikes
    ranking: list[RankedTable] = field(default_factory=list)
    problem: str | None = None  # why the ranking was unavailable

    def to_json(self) -> dict[str, Any]:
        scores = [
            {"name": t.name, "score": round(t.score, 4), "via": t.via, "shown": t.name in self._covered()}
            for t in self.ranking
        ]
        return {
            "text": self.text,
            "total_tables": self.total,
            "ranked": self.ranked,
            "shown": self.shown,
            "folded": self.folded,
            "ranking": scores,
            "problem": self.problem,
        }

    def _covered(self) -> set[str]:
        return set(self.shown) | {n for names in self.folded.values() for n in names}


def estimated_tokens(text: str) -> int:
    """At least the Qwen3.5 tokenizer's count, without the tokenizer: a token per digit and per
    punctuation mark, and one per three letters of each run of letters."""
    digits_and_marks = sum(1 for ch in text if ch.isdigit() or not (ch.isalnum() or ch == " "))
    return digits_and_marks + sum(-(-len(run) // 3) for run in _LETTERS.findall(text))


def _within(text: str, share: int) -> bool:
    """`estimated_tokens(text) <= share`, without counting a text far over it (5,000 names)."""
    if len(text) <= share:  # every character is at most one estimated token
        return True
    if len(text) - text.count(" ") > 4 * share:  # and every four are at least one
        return False
    return estimated_tokens(text) <= share


def trained_lines(db: ReadOnlyDatabase) -> list[str]:
    """The list as the model was trained on it: tables, then views marked `(view)`."""
    return db.table_names() + [f"{name} (view)" for name in db.view_names()]


def _line(table: RankedTable) -> str:
    return table.name + (" (view)" if table.kind == "view" else "")


class SchemaView:
    """`list_tables` and `describe_table` text for one question over one database; the index
    is opened on first need (never for a schema that fits)."""

    def __init__(self, db: ReadOnlyDatabase, question: str, *, ranking: Ranking = ALL_PARTS) -> None:
        self.db, self.question, self.ranking = db, question, ranking
        self._listing: TableListing | None = None
        self._index: sqlite3.Connection | None = None
        self._index_problem: str | None = None

    def listing(self) -> TableListing:
        if self._listing is None:
            self._listing = self._make_listing()
        return self._listing

    def _make_listing(self) -> TableListing:
        lines = trained_lines(self.db)
        whole = "\n".join(lines)
        if _within(whole, WHOLE_LIST_TOKENS):
            return TableListing(whole, len(lines), ranked=False, shown=lines)
        index = self._open_index()
        if index is None:
            return self._plain_cut(lines)
        ranked = rank_tables(index, self.question, self.ranking)
        return _ranked_listing(ranked, len(lines), fold=self.ranking.fold)

    def _plain_cut(self, lines: list[str]) -> TableListing:
        """The list in schema order up to the share, with the note: the ranking is unavailable."""
        total = len(lines)
        shown = _fill(lines, LIST_SHARE_TOKENS - estimated_tokens(_note(total, total, ranked=False)) - 1)
        text = "\n".join([*shown, _note(total - len(shown), total, ranked=False)])
        return TableListing(text, len(lines), ranked=False, shown=shown, problem=self._index_problem)

    def _open_index(self) -> sqlite3.Connection | None:
        """The schema index, built on first use; None (and one line on stderr) when it cannot
        be built or read: the caller lists tables in schema order."""
        if self._index is None and self._index_problem is None:
            try:
                self._index = index_for(self.db, stem=self.ranking.stem)
            except SchemaIndexError as exc:
                self._index_problem = str(exc)
                print(f"edge-sql: {exc}; listing tables in schema order", file=sys.stderr)
        return self._index

    def describe(self, table: str, ddl: str) -> str:
        """`ddl` (the trained one-line CREATE) when it fits its share; else the columns most
        related to the question first, up to the share, and a line on how to see the rest."""
        if _within(ddl, DESCRIBE_SHARE_TOKENS):
            return ddl
        stored = self.db.resolve_table(table)
        info = self.db.table_info(stored)  # (cid, name, type, notnull, default, pk)
        names = [row[1] for row in info]
        keys = [i for i, row in enumerate(info) if row[5]]
        order = keys + [i for i in rank_columns(names, self.question) if i not in keys]
        shown_name = display_identifier(stored)
        pragma = "'" + stored.replace("'", "''") + "'"
        note = (
            f"-- {{left:,}} of {len(names):,} columns not shown (shown: the key and the columns most related "
            f"to the question). See one with distinct_values or run_query: SELECT column FROM {shown_name} "
            f"LIMIT 5; list them all with run_query: SELECT name, type FROM pragma_table_info({pragma})"
        )
        head = f"CREATE TABLE {shown_name} ("
        parts = [_column_definition(info[i]) for i in order]
        room = DESCRIBE_SHARE_TOKENS - estimated_tokens(head + note) - 4
        kept = _fill(parts, room, separator=", ")
        return head + ", ".join(kept) + ")\n" + note.format(left=len(names) - len(kept))

    def suggestions(self, guessed: str) -> list[str]:
        """Existing tables closest to a name that does not exist; only for a schema too big to
        list (in one that fits, the model has seen every name and the error stays as trained)."""
        if not self.listing().ranked:
            return []
        index = self._open_index()
        return [] if index is None else closest_tables(index, guessed)

    def close(self) -> None:
        if self._index is not None:
            self._index.close()
            self._index = None


def _column_definition(row: tuple) -> str:
    _, name, kind, notnull, _, pk = row[:6]
    parts = [display_identifier(name)] + ([kind] if kind else [])
    parts += (["NOT NULL"] if notnull else []) + (["PRIMARY KEY"] if pk else [])
    return " ".join(parts)


def _fill(parts: list[str], room: int, *, separator: str = "\n") -> list[str]:
    """The leading parts whose joined text stays within `room` estimated tokens."""
    kept: list[str] = []
    used = 0
    for part in parts:
        cost = estimated_tokens(part) + (estimated_tokens(separator) if kept else 0)
        if used + cost > room:
            break
        kept.append(part)
        used += cost
    return kept


def _note(hidden: int, total: int, *, ranked: bool) -> str:
    order = "the tables most related to the question first" if ranked else "in schema order (no ranking)"
    return (
        f"({hidden:,} of {total:,} tables not listed; listed: {order}. "
        f"describe_table accepts any table name, listed or not.)"
    )


def _ranked_listing(ranked: list[RankedTable], total: int, *, fold: bool) -> TableListing:
    """Ranked lines up to the share: a table's copies folded into its line, and look-alikes
    (`fold`) into their best-ranked member's line."""
    roots = {t.copy_of.lower() for t in ranked if t.copy_of}

    def group_key(table: RankedTable) -> tuple[str, str]:
        if table.copy_of or table.name.lower() in roots:
            return (table.copy_of or table.name).lower(), "copies"
        return alike_key(table.name, table.signature) if fold else (table.name, "")

    groups: dict[tuple[str, str], list[RankedTable]] = {}
    for table in ranked:
        groups.setdefault(group_key(table), []).append(table)
    room = LIST_SHARE_TOKENS - estimated_tokens(_note(total, total, ranked=True)) - 1
    lines: list[str] = []
    shown: list[str] = []
    folded: dict[str, list[str]] = {}
    used = covered = 0
    done: set[tuple[str, str]] = set()
    for table in ranked:
        key = group_key(table)
        if key in done:
            continue
        members, kind = groups[key], "alike, same columns"
        if key[1] == "copies":
            table, kind = next(m for m in members if m.name.lower() == key[0]), "copies"
        elif len(members) < MIN_ALIKE:
            members = [table]
        line = _line(table)
        others = sorted((m.name for m in members if m is not table), key=_natural)
        if others:
            named = ", ".join(others) if len(others) <= 2 else f"{others[0]} ... {others[-1]}"
            line += f" (+{len(others)} {kind}: {named})"
        cost = estimated_tokens(line) + (1 if lines else 0)
        if used + cost > room:
            break
        done.add(key)
        lines.append(line)
        shown.append(table.name)
        if others:
            folded[table.name] = others
        used += cost
        covered += len(members)
    text = "\n".join([*lines, _note(total - covered, total, ranked=True)])
    return TableListing(text, total, ranked=True, shown=shown, folded=folded, ranking=ranked)


def _natural(name: str) -> list[Any]:
    """`t_2` before `t_10`."""
    return [int(p) if p.isdigit() else p for p in re.split(r"([0-9]+)", name.lower())]


def list_tables_for(db: str | Path | ReadOnlyDatabase, question: str) -> TableListing:
    """Exactly what `list_tables` shows the model for `question` over `db` (`.text`), with the
    ranking's scores behind it: why a table was or was not shown. Opens a path read-only."""
    with opened(db) as database:
        view = SchemaView(database, question)
        try:
            return view.listing()
        finally:
            view.close()
