"""The session's tokens and text, passed through to its `Vocabulary`.

Why a class of its own: callers hold a `Session` and ask it for tokens and text; the work is the
vocabulary's (runtime/text/vocabulary.py). Keeping the pass-through here leaves the session's
other modules with evaluation, generation and lifetime.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from edge_sql.runtime.text.vocabulary import Vocabulary

if TYPE_CHECKING:
    import llguidance


class TokenText:
    """Tokens to text and back for a loaded model (`vocab`, set by the session)."""

    vocab: Vocabulary

    @property
    def n_vocab(self) -> int:
        return self.vocab.n_vocab

    def tokenize(self, text: str, *, special: bool = True) -> list[int]:
        return self.vocab.tokenize(text, special=special)

    def count_tokens(self, text: str) -> int:
        """How many tokens `text` is as plain text (what a tool's share is counted in)."""
        return len(self.vocab.tokenize(text, special=False))

    def token_bytes(self, token: int) -> bytes:
        return self.vocab.token_bytes(token)

    def detokenize(self, tokens: Iterable[int]) -> str:
        return self.vocab.detokenize(tokens)

    def is_special_token(self, token: int) -> bool:
        return self.vocab.is_special_token(token)

    def grammar_token(self, text: str) -> str:
        return self.vocab.grammar_token(text)

    def lltokenizer(self) -> llguidance.LLTokenizer:
        """llguidance's view of this vocabulary (built on first use: seconds for 248k tokens;
        shared by the sessions of one loaded model, see runtime/llama/shared_models.py)."""
        return self.vocab.lltokenizer()
