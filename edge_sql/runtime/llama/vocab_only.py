"""A model's tokenizer without its weights: llama.cpp loads only the vocabulary of a GGUF
(`vocab_only`), in well under a second, so `edge-sql tables` can count what `list_tables`
shows in the same tokens the agent counts it in, without a model in memory."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from pathlib import Path

import llama_cpp

from edge_sql.errors import ModelFileError
from edge_sql.runtime.llama.backend import init_backend


class VocabularyCounter:
    """`counter(text)`: how many tokens `text` is in the model's vocabulary (no BOS, no special
    tokens parsed). Keeps the vocabulary loaded until `close`."""

    def __init__(self, model_path: Path) -> None:
        init_backend()
        params = llama_cpp.llama_model_default_params()
        params.vocab_only = True
        params.n_gpu_layers = 0
        self._model = llama_cpp.llama_model_load_from_file(str(model_path).encode(), params)
        if not self._model:
            raise ModelFileError(f"{model_path}: its vocabulary could not be read")
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)

    def __call__(self, text: str) -> int:
        data = text.encode("utf-8")
        capacity = len(data) + 8
        buffer = (llama_cpp.llama_token * capacity)()
        n = llama_cpp.llama_tokenize(self._vocab, data, len(data), buffer, capacity, False, False)
        if n < 0:  # never for a buffer a token a byte, but llama.cpp says how many it needs
            buffer = (llama_cpp.llama_token * -n)()
            n = llama_cpp.llama_tokenize(self._vocab, data, len(data), buffer, -n, False, False)
        return int(n)

    def close(self) -> None:
        if self._model:
            llama_cpp.llama_model_free(self._model)
            self._model = ctypes.c_void_p()


def vocabulary_counter(model_path: Path) -> Callable[[str], int]:
    """A counter over `model_path`'s vocabulary (freed with the process)."""
    return VocabularyCounter(model_path)
