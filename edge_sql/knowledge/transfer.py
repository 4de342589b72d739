"""Moving a database's notes and verified answers between machines as one JSON file.

The file is validated whole before anything is stored, and stored in one transaction: a bad
file is one clear line and changes nothing. Every imported SQL is checked as `verify` checks it
(read-only, runs on this database), every note and hint against its bound.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edge_sql.agent.given import VerifiedAnswer
from edge_sql.errors import KnowledgeError
from edge_sql.knowledge import retrieval
from edge_sql.knowledge.evidence import check_item, example_hint
from edge_sql.knowledge.identity import normalise_question, tables_named
from edge_sql.knowledge.seen import Seen, check_read_only, now
from edge_sql.tools import ReadOnlyDatabase

if TYPE_CHECKING:  # the store hands itself in (Knowledge.export_json, .import_json)
    from edge_sql.knowledge.store import Knowledge

FORMAT = "edge-sql-knowledge"
VERSION = 1


def export_json(kb: Knowledge, db: ReadOnlyDatabase) -> dict[str, Any]:
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


def import_json(kb: Knowledge, db: ReadOnlyDatabase, data: Any) -> tuple[int, int]:
    """Store the notes and verified answers of an export in `db`'s knowledge (a note already there
    with the same text is not doubled; an answer replaces one to the same question). Returns
    (notes, answers) imported. KnowledgeError, with nothing stored, for a bad file."""
    notes, answers = _validated(kb, db, data)
    seen = Seen.of(db)
    schema = retrieval.schema_words(db)
    have = {(n.text, n.question) for n in kb.notes(db)}
    added = 0
    with kb.writing() as conn:
        conn.execute(
            "INSERT OR IGNORE INTO schemas (identity, tables) VALUES (?, ?)", (seen.identity, json.dumps(seen.tables))
        )
        for text, tie, created in notes:
            if (text, tie) in have:
                continue
            have.add((text, tie))
            conn.execute(
                "INSERT INTO notes (identity, path, text, question, tables, created) VALUES (?, ?, ?, ?, ?, ?)",
                (seen.identity, seen.path, text, tie, json.dumps(tables_named(text, seen.tables)), created),
            )
            added += 1
        for answer in answers:
            kb.store_answer(conn, seen, answer, schema)
    return added, len(answers)


def _validated(
    kb: Knowledge, db: ReadOnlyDatabase, data: Any
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


def _text(item: Any, key: str, where: str, *, optional: bool = False) -> Any:
    if not isinstance(item, dict):
        raise KnowledgeError(f"knowledge file: {where} must be an object")
    value = item.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise KnowledgeError(f'knowledge file: {where} needs "{key}" as text')
    return value


def read_file(path: Path) -> Any:
    """A knowledge file's JSON; KnowledgeError (one line) for a missing or unreadable file."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise KnowledgeError(f"knowledge file not found: {path}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise KnowledgeError(f"knowledge file {path} is not JSON: {exc}") from None
    except OSError as exc:
        raise KnowledgeError(f"cannot read knowledge file {path}: {exc.strerror}") from None
