"""The evaluation modes: the schema withheld (the trained protocol) or given in the user turn;
and withheld with what the knowledge adds to the evidence (`withheld+notes`, `withheld+examples`:
bench/knowledge_modes.py).

`given` reproduces the model card's "full" figure: the database's `CREATE TABLE` statements
go into the user turn, before the question, and the episode is otherwise the same. It is
done by extending the prompt template's user turn, so the agent loop is unchanged.
"""

from __future__ import annotations

from dataclasses import replace

from edge_sql.agent.prompt import PromptTemplate
from edge_sql.bench.variants import BenchSetupError
from edge_sql.tools.database import ReadOnlyDatabase

WITHHELD = "withheld"
GIVEN = "given"
MODES = (WITHHELD, GIVEN, "withheld+notes", "withheld+examples")
SCHEMA_HEADER = "Database schema:"


def schema_text(db: ReadOnlyDatabase) -> str:
    """Every table's `CREATE TABLE` statement, as `describe_table` shows it, one after another."""
    return "\n\n".join(db.create_statement(table).strip().rstrip(";") + ";" for table in db.table_names())


def prompt_for_mode(prompt: PromptTemplate, mode: str, db: ReadOnlyDatabase) -> PromptTemplate:
    """`prompt` itself for `withheld`; for `given`, a copy whose user turn starts with the schema."""
    if mode.startswith(WITHHELD):  # the knowledge modes change the evidence, not the prompt
        return prompt
    if mode != GIVEN:
        raise ValueError(f"unknown mode {mode!r} (choose from {', '.join(MODES)})")
    # The template fills only `{question}` and `{evidence}`; other braces stay as written.
    preamble = f"{SCHEMA_HEADER}\n{schema_text(db)}\n\n"
    return replace(prompt, user_template=preamble + prompt.user_template)


def parse_modes(text: str) -> list[str]:
    """`"withheld,given"` -> ["withheld", "given"]; raises BenchSetupError for unknown names."""
    modes = [m.strip().lower() for m in text.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise BenchSetupError(f"unknown mode(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(MODES)}")
    return list(dict.fromkeys(modes))
