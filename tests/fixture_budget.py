"""The episode limits the trained fixture runs with, in the tests and in the benchmarks that use it.

Short thoughts, short SQL and two calls a turn: the fixture (tests/fixture_training.py) writes
SQL that runs within these, and the check that ends its training runs with them.
"""

from __future__ import annotations

TRAINED_LIMITS = dict(
    max_tokens=4096,
    max_think_tokens=24,
    max_final_think_tokens=12,
    max_sql_chars=96,
    max_name_chars=32,
    max_final_sql_tokens=40,
    max_calls_per_turn=2,
)
