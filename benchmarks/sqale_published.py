"""The published SQaLe episodes' reader, where the benchmarks and tests import it from (it lives
in the package: `edge_sql/evaluation/sqale_published.py`)."""

from edge_sql.evaluation.sqale_published import (  # noqa: F401 (re-exported)
    PUBLISHED_JSON,
    call_args,
    episode,
    load_episodes,
    published_calls,
)
