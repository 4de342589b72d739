"""`edge-sql notes`: what edge-sql knows about a database (notes and verified answers), kept in
the model store's knowledge database, never in the database itself."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from edge_sql.commands.files import DB_HELP, load_for_db
from edge_sql.commands.options import db_option
from edge_sql.errors import EdgeSqlError

if TYPE_CHECKING:
    from edge_sql.knowledge import Knowledge
    from edge_sql.tools import ReadOnlyDatabase

_DB = db_option("The database: " + DB_HELP + ".")


@contextmanager
def _opened(db_path: Path) -> Iterator[tuple[Knowledge, ReadOnlyDatabase]]:
    """The knowledge database and `db_path` opened read-only (bounds counted in UTF-8 bytes: no
    model is loaded here, and bytes are an upper bound on its tokens)."""
    from edge_sql.knowledge import Knowledge
    from edge_sql.tools import ReadOnlyDatabase

    with ReadOnlyDatabase(load_for_db(db_path)) as db, Knowledge.open() as kb:
        change = kb.schema_change(db)
        if change is not None:
            click.echo(f"note: {change}", err=True)
        yield kb, db


@click.group()
def command() -> None:
    """Teach edge-sql your database: notes and verified answers (docs/knowledge.md).

    Notes go into the evidence of every question (or, with --question, of questions that
    have those words); verified answers are reused at once for the same question and given
    as examples to similar ones. They are kept in the model store, keyed by a hash of the
    database's schema (a copy of the file finds them), never in or beside the database.

    \b
    Examples:
      edge-sql notes add --db app.db "amounts are in cents"
      edge-sql notes add --db app.db --question revenue "revenue is SUM(orders.amount)"
      edge-sql notes verify --db app.db "How many users?" "SELECT COUNT(*) FROM users"
      edge-sql notes list --db app.db
      edge-sql notes remove --db app.db 3
      edge-sql notes history --db app.db
      edge-sql notes undo --db app.db 5
      edge-sql notes export --db app.db app-notes.json
      edge-sql notes import --db app.db app-notes.json
    """


@command.command("add")
@_DB
@click.option(
    "--question", default=None, metavar="WORDS", help="Give the note only with questions that have these words."
)
@click.argument("text")
def add(db_path: Path, question: str | None, text: str) -> None:
    """Add a note (one line the model reads with the question, e.g. 'amounts are in cents')."""
    with _opened(db_path) as (kb, db):
        note = kb.add_note(db, text, question=question, surface="command line")
    click.echo(f"added note {note.id}" + (f" (with questions about: {note.question})" if note.question else ""))


@command.command("verify")
@_DB
@click.option("--evidence", default=None, help="The evidence the question was asked with.")
@click.option(
    "--replace",
    is_flag=True,
    help="Replace the question's verified answer if it has one with other SQL (kept in `notes history`).",
)
@click.argument("question")
@click.argument("sql")
def verify(db_path: Path, evidence: str | None, replace: bool, question: str, sql: str) -> None:
    """Store SQL you confirmed as the answer to QUESTION (it must read only, and run). A question
    that has a verified answer with other SQL is refused, naming it, unless --replace."""
    from edge_sql.errors import VerifiedExists

    with _opened(db_path) as (kb, db):
        try:
            answer = kb.keep(db, question, sql, evidence=evidence, replace=replace, surface="command line")
        except VerifiedExists as exc:
            raise exc.hinted("pass --replace to replace it (`notes history` keeps the old one)") from None
    click.echo(answer.said())


@command.command("list")
@_DB
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (the export's form, with ids).")
def list_(db_path: Path, as_json: bool) -> None:
    """List the notes (N) and verified answers (vN) of a database; stale ones are marked."""
    with _opened(db_path) as (kb, db):
        notes, answers = kb.notes(db), kb.verified(db)
    if as_json:
        data = {"notes": [n.to_json() for n in notes], "verified": [a.to_json() for a in answers]}
        click.echo(json.dumps(data, ensure_ascii=False, indent=2))
        return
    if not notes and not answers:
        click.echo(f"no notes or verified answers for {db_path.name} (add one: edge-sql notes add --db ... TEXT)")
    for note in notes:
        tie = f" [with: {note.question}]" if note.question else ""
        stale = f"  (stale: {note.stale})" if note.stale else ""
        click.echo(f"{note.id:>4}  {note.text}{tie}{stale}")
    for answer in answers:
        stale = f"  (stale: {answer.stale})" if answer.stale else ""
        click.echo(f"{'v' + str(answer.id):>4}  {answer.question} -> {answer.sql}  ({answer.verified_at[:10]}){stale}")


@command.command("remove")
@_DB
@click.argument("note_id", metavar="ID")
def remove(db_path: Path, note_id: str) -> None:
    """Remove note ID, or verified answer vID (`notes list` shows both)."""
    answer = note_id.lower().startswith("v")
    digits = note_id[1:] if answer else note_id
    if not digits.isdigit():
        raise click.BadParameter(f"{note_id!r} is not a note id (N) or a verified answer's (vN)", param_hint="ID")
    with _opened(db_path) as (kb, db):
        if answer:
            kb.forget(db, int(digits), surface="command line")
        else:
            kb.remove_note(db, int(digits), surface="command line")
    click.echo(f"removed {'verified answer' if answer else 'note'} {note_id} (`notes undo` brings it back)")


@command.command("history")
@_DB
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: the changes, oldest first.")
def history(db_path: Path, as_json: bool) -> None:
    """What teaching changed, oldest first: each note and verified answer added, replaced or
    removed (when, from which surface, the old and the new SQL or text). `notes undo N` undoes #N."""
    with _opened(db_path) as (kb, db):
        changes = kb.history(db)
    if as_json:
        click.echo(json.dumps({"changes": [c.to_json() for c in changes]}, ensure_ascii=False, indent=2))
        return
    if not changes:
        click.echo(f"no changes to the notes or verified answers of {db_path.name} yet")
    for change in changes:
        click.echo(change.line())


@command.command("undo")
@_DB
@click.argument("change_id", metavar="N", type=click.IntRange(min=1))
def undo(db_path: Path, change_id: int) -> None:
    """Undo change #N of `notes history`: an added note or answer is removed, a replaced or
    removed one comes back under its old id. Refused (nothing changes) once a later change built on it."""
    with _opened(db_path) as (kb, db):
        change = kb.undo(db, change_id, surface="command line")
    click.echo(change.undone_line())


@command.command("export")
@_DB
@click.option("--force", is_flag=True, help="Replace FILE if it exists.")
@click.argument("file", type=click.Path(path_type=Path))
def export(db_path: Path, force: bool, file: Path) -> None:
    """Write the database's notes and verified answers to FILE (JSON; `-`: standard output)."""
    from edge_sql.agent.display import plural
    from edge_sql.knowledge.transfer import export_json

    with _opened(db_path) as (kb, db):
        data = export_json(kb, db)

    text = json.dumps(data, ensure_ascii=False, indent=2) + "\n"
    if str(file) == "-":
        click.echo(text, nl=False)
        return
    if file.exists() and not force:
        raise EdgeSqlError(f"{file} exists: pass --force to replace it")
    _write_whole(file, text)
    click.echo(
        f"exported {plural(len(data['notes']), 'note')} and {plural(len(data['verified']), 'verified answer')} to {file}"
    )


@command.command("import")
@_DB
@click.option(
    "--replace",
    is_flag=True,
    help="Replace verified answers stored with other SQL for the file's questions (kept in `notes history`).",
)
@click.argument("file", type=click.Path(path_type=Path))
def import_(db_path: Path, replace: bool, file: Path) -> None:
    """Add the notes and verified answers in FILE (from `notes export`) to the database's own.
    What is stored already is skipped, ids kept: importing twice adds nothing. The file is
    checked whole first: a bad one, or one that would replace a verified answer without
    --replace, changes nothing."""
    from edge_sql.knowledge.transfer import import_json, read_file

    data = read_file(file)
    with _opened(db_path) as (kb, db):
        imported = import_json(kb, db, data, replace=replace)
    click.echo(imported.line(str(file)))


def _write_whole(path: Path, text: str) -> None:
    """Write `path` through a temporary file beside it: never a half-written export."""
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
