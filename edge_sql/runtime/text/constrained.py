"""Grammar-constrained decoding with llguidance: token masks for a Lark grammar.

llguidance computes the allowed-token bitmask for the whole vocabulary in about 0.1 ms.
The sampler then checks only its few top candidates against that bitmask (see
`sampling.sample_allowed`), so the grammar costs almost nothing per token.
"""

from __future__ import annotations

import ctypes
from collections import OrderedDict
from collections.abc import Callable, Collection, Sequence

import llama_cpp
import llguidance
import numpy as np

from edge_sql.errors import GrammarError


def build_lltokenizer(
    vocab: llama_cpp.llama_vocab_p, pieces: Sequence[bytes], special: Sequence[bool], eos_token: int
) -> llguidance.LLTokenizer:
    """llguidance's tokenizer over a llama.cpp vocabulary (seconds for 248k tokens: cache it).

    Special tokens get llguidance's 0xFF prefix, so grammars match them only by id (`<[ID]>`),
    never as text. Same construction as `llguidance.llamacpp.lltokenizer_from_vocab`, on the
    session's cached token bytes and without its 248k deprecated-API calls.
    """
    tokens = [b"\xff" + piece if is_special else piece for piece, is_special in zip(pieces, special)]
    tokenize = ctypes.cast(llama_cpp.llama_cpp._lib.llama_tokenize, ctypes.c_void_p).value
    return llguidance.LLTokenizer.from_llamacpp(  # type: ignore[attr-defined]  # absent from llguidance's stub (its own llamacpp.py ignores it too)
        tokens=tokens, vocab_ptr=vocab, tokenize_fptr=tokenize, eos_token=eos_token, slices=None
    )


class GrammarConstraint:
    """One Lark grammar bound to a tokenizer: masks, forced tokens, consumption.

    Stop tokens are handled here rather than by llguidance's EOS: they are allowed exactly
    when the grammar is in an accepting state; llguidance's own EOS token is allowed only if
    it is one of them.
    """

    def __init__(self, tokenizer: llguidance.LLTokenizer, lark: str, n_vocab: int) -> None:
        self._template = llguidance.LLMatcher(tokenizer, llguidance.LLMatcher.grammar_from_lark(lark), log_level=0)
        if self._template.is_error():
            raise GrammarError(f"invalid grammar: {self._template.get_error()}")
        self._matcher = self._template.deep_copy()
        self._eos_tokens = [t for t in tokenizer.eos_tokens if t < n_vocab]
        self._bitmask = np.zeros((n_vocab + 31) // 32, dtype=np.int32)
        self._bits = self._bitmask.view(np.uint32)
        self._n_vocab = n_vocab
        self._stop_tokens: tuple[int, ...] = ()

    def start(self, stop_tokens: Collection[int]) -> None:
        """Rewind to the grammar's start for a new completion.

        A fresh copy of the compiled matcher: llguidance cannot roll back grammars that use
        `max_tokens` (a bounded think block), so `reset()` is not an option.
        """
        self._matcher = self._template.deep_copy()
        self._stop_tokens = tuple(int(t) for t in stop_tokens)

    @property
    def is_stopped(self) -> bool:
        """True when the grammar admits no further token (the completion is finished)."""
        self._check()
        return self._matcher.is_stopped()

    @property
    def is_accepting(self) -> bool:
        return self._matcher.is_accepting()

    def forced_tokens(self) -> list[int]:
        """Tokens the grammar forces from here on (JSON punctuation, keys...), maybe none."""
        return list(self._matcher.compute_ff_tokens())

    def compute_mask(self) -> None:
        """Fill the bitmask of allowed next tokens (stop tokens only when accepting)."""
        self._matcher.unsafe_compute_mask_ptr(self._bitmask.ctypes.data, self._bitmask.nbytes)
        self._check()
        for token in self._eos_tokens:
            self._set_bit(token, False)
        if self._stop_tokens and self._matcher.is_accepting():
            for token in self._stop_tokens:
                self._set_bit(token, True)

    def _set_bit(self, token: int, on: bool) -> None:
        word, bit = divmod(token, 32)
        if on:
            self._bits[word] |= np.uint32(1 << bit)
        else:
            self._bits[word] &= np.uint32(~(1 << bit) & 0xFFFFFFFF)

    def is_allowed(self, ids: np.ndarray) -> np.ndarray:
        """Whether each of a few token ids is allowed by the last computed mask."""
        return ((self._bits[ids >> 5] >> (ids & 31).astype(np.uint32)) & 1).astype(bool)

    def allowed_mask(self) -> np.ndarray:
        """Boolean array over the vocabulary from the last computed mask."""
        return np.unpackbits(self._bitmask.view(np.uint8), bitorder="little")[: self._n_vocab].view(bool)

    def consume(self, tokens: list[int]) -> None:
        """Advance the grammar over tokens that it allowed."""
        if not self._matcher.consume_tokens(tokens):
            self._check()
            raise RuntimeError(f"grammar rejected tokens {tokens}")

    def _check(self) -> None:
        if self._matcher.is_error():
            raise GrammarError(f"grammar error: {self._matcher.get_error()}")


class GrammarCache:
    """The compiled constraints of the last `size` grammars a session used (compiling one costs
    milliseconds; an episode reuses a handful per turn). `tokenizer` is called on first need:
    llguidance's vocabulary view takes seconds to build."""

    def __init__(self, tokenizer: Callable[[], llguidance.LLTokenizer], n_vocab: int, size: int = 16) -> None:
        self._tokenizer = tokenizer
        self._n_vocab = n_vocab
        self._size = size
        self._grammars: OrderedDict[str, GrammarConstraint] = OrderedDict()

    def get(self, lark: str) -> GrammarConstraint:
        """The constraint for `lark` (GrammarError for a bad grammar)."""
        constraint = self._grammars.get(lark)
        if constraint is None:
            constraint = GrammarConstraint(self._tokenizer(), lark, self._n_vocab)
            self._grammars[lark] = constraint
            if len(self._grammars) > self._size:
                self._grammars.popitem(last=False)
        else:
            self._grammars.move_to_end(lark)
        return constraint

    def clear(self) -> None:
        self._grammars = OrderedDict()
