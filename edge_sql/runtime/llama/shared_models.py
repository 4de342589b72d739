"""Loaded models shared by the sessions of one process.

A llama.cpp model is read-only once loaded; contexts hold all per-conversation state. Sessions
of the same file with the same load parameters therefore share one model, and with it
llguidance's view of the vocabulary, which takes about 3 s to build for 248k tokens (token
bytes, then llguidance's own tables) on top of about 1 s to load the file. Calibration opens a
session per candidate setting, the bench one per variant and task, an application may open an
`Agent` per request: each paid both again.

The last model released is kept loaded (idle) until a session needs another model, so a
session opened right after the previous one closed reuses it; `release_idle()` frees it at
once. A model with repacked weights is never kept idle: its copies are anonymous memory, not
pages of the file. A session that does not draft with the MTP head also takes the file's model
loaded with the head, if there is one, instead of loading the file again without it.

The vocabulary view must outlive nothing it points into: llguidance tokenizes through the
model's vocabulary pointer, so the view lives and dies with its model here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import llama_cpp

from edge_sql.convert.llama_log import capture_llama_log as capture_log
from edge_sql.errors import ModelFileError
from edge_sql.runtime.llama.mapping import release_file_pages

if TYPE_CHECKING:
    import llguidance


@dataclass
class LoadedModel:
    """One llama.cpp model and what the sessions on it share."""

    key: tuple
    model: llama_cpp.llama_model_p
    load_log: list[str]  # llama.cpp's log while loading (its buffer sizes)
    mapping_released: bool  # repacked: the file's mapped pages were given back
    keep_idle: bool
    refs: int = 0
    pieces: dict[int, bytes] = field(default_factory=dict)  # token bytes, filled on use
    lltokenizer: llguidance.LLTokenizer | None = None  # llguidance's view of the vocabulary, built on first use
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def path(self) -> Path:
        """The model file (resolved)."""
        return Path(self.key[0])

    def shared_lltokenizer(self, build: Callable[[], llguidance.LLTokenizer]) -> llguidance.LLTokenizer:
        """The vocabulary view, built once (by the first session that needs it)."""
        with self.lock:
            if self.lltokenizer is None:
                self.lltokenizer = build()
            return self.lltokenizer


_lock = threading.Lock()
_loaded: dict[tuple, LoadedModel] = {}


def _key(path: Path, params: llama_cpp.llama_model_params) -> tuple:
    stat = path.stat()
    return (
        str(path.resolve()),
        stat.st_size,
        stat.st_mtime_ns,
        stat.st_ino,
        params.n_gpu_layers,
        bool(params.use_extra_bufts),
        bool(params.load_mtp),
    )


def _with_mtp(key: tuple) -> tuple:
    """The key of the same file and parameters, with the MTP head loaded."""
    return (*key[:-1], True)


def acquire(path: Path, params: llama_cpp.llama_model_params) -> LoadedModel:
    """The model for `path` loaded with `params`: shared if loaded, else loaded now (an idle
    model of another file is freed first). Raises ModelFileError if llama.cpp cannot load it."""
    key = _key(path, params)
    with _lock:
        loaded = _loaded.get(key)
        if loaded is None and not params.load_mtp:
            # The same file loaded with its MTP head serves a session that does not draft with
            # it: the head is an extra block the main graph never runs, a context on that model
            # allocates the same buffers, and its weights are pages of the file either way.
            # Calibration measures the MTP drafter's context last, so `run` then reuses that load.
            loaded = _loaded.get(_with_mtp(key))
        if loaded is None:
            for other in [m for m in _loaded.values() if m.refs == 0]:
                _free(other)
            with capture_log() as lines:
                model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
            if not model:
                raise ModelFileError(f"llama.cpp could not load {path} (run with verbose=True for its log)")
            # Repacked matrices are copies: give back their mapped originals (see runtime/llama/mapping.py).
            repack = bool(params.use_extra_bufts)
            released = bool(repack and release_file_pages(path))
            loaded = _loaded[key] = LoadedModel(key, model, list(lines), released, keep_idle=not repack)
        loaded.refs += 1
        return loaded


def share(loaded: LoadedModel) -> LoadedModel:
    """One more session uses `loaded` (one made on a context that another opened)."""
    with _lock:
        loaded.refs += 1
    return loaded


def release(loaded: LoadedModel) -> None:
    """A session is done with `loaded`: freed when nobody uses it, unless kept idle."""
    with _lock:
        loaded.refs -= 1
        if loaded.refs <= 0 and not loaded.keep_idle:
            _free(loaded)


def release_idle() -> int:
    """Free every loaded model no session uses; returns how many."""
    with _lock:
        idle = [m for m in _loaded.values() if m.refs <= 0]
        for loaded in idle:
            _free(loaded)
        return len(idle)


def _free(loaded: LoadedModel) -> None:
    if _loaded.get(loaded.key) is loaded:
        del _loaded[loaded.key]
    loaded.lltokenizer = None
    llama_cpp.llama_model_free(loaded.model)
