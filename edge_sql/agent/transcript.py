"""The episode transcript: raw text and its tokens, kept in step with the session's context.

Nothing is ever re-rendered: new turns are tokenized on their own and evaluated once, and
each completion is appended exactly as generated (earlier `<think>` blocks stay).
"""

from __future__ import annotations

from collections.abc import Sequence

from edge_sql.runtime import Completion, Session

# A piece of text to append and whether special-token text in it (`<|im_end|>`) becomes
# special tokens. Only the template's own framing and system prompt are parsed for special
# tokens; questions, tool output and echoed calls never are, so data cannot end a turn.
Piece = tuple[str, bool]


class Transcript:
    """Raw text plus token ids of everything in the session's context this episode."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.text = ""
        self.tokens: list[int] = []
        self.generated_spans: list[list[int]] = []  # [start, end) context positions the model wrote

    def __len__(self) -> int:
        return len(self.tokens)

    def tokenize(self, pieces: Sequence[Piece]) -> list[int]:
        """Token ids of `pieces`, each tokenized on its own (nothing is evaluated)."""
        ids: list[int] = []
        for text, special in pieces:
            if text:
                ids += self.session.tokenize(text, special=special)
        return ids

    def append(self, pieces: Sequence[Piece]) -> int:
        """Tokenize and evaluate new text; returns how many tokens it added."""
        ids = self.tokenize(pieces)
        self.session.eval(ids)
        self.text += "".join(text for text, _ in pieces)
        self.tokens += ids
        return len(ids)

    def append_tokens(self, ids: list[int]) -> None:
        """Evaluate tokens chosen by the loop itself (the end-of-turn token)."""
        self.session.eval(ids)
        self.text += self.session.detokenize(ids)
        self.tokens += ids

    def add_completion(self, completion: Completion) -> None:
        """Record what `generate` appended to the context (already in the session)."""
        self.text += self.session.detokenize(completion.tokens)
        self.tokens += completion.tokens
        if completion.tokens:
            self.generated_spans.append([completion.start, completion.end])
