"""Moving a database's notes and verified answers between machines as one JSON file.

The file is validated whole before anything is stored, and stored in one transaction: a bad
file is one clear line and changes nothing. Every imported SQL is checked as `verify` checks it
(read-only, runs on this database), every note and hint against its bound.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edge_sql.agent.display import plural
from edge_sql.agent.given import VerifiedAnswer
from edge_sql.errors import KnowledgeError, VerifiedExists
from edge_sql.knowledge import changes, retrieval
from edge_sql.knowledge.changes import Stored
from edge_sql.knowledge.evidence import check_item, example_hint
from edge_sql.knowledge.holds import absent_values
from edge_sql.knowledge.identity import normalise_question, tables_named
from edge_sql.knowledge.seen import Seen, check_read_only, now
from edge_sql.tools import ReadOnlyDatabase

if TYPE_CHECKING:  # the store is handed in: transfer sits above store (store never imports it)
    from edge_sql.knowledge.store import Knowledge

FORMAT = "edge-sql-knowledge"
VERSION = 1


def export_json(kb: Knowledge, db: ReadOnlyDatabase) -> dict[str, Any]:  # Any: records
    """`db`'s notes and verified answers as one JSON-ready dict."""
    seen = Seen.of(db)
    return {
        "format": FORMAT,
        "version": VERSION,
        "database": Path(seen.path).name,
        "schema_identity": seen.identity,
        "notes": [{"text": n.text, "question": n.question, "created": n.created} for n in kb.notes(db)],
        "verified": [
            {"question": a.question, "evidence": a.evidence, "sql": a.sql, "verified_at": a.verified_at}
            | ({"follows": a.follows} if a.follows else {})
            for a in kb.verified(db)
        ],
    }


@dataclass(frozen=True)
class Imported:
    """What an import did: notes and verified answers added, skipped (already stored as they are:
    their ids kept) and replaced (`--replace`); `refused` lists the answers it would replace."""

    notes_added: int = 0
    notes_skipped: int = 0
    added: list[Stored] = field(default_factory=list)
    skipped: list[Stored] = field(default_factory=list)
    replaced: list[Stored] = field(default_factory=list)

    def line(self, source: str) -> str:
        """`imported from FILE: added 1 note and 2 verified answers; skipped ...; replaced v3 by v9`."""
        added = f"added {plural(self.notes_added, 'note')} and {plural(len(self.added), 'verified answer')}"
        skipped = self.notes_skipped + len(self.skipped)
        parts = [added, f"skipped {skipped} already stored" if skipped else ""]
        if self.replaced:
            pairs = ", ".join(f"v{a.replaced.id} by v{a.answer.id}" for a in self.replaced if a.replaced is not None)
            parts.append(f"replaced {pairs}")
        return f"imported from {source}: " + "; ".join(p for p in parts if p)

    def to_json(self) -> dict[str, object]:
        return {
            "notes_added": self.notes_added,
            "notes_skipped": self.notes_skipped,
            "added": [a.answer.id for a in self.added],
            "skipped": [a.answer.id for a in self.skipped],
            "replaced": [{"old": a.replaced.id, "new": a.answer.id} for a in self.replaced if a.replaced is not None],
        }


def import_json(
    kb: Knowledge,
    db: ReadOnlyDatabase,
    data: Any,  # Any: json.loads
    *,
    replace: bool = False,
) -> Imported:
    """Store the notes and verified answers of an export in `db`'s knowledge. A note already there
    with the same text and an answer already there with the same SQL are skipped (their ids kept),
    so importing a file twice adds nothing. An answer with other SQL for a question that has one
    is replaced with `replace`; without it the import is refused whole, saying which it would
    replace. KnowledgeError, with nothing stored, for a bad file or a refused import."""
    notes, answers = _validated(kb, db, data)
    seen = Seen.of(db)
    schema = retrieval.schema_words(db)
    have = {(n.text, n.question) for n in kb.notes(db)}
    absent = [absent_values(db, a.sql) for a in answers]
    notes_added = notes_skipped = 0
    done: dict[str, list[Stored]] = {"added": [], "unchanged": [], "replaced": []}
    conflicts: list[VerifiedExists] = []
    with kb.writing() as conn:
        conn.execute(
            "INSERT OR IGNORE INTO schemas (identity, tables) VALUES (?, ?)", (seen.identity, json.dumps(seen.tables))
        )
        for text, tie, created in notes:
            if (text, tie) in have:
                notes_skipped += 1
                continue
            have.add((text, tie))
            cursor = conn.execute(
                "INSERT INTO notes (identity, path, text, question, tables, created) VALUES (?, ?, ?, ?, ?, ?)",
                (seen.identity, seen.path, text, tie, json.dumps(tables_named(text, seen.tables)), created),
            )
            changes.record(conn, seen, "import", "added", "note", question=tie, new_id=cursor.lastrowid, new_text=text)
            notes_added += 1
        for answer, missing in zip(answers, absent):
            try:
                stored = kb.store_answer(conn, seen, answer, schema, replace=replace, surface="import", absent=missing)
            except VerifiedExists as exc:
                conflicts.append(exc)
                continue
            done[stored.action].append(stored)
        if conflicts:  # raised inside the transaction: nothing of this import is stored
            first = conflicts[0]
            raise KnowledgeError(
                f"refused: the file would replace {plural(len(conflicts), 'verified answer')} stored with other SQL "
                f'(v{first.answer_id} "{first.question}": {first.sql}'
                + (f", and {len(conflicts) - 1} more" if len(conflicts) > 1 else "")
                + "); nothing was imported: pass --replace to replace them"
            )
    return Imported(notes_added, notes_skipped, done["added"], done["unchanged"], done["replaced"])


def _validated(
    kb: Knowledge,
    db: ReadOnlyDatabase,
    data: Any,  # Any: json.loads
) -> tuple[list[tuple[str, str | None, str]], list[VerifiedAnswer]]:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise KnowledgeError(f'not an edge-sql knowledge file (no "format": "{FORMAT}")')
    if data.get("version") != VERSION:
        raise KnowledgeError(
            f"knowledge file version {data.get('version')!r} is not supported (this edge-sql reads {VERSION})"
        )
    notes_in, answers_in = data.get("notes", []), data.get("verified", [])
    if not isinstance(notes_in, list) or not isinstance(answers_in, list):
        raise KnowledgeError('knowledge file: "notes" and "verified" must be lists')
    notes = []
    for i, item in enumerate(notes_in, 1):
        text = _text(item, "text", f"note {i}")
        tie = _text(item, "question", f"note {i}", optional=True)
        if not text.strip():
            raise KnowledgeError(f"knowledge file: note {i} is empty")
        check_item(f"knowledge file: note {i}", text.strip(), kb.count_tokens)
        notes.append(
            (
                text.strip(),
                tie.strip() if tie and tie.strip() else None,
                _text(item, "created", f"note {i}", optional=True) or now(),
            )
        )
    answers = []
    for i, item in enumerate(answers_in, 1):
        where = f"verified answer {i}"
        question, sql = _text(item, "question", where), _text(item, "sql", where).strip()
        if not normalise_question(question):
            raise KnowledgeError(f"knowledge file: {where} has an empty question")
        try:
            check_read_only(db, sql)
        except KnowledgeError as exc:
            raise KnowledgeError(f"knowledge file: {where}: {exc}") from None
        answer = VerifiedAnswer(
            0,
            question.strip(),
            _text(item, "evidence", where, optional=True),
            sql,
            _text(item, "verified_at", where, optional=True) or now(),
            follows=_text(item, "follows", where, optional=True),
        )
        check_item(f"knowledge file: {where}", example_hint(answer), kb.count_tokens)
        answers.append(answer)
    return notes, answers


def _text(item: Any, key: str, where: str, *, optional: bool = False) -> Any:  # Any: json.loads
    if not isinstance(item, dict):
        raise KnowledgeError(f"knowledge file: {where} must be an object")
    value = item.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise KnowledgeError(f'knowledge file: {where} needs "{key}" as text')
    return value


def read_file(path: Path) -> Any:  # Any: json.loads
    """A knowledge file's JSON; KnowledgeError (one line) for a missing or unreadable file."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise KnowledgeError(f"knowledge file not found: {path}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise KnowledgeError(f"knowledge file {path} is not JSON: {exc}") from None
    except OSError as exc:
        raise KnowledgeError(f"cannot read knowledge file {path}: {exc.strerror}") from None
