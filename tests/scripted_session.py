"""A real Session whose generated text comes from a script, for episodes a model cannot be
made to write on demand (a 14-call round, a fenced final answer).

Everything but the choice of tokens is real: the script is tokenized by the model's own
tokenizer, every token is checked against the episode's grammar with llguidance's real mask
(a script the grammar would not allow fails the test), and the tokens are evaluated by
llama.cpp in the session's context like sampled ones.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path

import numpy as np

from edge_sql.runtime import Completion, SamplingParams, Session
from edge_sql.runtime.text.constrained import GrammarConstraint


class ScriptedSession(Session):
    """`generate` writes the next text of `script` (one entry per call of generate).

    An entry ends with the end-of-turn token when the grammar still allows more (the model
    stopping); `""` with a stop token is the model ending its turn at once.
    """

    def __init__(self, model_path: str | Path, *, script: list[str], **kwargs) -> None:
        super().__init__(model_path, **kwargs)
        self.script = list(script)

    def generate(
        self,
        *,
        grammar: str | None = None,
        params: SamplingParams = SamplingParams(),
        max_tokens: int,
        stop_tokens: Collection[int] = (),
        should_stop: Callable[[], bool] | None = None,
        on_text: Callable[[str], None] | None = None,
        audit: bool = False,
    ) -> Completion:
        assert grammar is not None, "episodes always generate under a grammar"
        text = self.script.pop(0)
        tokens = self.tokenize(text, special=True) if text else []
        constraint = GrammarConstraint(self.lltokenizer(), grammar, self.n_vocab)
        constraint.start(list(stop_tokens))
        for position, token in enumerate(tokens):
            constraint.compute_mask()
            assert constraint.is_allowed(np.array([token]))[0], (
                f"the grammar refuses the script at {self.detokenize(tokens[: position + 1])!r}"
            )
            constraint.consume([token])
        ended = bool(stop_tokens) and not constraint.is_stopped
        if ended:
            constraint.compute_mask()
            stop = next(iter(stop_tokens))
            assert constraint.is_allowed(np.array([stop]))[0], f"the grammar cannot end after {text!r}"
            tokens.append(stop)
        assert len(tokens) <= max_tokens, f"the script's {len(tokens)} tokens exceed the segment's {max_tokens}"
        self.eval(tokens)
        return Completion(
            tokens=tokens, text=text, stop_reason="stop" if ended else "grammar_done", n_forced=0, ended_turn=ended
        )
