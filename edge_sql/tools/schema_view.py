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
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edge_sql.tools.database import ReadOnlyDatabase, opened
from edge_sql.tools.identifiers import display_identifier
from edge_sql.tools.schema_index import GENERIC_KEYS, SchemaIndexError, index_for
from edge_sql.tools.schema_ranking import (
    ALL_PARTS,
    RankedTable,
    Ranking,
    alike_key,
    closest_tables,
    rank_columns,
    rank_tables,
)
from edge_sql.tools.schema_words import name_forms

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
NAMED_MEMBERS = 1  # a folded line raised by its members names the best-ranked of each kind
TokenCounter = Callable[[str], int]  # the model's own count of a text's tokens


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

    def to_json(self) -> dict[str, Any]:  # Any: JSON
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

    def named(self) -> list[str]:
        """Every table named in the text: the lines' tables and the members a folded line names."""
        words = set(re.findall(r"[^\s,();:]+", self.text)) if self.ranked else set()
        return self.shown + [n for head in self.shown for n in self.folded.get(head, []) if n in words]

    def _covered(self) -> set[str]:
        return set(self.shown) | {n for names in self.folded.values() for n in names}


def estimated_tokens(text: str) -> int:
    """At least the Qwen3.5 tokenizer's count, without the tokenizer: a token per digit and per
    punctuation mark, and one per three letters of each run of letters."""
    digits_and_marks = sum(1 for ch in text if ch.isdigit() or not (ch.isalnum() or ch == " "))
    return digits_and_marks + sum(-(-len(run) // 3) for run in _LETTERS.findall(text))


def _within(text: str, share: int, count: TokenCounter | None = None) -> bool:
    """`estimated_tokens(text) <= share`, or the model's own count (`count`) within it too;
    without counting a text far over it (5,000 names)."""
    if len(text) <= share:  # every character is at most one estimated token
        return True
    if len(text) - text.count(" ") <= 4 * share and estimated_tokens(text) <= share:  # every four are at least one
        return True
    return count is not None and len(text) <= LONGEST_TOKEN_CHARS * share and count(text) <= share


LONGEST_TOKEN_CHARS = 8  # a text longer than this many characters a token of its share is not counted


def trained_lines(db: ReadOnlyDatabase) -> list[str]:
    """The list as the model was trained on it: tables, then views marked `(view)`."""
    return db.table_names() + [f"{name} (view)" for name in db.view_names()]


def _line(table: RankedTable) -> str:
    return table.name + (" (view)" if table.kind == "view" else "")


class SchemaView:
    """`list_tables` and `describe_table` text for one question over one database; the index
    is opened on first need (never for a schema that fits)."""

    def __init__(
        self,
        db: ReadOnlyDatabase,
        question: str,
        *,
        ranking: Ranking = ALL_PARTS,
        count_tokens: TokenCounter | None = None,
    ) -> None:
        self.db, self.question, self.ranking = db, question, ranking
        # the model's own count where the caller has the model (the agent), else the estimate
        self.count: TokenCounter | None = _memoized(count_tokens) if count_tokens and ranking.real_tokens else None
        self._listing: TableListing | None = None
        self.described: dict[str, list[str]] = {}  # a too-wide table -> the columns describe showed
        self._index: sqlite3.Connection | None = None
        self._index_problem: str | None = None

    def listing(self) -> TableListing:
        if self._listing is None:
            self._listing = self._make_listing()
        return self._listing

    def _make_listing(self) -> TableListing:
        lines = trained_lines(self.db)
        whole = "\n".join(lines)
        if _within(whole, WHOLE_LIST_TOKENS, self.count):
            return TableListing(whole, len(lines), ranked=False, shown=lines)
        index = self._open_index()
        if index is None:
            return self._plain_cut(lines)
        ranked = rank_tables(index, self.question, self.ranking)
        schema = index.execute("PRAGMA database_list").fetchone()[2]
        return _ranked_listing(ranked, len(lines), self.ranking, self.count or estimated_tokens, schema)

    def _plain_cut(self, lines: list[str]) -> TableListing:
        """The list in schema order up to the share, with the note: the ranking is unavailable."""
        total = len(lines)
        count = self.count or estimated_tokens
        shown = _fill(lines, LIST_SHARE_TOKENS - count(_note(total, total, ranked=False)) - 1, count)
        text = "\n".join([*shown, _note(total - len(shown), total, ranked=False)])
        return TableListing(text, len(lines), ranked=False, shown=shown, problem=self._index_problem)

    def _open_index(self) -> sqlite3.Connection | None:
        """The schema index, built on first use; None (and one line on stderr) when it cannot
        be built or read: the caller lists tables in schema order."""
        if self._index is None and self._index_problem is None:
            try:
                self._index = index_for(self.db, self.ranking.index_options())
            except SchemaIndexError as exc:
                self._index_problem = str(exc)
                print(f"edge-sql: {exc}; listing tables in schema order", file=sys.stderr)
        return self._index

    def describe(self, table: str, ddl: str) -> str:
        """`ddl` (the trained one-line CREATE) when it fits its share; else the columns most
        related to the question first, up to the share, and a line on how to see the rest."""
        if _within(ddl, DESCRIBE_SHARE_TOKENS, self.count):
            return ddl
        stored = self.db.resolve_table(table)
        info = self.db.table_info(stored)  # (cid, name, type, notnull, default, pk)
        names = [row[1] for row in info]
        joins = {c.lower() for fk in self.db.table_foreign_keys(stored) for c in fk.from_columns} | self._other_keys(
            stored
        )
        declared = [i for i, row in enumerate(info) if row[5]]
        keys = (declared or named_key(stored, names)) + [i for i, n in enumerate(names) if n.lower() in joins]
        keys = list(dict.fromkeys(keys))  # the key, then the columns that join (foreign keys, other tables' keys)
        order = keys + [i for i in rank_columns(names, self.question) if i not in keys]
        shown_name = display_identifier(stored)
        pragma = "'" + stored.replace("'", "''") + "'"
        note = (
            f"-- {{left:,}} of {len(names):,} columns not shown (shown: the key, the foreign keys and the columns "
            f"most related to the question). See one with distinct_values or run_query: SELECT column FROM {shown_name} "
            f"LIMIT 5; list them all with run_query: SELECT name, type FROM pragma_table_info({pragma})"
        )
        head = f"CREATE TABLE {shown_name} ("
        parts = [_column_definition(info[i]) for i in order]
        count = self.count or estimated_tokens
        room = DESCRIBE_SHARE_TOKENS - count(head + note) - 4
        kept = _fill(parts, room, count, separator=", ")
        self.described[table] = [names[i] for i in order[: len(kept)]]
        return head + ", ".join(kept) + ")\n" + note.format(left=len(names) - len(kept))

    def _other_keys(self, table: str) -> set[str]:
        """Other tables' one-column primary keys that are not generic (`CustomerID`, not `id`):
        a column of that name joins, declared or not."""
        rows = self.db.execute(
            "SELECT m.name, p.name FROM sqlite_master AS m JOIN pragma_table_info(m.name) AS p "
            "WHERE m.type = 'table' AND p.pk > 0",
            max_rows=None,
        ).rows
        per_table: dict[str, list[str]] = {}
        for owner, column in rows:
            per_table.setdefault(owner, []).append(column)
        single = [cols[0].lower() for owner, cols in per_table.items() if len(cols) == 1 and owner != table]
        return {c for c in single if c not in GENERIC_KEYS}

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


def named_key(table: str, names: list[str]) -> list[int]:
    """The columns named as the table's key where it declares none: `id`, `{table}_id`,
    `{table}id` (`users.Id`, `deathrecords.Id`). Warehouse schemas (BigQuery, Snowflake) declare
    no keys; a wide one's `Id` was listed among thousands of unmatched columns and cut."""
    forms = {"id"} | {f"{t}{sep}id" for t in name_forms(table) for sep in ("", "_")}
    return [i for i, name in enumerate(names) if name.lower() in forms]


_MEMO: weakref.WeakKeyDictionary[Any, dict[tuple[Any, str], int]] = weakref.WeakKeyDictionary()  # Any: callable
MEMO_TEXTS = 100_000  # counts kept per counter: a schema's lines recur from question to question


def _memoized(count: TokenCounter) -> TokenCounter:
    """`count`, remembered per text for as long as its owner (the session, or the function) lives."""
    owner = getattr(count, "__self__", count)
    try:
        memo = _MEMO.setdefault(owner, {})
    except TypeError:  # an owner that cannot be weakly referenced: counted every time
        return count
    method = getattr(count, "__func__", None)

    def counted(text: str) -> int:
        found = memo.get((method, text))
        if found is None:
            if len(memo) >= MEMO_TEXTS:
                memo.clear()
            found = memo[(method, text)] = count(text)
        return found

    return counted


def _column_definition(row: tuple) -> str:
    _, name, kind, notnull, _, pk = row[:6]
    parts = [display_identifier(name)] + ([kind] if kind else [])
    parts += (["NOT NULL"] if notnull else []) + (["PRIMARY KEY"] if pk else [])
    return " ".join(parts)


def _fill(parts: list[str], room: int, count: TokenCounter, *, separator: str = "\n") -> list[str]:
    """The leading parts whose joined text stays within `room` tokens (each part counted alone,
    and the separator: never under the joined text's count, whose words split at the same places)."""
    kept: list[str] = []
    used = 0
    gap = count(separator)
    for part in parts:
        cost = count(part) + (gap if kept else 0)
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


def _ranked_listing(
    ranked: list[RankedTable], total: int, ranking: Ranking, count: TokenCounter, schema: str
) -> TableListing:
    """Ranked lines up to the share: a table's copies folded into its line, and look-alikes
    (`fold`: names differing only in their numbers) into their best-ranked member's line; a
    folded line names the member that raised it, if one did (`_members`)."""
    key_of, groups = _groups(ranked, ranking, schema)
    position = {t.name: i for i, t in enumerate(ranked)}
    room = LIST_SHARE_TOKENS - count(_note(total, total, ranked=True)) - 1
    lines: list[str] = []
    shown: list[str] = []
    folded: dict[str, list[str]] = {}
    used = covered = 0
    gap = count("\n")
    done: set[tuple[str, str]] = set()
    for table in ranked:
        key = key_of[table.name]
        if key[1] != "copies" and len(groups[key]) < MIN_ALIKE:
            key = (table.name, "alone")  # too few look-alikes to fold: each on its own line
        if key in done:
            continue
        members = [table]
        if key[1] != "alone":
            members = sorted((ranked[position[n]] for n in groups[key]), key=lambda m: position[m.name])
        if key[1] == "copies":
            table = next((m for m in members if m.name.lower() == key[0]), table)
        others = [m for m in members if m is not table]  # in ranked order, the best first
        line = _line(table) + (f" ({_members(others, key, members, table, ranking)})" if others else "")
        cost = count(line) + (gap if lines else 0)
        if used + cost > room:
            break
        done.add(key)
        lines.append(line)
        shown.append(table.name)
        if others:
            folded[table.name] = [m.name for m in others]
        used += cost
        covered += len(members)
    text = "\n".join([*lines, _note(total - covered, total, ranked=True)])
    return TableListing(text, total, ranked=True, shown=shown, folded=folded, ranking=ranked)


_GROUPS: dict[tuple, tuple[dict[str, tuple[str, str]], dict[tuple[str, str], list[str]]]] = {}


def _groups(
    ranked: list[RankedTable], ranking: Ranking, schema: str
) -> tuple[dict[str, tuple[str, str]], dict[tuple[str, str], list[str]]]:
    """Each table's line key (a table's copies share its key; look-alikes, `fold`: their names
    with numbers masked, and with `same_shape` off their columns too) and each key's tables;
    the same for every question on a schema (`schema`: its index file), so kept for the last few."""
    cache_key = (schema, ranking.fold, ranking.same_shape, ranking.copies)
    if schema and cache_key in _GROUPS:
        return _GROUPS[cache_key]
    roots = {(t.copy_of or t.look_alike_of).lower() for t in ranked if t.copy_of or t.look_alike_of}
    key_of: dict[str, tuple[str, str]] = {}
    groups: dict[tuple[str, str], list[str]] = {}
    for table in ranked:
        root = table.copy_of or table.look_alike_of
        if root or table.name.lower() in roots:
            key = (root or table.name).lower(), "copies"
        elif not ranking.fold:
            key = table.name, ""
        else:
            key = alike_key(table.name, "" if ranking.same_shape else table.signature)
        key_of[table.name] = key
        groups.setdefault(key, []).append(table.name)
    while len(_GROUPS) >= 8:
        _GROUPS.pop(next(iter(_GROUPS)))
    _GROUPS[cache_key] = key_of, groups
    return key_of, groups


def _members(
    others: list[RankedTable], key: tuple[str, str], members: list[RankedTable], table: RankedTable, ranking: Ranking
) -> str:
    """`+3 copies; +20 look-alikes (other columns)`: how many of each kind (copies have the
    table's columns, or nearly; look-alikes other ones). Where the line ranks where it does
    because a member matched the question better than the table (`via` "copy"), that member
    is named, the best-ranked of each kind: `hr_employees (+1 copy; +20 look-alikes (other
    columns): hr_employees_2023_q1, ...)`. Naming every line's members cost a third of the share
    at 5,000 tables (heldout3: 75.7% of questions had every gold table listed, 83.2% without);
    with `counts_only` off, every line names its best-ranked members, as before."""
    if not ranking.counts_only:
        matched = {m.name for m in others}
    else:
        matched = {m.name for m in others if m.via == "words"} if table.via == "copy" else set()
    if key[1] == "copies":
        copies = [m.name for m in others if not m.look_alike_of]
        variants = [m.name for m in others if m.look_alike_of]
        parts = [
            _named(copies, matched, "copy", "copies"),
            _named(variants, matched, "look-alike", "look-alikes", " (other columns)"),
        ]
        return "; ".join(part for part, names in zip(parts, (copies, variants), strict=True) if names)
    names = [m.name for m in others]
    if len({m.signature for m in members}) == 1:
        return _named(names, matched, "alike, same columns", "alike, same columns")
    return _named(names, matched, "look-alike", "look-alikes", " (other columns)")


def _named(names: list[str], matched: set[str], one: str, many: str, note: str = "") -> str:
    """`+N copies`, and the first `NAMED_MEMBERS` of `names` that are in `matched`."""
    named = [n for n in names if n in matched][:NAMED_MEMBERS]
    head = f"+{len(names)} {one if len(names) == 1 else many}{note}"
    return head + (": " + ", ".join(named) + (", ..." if len(names) > len(named) else "") if named else "")


def list_tables_for(
    db: str | Path | ReadOnlyDatabase, question: str, *, count_tokens: TokenCounter | None = None
) -> TableListing:
    """Exactly what `list_tables` shows the model for `question` over `db` (`.text`), with the
    ranking's scores behind it: why a table was or was not shown. Opens a path read-only.
    `count_tokens`: the model's own count, as the agent passes it (default: the estimate)."""
    with opened(db) as database:
        view = SchemaView(database, question, count_tokens=count_tokens)
        try:
            return view.listing()
        finally:
            view.close()
