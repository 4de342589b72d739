"""The llama.cpp runtime: validate a GGUF, load it, evaluate tokens once, sample under a grammar."""

from edge_sql.convert.gguf_file import SUPPORTED_ARCHITECTURES, GGUFFile, validate_gguf
from edge_sql.runtime.constrained import GrammarError
from edge_sql.runtime.sampling import SamplingParams
from edge_sql.runtime.session import Completion, ContextFullError, Session, SessionInfo, Timings
from edge_sql.runtime.shared_models import release_idle

__all__ = [
    "SUPPORTED_ARCHITECTURES",
    "Completion",
    "ContextFullError",
    "GGUFFile",
    "GrammarError",
    "SamplingParams",
    "Session",
    "SessionInfo",
    "Timings",
    "release_idle",
    "validate_gguf",
]
