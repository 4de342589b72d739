"""The llama.cpp runtime: validate a GGUF, load it, evaluate tokens once, sample under a grammar.

Its names are imported on first use (PEP 562), so `edge_sql.runtime.options` (the speculation
modes, `SessionOptions`) can be read without loading llama.cpp.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edge_sql.lazy import lazy_exports

_EXPORTS = {
    "SUPPORTED_ARCHITECTURES": "edge_sql.convert.gguf_file",
    "GGUFFile": "edge_sql.convert.gguf_file",
    "validate_gguf": "edge_sql.convert.gguf_file",
    "ContextFullError": "edge_sql.errors",
    "GrammarError": "edge_sql.errors",
    "SamplingParams": "edge_sql.runtime.text.sampling",
    "Completion": "edge_sql.runtime.records",
    "SessionInfo": "edge_sql.runtime.records",
    "Timings": "edge_sql.runtime.records",
    "SessionOptions": "edge_sql.runtime.options",
    "SpeculateMode": "edge_sql.runtime.options",
    "PrefixCache": "edge_sql.runtime.state.prefix_state",
    "Session": "edge_sql.runtime.session",
    "release_idle": "edge_sql.runtime.llama.shared_models",
}
__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:
    from edge_sql.convert.gguf_file import SUPPORTED_ARCHITECTURES, GGUFFile, validate_gguf
    from edge_sql.errors import ContextFullError, GrammarError
    from edge_sql.runtime.llama.shared_models import release_idle
    from edge_sql.runtime.options import SessionOptions, SpeculateMode
    from edge_sql.runtime.records import Completion, SessionInfo, Timings
    from edge_sql.runtime.session import Session
    from edge_sql.runtime.state.prefix_state import PrefixCache
    from edge_sql.runtime.text.sampling import SamplingParams


__getattr__ = lazy_exports(__name__, _EXPORTS)
