"""edge-sql: a small text-to-SQL agent that runs offline with llama.cpp."""

__version__ = "0.1.0"
