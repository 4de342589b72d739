"""Labelled text-to-SQL questions: BIRD- and Spider-format loaders and the bundled set.

Both formats keep databases at ``<db_root>/<db_id>/<db_id>.sqlite`` (as BIRD's
``dev_databases/`` and Spider's ``database/`` folders ship them), or data files in their place
(`database_path`). Loading never opens a
database; `check_databases` / `require_database` say which ones are missing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

from edge_sql.errors import DatabaseError, DatasetError, EdgeSqlError
from edge_sql.json_types import JSONObject, JSONValue

BUNDLED_FILE_NAME = "edge_sql_eval.json"


@dataclass(frozen=True)
class Question:
    """One labelled question: natural language, the database it is about, and the gold SQL."""

    id: str
    db_id: str
    db_path: Path
    question: str
    evidence: str | None
    gold_sql: str
    difficulty: str | None


def database_path(db_root: Path, db_id: str) -> Path:
    """Where BIRD and Spider keep a database: ``<db_root>/<db_id>/<db_id>.sqlite``. Where that is
    absent, a data file in its place (``<db_id>.csv``, ``.parquet``, ...: edge_sql/files loads it
    into SQLite) or else the folder ``<db_root>/<db_id>/`` itself when it holds data files."""
    from edge_sql.files import FORMATS

    folder = Path(db_root) / db_id
    sqlite = folder / f"{db_id}.sqlite"
    if sqlite.is_file() or not folder.is_dir():
        return sqlite
    for suffix in FORMATS:
        if (folder / f"{db_id}{suffix}").is_file():
            return folder / f"{db_id}{suffix}"
    if any(entry.suffix.lower() in FORMATS for entry in folder.iterdir()):
        return folder
    return sqlite


def read_json_file(path: Path, what: str, error: type[EdgeSqlError]) -> JSONValue:
    """The JSON value in `path`; `error` (naming `what`, e.g. "questions file") if unreadable."""
    path = Path(path)
    if path.is_dir():
        raise error(f"{what} {path} is a folder; give the JSON file")
    if not path.is_file():
        raise error(f"{what} not found: {path}")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise error(f"{what} {path} is not valid JSON: {exc}") from exc


def _read_json_list(questions_file: Path) -> list[JSONValue]:
    data = read_json_file(questions_file, "questions file", DatasetError)
    if not isinstance(data, list):
        raise DatasetError(f"questions file {questions_file} must hold a JSON list of questions")
    return data


def _entry(entry: JSONValue, index: int, path: Path) -> JSONObject:
    """One entry of the questions file, which must be a JSON object."""
    if not isinstance(entry, dict):
        raise DatasetError(f"{path}: entry {index} is not a JSON object", path=path)
    return entry


def _text(entry: JSONObject, key: str, index: int, path: Path) -> str:
    """A required, non-empty text field of one entry."""
    if key not in entry:
        raise DatasetError(f"{path}: entry {index} lacks the field '{key}'", path=path)
    value = entry[key]
    if not (isinstance(value, str) and value.strip()):
        raise DatasetError(f"{path}: entry {index} has an empty or non-text '{key}'", path=path)
    return value


def _optional_text(entry: JSONObject, key: str, index: int, path: Path) -> str | None:
    """An optional text field; absent, null or blank -> None."""
    value = entry.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise DatasetError(f"{path}: entry {index} has a non-text '{key}'", path=path)
    return value.strip() or None


def load_bird(questions_file: Path | str, db_root: Path | str) -> list[Question]:
    """Parse a BIRD ``dev.json``-style file (question_id, db_id, question, evidence, SQL,
    difficulty). Ids are ``str(question_id)``, or the entry's position when it has none.
    An empty evidence becomes None."""
    path = Path(questions_file)
    questions: list[Question] = []
    for index, item in enumerate(_read_json_list(path)):
        entry = _entry(item, index, path)
        db_id = _text(entry, "db_id", index, path)
        raw_id = entry.get("question_id")
        questions.append(
            Question(
                id=str(raw_id) if raw_id is not None else str(index),
                db_id=db_id,
                db_path=database_path(Path(db_root), db_id),
                question=_text(entry, "question", index, path),
                evidence=_optional_text(entry, "evidence", index, path),
                gold_sql=_text(entry, "SQL", index, path),
                difficulty=_optional_text(entry, "difficulty", index, path),
            )
        )
    return _unique_ids(questions)


def load_spider(questions_file: Path | str, db_root: Path | str) -> list[Question]:
    """Parse a Spider ``dev.json``-style file (db_id, question, query). Ids are the entries'
    positions (``"0"``, ``"1"``...); Spider has no evidence and no difficulty label here."""
    path = Path(questions_file)
    questions: list[Question] = []
    for index, item in enumerate(_read_json_list(path)):
        entry = _entry(item, index, path)
        db_id = _text(entry, "db_id", index, path)
        questions.append(
            Question(
                id=str(index),
                db_id=db_id,
                db_path=database_path(Path(db_root), db_id),
                question=_text(entry, "question", index, path),
                evidence=None,
                gold_sql=_text(entry, "query", index, path),
                difficulty=None,
            )
        )
    return questions


def bundled_data_dir() -> Path:
    """The package's data folder (Chinook, Northwind and the evaluation set), installed or not."""
    return Path(str(resources.files("edge_sql") / "data"))


def bundled_questions_file() -> Path:
    """The bundled evaluation set, in BIRD format."""
    return bundled_data_dir() / "eval" / BUNDLED_FILE_NAME


def load_bundled() -> list[Question]:
    """The evaluation set written for edge-sql, over the bundled Chinook and Northwind."""
    return load_bird(bundled_questions_file(), bundled_data_dir())


def load_dataset(dataset: str | Path, *, fmt: str = "bird", db_root: Path | str | None = None) -> list[Question]:
    """One entry point for the CLI: ``"bundled"`` or a questions file in ``fmt`` (bird|spider)."""
    if str(dataset) == "bundled":
        return load_bundled()
    if db_root is None:
        raise DatasetError("a questions file needs --db-root, the folder holding <db_id>/<db_id>.sqlite")
    loaders = {"bird": load_bird, "spider": load_spider}
    if fmt not in loaders:
        raise DatasetError(f"unknown dataset format '{fmt}' (choose from: {', '.join(loaders)})")
    return loaders[fmt](dataset, db_root)


def check_databases(questions: Iterable[Question]) -> dict[str, Path]:
    """The databases the questions need that are absent: db_id -> expected path."""
    missing: dict[str, Path] = {}
    for question in questions:
        if question.db_id not in missing and not question.db_path.exists():
            missing[question.db_id] = question.db_path
    return dict(sorted(missing.items()))


def require_databases(questions: Sequence[Question]) -> None:
    """Raise DatabaseError naming every missing database (with where it was looked for)."""
    missing = check_databases(questions)
    if missing:
        listed = "; ".join(f"'{db_id}' (expected at {path})" for db_id, path in missing.items())
        raise DatabaseError(f"{len(missing)} database(s) missing: {listed}")


REPEAT_MARK = "#"


def _unique_ids(questions: list[Question]) -> list[Question]:
    """Give the n-th repeat of a question_id the id ``<id>#<n>`` (BIRD mini-dev repeats 137
    and 138 verbatim); `base_id` maps it back so a prediction for ``<id>`` covers each repeat."""
    seen: dict[str, int] = {}
    unique: list[Question] = []
    for question in questions:
        seen[question.id] = seen.get(question.id, 0) + 1
        if seen[question.id] > 1:
            question = replace(question, id=f"{question.id}{REPEAT_MARK}{seen[question.id]}")
        unique.append(question)
    return unique


def base_id(question_id: str) -> str:
    """The id as the questions file wrote it, without a repeat mark."""
    head, mark, count = question_id.rpartition(REPEAT_MARK)
    return head if mark and count.isdigit() else question_id
