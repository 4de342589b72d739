"""Predictions files: a JSON object question id -> SQL, or BIRD's own ``predict_dev.json``.

BIRD's format maps the position of a question in the questions file (``"0"``, ``"1"``...) to
``"SQL\\t----- bird -----\\tdb_id"``; the suffix is stripped and its db_id checked against the
question at that position.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from edge_sql.errors import PredictionsError
from edge_sql.evaluation.datasets import Question, base_id, read_json_file

BIRD_SEPARATOR = "\t----- bird -----\t"


def load_predictions(path: Path | str, questions: Sequence[Question]) -> dict[str, str]:
    """Read a predictions file and return question id -> predicted SQL.

    Questions absent from the file are simply not predicted (they score 0); keys that match no
    question raise PredictionsError, since they mean the file belongs to another dataset.
    """
    raw = _read_json_object(Path(path))
    if any(BIRD_SEPARATOR in sql for sql in raw.values()):
        return _from_bird_format(raw, questions, Path(path))
    known = {q.id for q in questions} | {base_id(q.id) for q in questions}
    unknown = sorted(key for key in raw if key not in known)
    if unknown:
        shown = ", ".join(repr(key) for key in unknown[:5])
        raise PredictionsError(f"{path}: {len(unknown)} prediction id(s) match no question of the dataset: {shown}")
    return {key: sql.strip() for key, sql in raw.items()}


def _read_json_object(path: Path) -> dict[str, str]:
    data = read_json_file(path, "predictions file", PredictionsError)
    if not isinstance(data, dict):
        raise PredictionsError(f"predictions file {path} must hold a JSON object: question id -> SQL")
    texts: dict[str, str] = {}
    for key, value in data.items():
        if not isinstance(value, str):
            raise PredictionsError(f"{path}: the prediction for '{key}' is not a string of SQL", path=path)
        texts[key] = value
    return texts


def _from_bird_format(raw: dict[str, str], questions: Sequence[Question], path: Path) -> dict[str, str]:
    predictions: dict[str, str] = {}
    for key, value in raw.items():
        if not (key.isdigit() and int(key) < len(questions)):
            raise PredictionsError(
                f"{path}: BIRD-format key '{key}' is not a question position (0..{len(questions) - 1})"
            )
        question = questions[int(key)]
        sql, _, db_id = value.partition(BIRD_SEPARATOR)
        if db_id.strip() and db_id.strip() != question.db_id:
            raise PredictionsError(
                f"{path}: prediction {key} names database '{db_id.strip()}' but question {key} "
                f"is about '{question.db_id}'"
            )
        predictions[question.id] = sql.strip()
    return predictions
