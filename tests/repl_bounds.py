"""The options tests start `edge-sql run` with: the fixture model's episodes bounded to a few
seconds (the prompt's pty tests, tests/test_run_repl.py and tests/test_knowledge_repl.py, and
the command line's speculation test in tests/test_speculative.py)."""

PROMPT = "edge-sql> "
SMALL = [
    "--no-tune",
    "--threads",
    "1",
    "--ctx",
    "2048",
    "--think-tokens",
    "8",
    "--calls-per-turn",
    "2",
    "--max-rounds",
    "2",
    "--budget",
    "max_sql_chars=24",
    "--budget",
    "max_name_chars=16",
    "--budget",
    "max_final_sql_tokens=24",
    "--budget",
    "min_string_chars=8",
]
