"""edge-sql: a small text-to-SQL agent that runs offline with llama.cpp."""

__version__ = "0.1.0"


def __getattr__(name: str):
    """`edge_sql.Agent`, imported on first use so the CLI starts without loading llama.cpp."""
    if name == "Agent":
        from edge_sql.api import Agent

        return Agent
    raise AttributeError(f"module 'edge_sql' has no attribute {name!r}")
