"""The llama.cpp runtime: validate a GGUF, load it, evaluate tokens once, sample under a grammar."""

from edge_sql.runtime.constrained import GrammarError
from edge_sql.runtime.gguf_check import SUPPORTED_ARCHITECTURES, GGUFInfo, validate_gguf
from edge_sql.runtime.sampling import SamplingParams
from edge_sql.runtime.session import Completion, ContextFullError, Session, SessionInfo, Timings

__all__ = [
    "SUPPORTED_ARCHITECTURES",
    "Completion",
    "ContextFullError",
    "GGUFInfo",
    "GrammarError",
    "SamplingParams",
    "Session",
    "SessionInfo",
    "Timings",
    "validate_gguf",
]
