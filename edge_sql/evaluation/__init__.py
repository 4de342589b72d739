"""Evaluation: labelled datasets (BIRD, Spider, the bundled set) and BIRD-style scoring."""

from edge_sql.evaluation.datasets import (
    DatasetError,
    Question,
    check_databases,
    load_bird,
    load_bundled,
    load_dataset,
    load_spider,
    require_databases,
)
from edge_sql.evaluation.outcomes import Accuracy, EvalReport, QuestionResult, ReportError
from edge_sql.evaluation.predictions import PredictionsError, load_predictions
from edge_sql.evaluation.scoring import Score, evaluate, score_on_database, score_prediction

__all__ = [
    "Accuracy",
    "DatasetError",
    "EvalReport",
    "PredictionsError",
    "Question",
    "QuestionResult",
    "ReportError",
    "Score",
    "check_databases",
    "evaluate",
    "load_bird",
    "load_bundled",
    "load_dataset",
    "load_predictions",
    "load_spider",
    "require_databases",
    "score_on_database",
    "score_prediction",
]
