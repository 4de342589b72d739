"""A loaded model's vocabulary: text to token ids and back, special tokens, llguidance's view.

Token bytes are cached per loaded model (`LoadedModel.pieces`) and llguidance's view is built
once per loaded model (seconds for 248k tokens), so every session on the same weights shares
both (runtime/llama/shared_models.py).
"""

from __future__ import annotations

import codecs
import ctypes
import json
from collections.abc import Callable, Iterable

import llama_cpp
import llguidance

from edge_sql.runtime.llama.shared_models import LoadedModel
from edge_sql.runtime.text.constrained import build_lltokenizer


class Vocabulary:
    """Tokenize, detokenize and classify tokens of `loaded`'s model (valid while it is loaded)."""

    def __init__(self, loaded: LoadedModel) -> None:
        self._loaded = loaded
        self._vocab = llama_cpp.llama_model_get_vocab(loaded.model)
        self.n_vocab: int = llama_cpp.llama_vocab_n_tokens(self._vocab)
        self._pieces = loaded.pieces
        self._piece_buffer = ctypes.create_string_buffer(256)

    def tokenize(self, text: str, *, special: bool = True) -> list[int]:
        """Token ids of `text` (no BOS added); `special` parses `<|im_end|>`-style tokens."""
        data = text.encode("utf-8")
        capacity = len(data) + 8
        buffer = (llama_cpp.llama_token * capacity)()
        n = llama_cpp.llama_tokenize(self._vocab, data, len(data), buffer, capacity, False, special)
        if n < 0:
            capacity = -n
            buffer = (llama_cpp.llama_token * capacity)()
            n = llama_cpp.llama_tokenize(self._vocab, data, len(data), buffer, capacity, False, special)
        return list(buffer[:n])

    def token_bytes(self, token: int) -> bytes:
        """The exact bytes of one token (special tokens rendered as their text)."""
        piece = self._pieces.get(token)
        if piece is None:
            n = llama_cpp.llama_token_to_piece(self._vocab, token, self._piece_buffer, 256, 0, True)
            if n < 0:
                big = ctypes.create_string_buffer(-n)
                n = llama_cpp.llama_token_to_piece(self._vocab, token, big, -n, 0, True)
                piece = big.raw[:n]
            else:
                piece = self._piece_buffer.raw[:n]
            self._pieces[token] = piece
        return piece

    def detokenize(self, tokens: Iterable[int]) -> str:
        """Text of tokens; bytes are joined first so characters split across tokens survive."""
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", errors="replace")

    def is_special_token(self, token: int) -> bool:
        """Control tokens and `<...>` user-defined tokens: what llguidance matches only by id."""
        attr = llama_cpp.llama_vocab_get_attr(self._vocab, token)
        if attr & llama_cpp.LLAMA_TOKEN_ATTR_CONTROL:
            return True
        piece = self.token_bytes(token)
        return bool(attr & llama_cpp.LLAMA_TOKEN_ATTR_USER_DEFINED) and piece.startswith(b"<") and piece.endswith(b">")

    def grammar_token(self, text: str) -> str:
        """A Lark fragment matching `text` as the model emits it.

        A single special token (Qwen3.5's `</think>`, `<|im_end|>`) becomes `<[ID]>`, which
        llguidance matches by token id; anything else becomes a quoted string literal.
        """
        ids = self.tokenize(text, special=True)
        if len(ids) == 1 and self.is_special_token(ids[0]) and self.token_bytes(ids[0]) == text.encode():
            return f"<[{ids[0]}]>"
        return json.dumps(text, ensure_ascii=False)

    def lltokenizer(self) -> llguidance.LLTokenizer:
        """llguidance's view of this vocabulary (built on first use, shared by the sessions of
        one loaded model)."""
        ids = range(self.n_vocab)
        return self._loaded.shared_lltokenizer(
            lambda: build_lltokenizer(
                self._vocab,
                pieces=[self.token_bytes(t) for t in ids],
                special=[self.is_special_token(t) for t in ids],
                eos_token=llama_cpp.llama_vocab_eos(self._vocab),
            )
        )


class TextStream:
    """Text of tokens as they are appended: a character split across tokens comes out whole,
    once its last byte is there; `on_text` (if given) sees every new piece as it comes."""

    def __init__(self, vocabulary: Vocabulary, on_text: Callable[[str], None] | None = None) -> None:
        self._vocabulary = vocabulary
        self._on_text = on_text
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._chunks: list[str] = []

    def feed(self, tokens: Iterable[int]) -> None:
        self._emit(self._decoder.decode(b"".join(self._vocabulary.token_bytes(t) for t in tokens)))

    def finish(self) -> str:
        """All the text, with any incomplete character at the end as a replacement character."""
        self._emit(self._decoder.decode(b"", final=True))
        return "".join(self._chunks)

    def _emit(self, text: str) -> None:
        if text:
            self._chunks.append(text)
            if self._on_text is not None:
                self._on_text(text)
