"""One llama.cpp model and context on the low-level bindings: eval each token once, sample.

Why not `llama_cpp.Llama`: it re-evaluates the whole prompt of hybrid models (whose recurrent
state cannot be rolled back to a common prefix) on every call, checks grammars against the
whole vocabulary per token, and allocates an n_batch x n_vocab score buffer. Here the context
is append-only:
`eval` adds prompt tokens, `generate` adds sampled tokens, and every token is decoded
exactly once. The last sampled token of a completion is decoded lazily, together with the
next `eval` batch, so no decode call is spent on it alone.

The session is built in layers, one job each: `TokenText` (token_text.py) passes tokens and
text through to the vocabulary, `ContextState` (context_state.py) keeps the append-only
bookkeeping (tokens, how many are decoded, the next logits), evaluates prompts and saves and
restores states, `GeneratingContext` (generation.py) is the generate loop; this module loads the
parts and lets them go. The parts: `LlamaContext` (context.py) the llama.cpp context,
`Vocabulary` (vocabulary.py) tokens and text, `GrammarCache` (constrained.py) compiled grammars,
`PrefixCache` (prefix_state.py) saved prompt states, `Verifier` (speculative.py) speculation.

A Session is not thread-safe: use it from one thread at a time.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Unpack

import llama_cpp

from edge_sql.errors import ClosedError
from edge_sql.runtime.generation import GeneratingContext
from edge_sql.runtime.llama.context import DecodeContext
from edge_sql.runtime.llama.loading import OpenedModel, open_model
from edge_sql.runtime.llama.shared_models import release, share
from edge_sql.runtime.options import SessionOptions, SessionSettings
from edge_sql.runtime.records import SessionInfo
from edge_sql.runtime.speculation.speculative import Drafter, Speculator, Verifier, make_verifier
from edge_sql.runtime.state.prefix_state import PrefixCache
from edge_sql.runtime.text.constrained import GrammarCache
from edge_sql.runtime.text.vocabulary import Vocabulary


class Session(GeneratingContext):
    """A loaded model with one append-only context.

    Settings come as `options` (a `SessionOptions`, whose docstring says what each does), with
    any of its fields given as keywords on top (`Session(path, n_ctx=2048, n_threads=1)`).
    `options` (resolved) and `info` say what was chosen.

    Shared prefix: after `shared_prefix(tokens)`, the next `eval` on an empty context that
    starts with `tokens` restores their saved state (attention KV and recurrent state) from
    `prefix_cache` instead of evaluating them, or evaluates them alone and saves the state
    there. Without a cache the session keeps the last prefix in memory; a `PrefixCache` with
    a folder also keeps states on disk for later processes.
    """

    def __init__(
        self,
        model: str | Path | OpenedModel,
        options: SessionOptions | None = None,
        *,
        prefix_cache: PrefixCache | None = None,
        **settings: Unpack[SessionSettings],
    ) -> None:
        """`model`: a GGUF path (loaded with `options` and `settings`), or a model and context
        opened elsewhere, which the session then owns (`on_context`)."""
        opened = (
            model
            if isinstance(model, OpenedModel)
            else open_model(model, replace(options or SessionOptions(), **settings))
        )
        self._loaded, self._context, self.info = opened
        self.options = self._context.options  # resolved
        self.vocab = Vocabulary(self._loaded)  # reads the loaded model: cannot fail
        self._grammars = GrammarCache(self.lltokenizer, self.vocab.n_vocab)  # compiles on first use
        self._verifier: Verifier | None = None
        try:  # from here on what is made may fail: what was made before is freed by `close()`
            self._verifier = make_verifier(self.options, self._context)  # its MTP context reads this one's
            if self._verifier is not None:
                self.info.buffers.update(self._verifier.buffers)  # the MTP context's own KV and compute
            self._prefix_cache = prefix_cache if prefix_cache is not None else PrefixCache()
            self._pending_prefix: list[int] | None = None
            self._pending_opening: list[int] | None = None
            self.reset()
        except BaseException:
            self.close()
            raise

    @classmethod
    def on_context(
        cls, context: DecodeContext, info: SessionInfo, *, prefix_cache: PrefixCache | None = None
    ) -> Session:
        """A session on a context made elsewhere: one sequence of a batched context
        (runtime/batching/sequences.py). It holds a reference to the model, as every session does."""
        return cls(OpenedModel(share(context.loaded), context, info), prefix_cache=prefix_cache)

    @property
    def context(self) -> DecodeContext:
        """The session's llama.cpp context, for what runs beside it (an `MTPDrafter`). The
        session owns it: close what reads it before `close()`."""
        if self._context is None:
            raise ClosedError("the session is closed: its context has been freed")
        return self._context

    @property
    def llama_model(self) -> llama_cpp.llama_model_p:
        """The loaded llama.cpp model, to open another context on the same weights (as
        `teacher_forcing` does). Sessions of the same file share it (runtime/llama/shared_models.py):
        never free it, and free any context made from it before `close()`. Raises ClosedError
        once the session is closed."""
        if self._loaded is None:
            raise ClosedError("the session is closed: its model has been freed")
        return self._loaded.model

    @property
    def speculator(self) -> Speculator | None:
        """Who drafts for `generate` (None: speculation is off for this session)."""
        return self._verifier.speculator if self._verifier is not None else None

    def use_drafters(
        self, drafters: list[Drafter], *, auto: bool = False, max_k: int | None = None, adaptive: bool = True
    ) -> None:
        """Draft with `drafters` (priority order) from now on, at most `max_k` tokens a batch
        (default and limit: the session's `draft_max`); the session must have been loaded with
        speculation on (its context is sized for verify batches then)."""
        draft_max = self.options.draft_max
        if not draft_max:
            raise RuntimeError("speculation is off for this session: load it with speculate='lookup' or 'auto'")
        max_k = draft_max if max_k is None else max_k
        if not 1 <= max_k <= draft_max:
            raise ValueError(f"max_k must be in 1..{draft_max}")
        speculator = Speculator(drafters, max_k=max_k, auto=auto, adaptive=adaptive)
        if self._verifier is None:
            self._verifier = Verifier(self._context, speculator, draft_max)
        else:
            self._verifier.speculator = speculator

    # ---- lifetime ------------------------------------------------------------------------

    def close(self) -> None:
        """Free the context and release the model; the session is unusable afterwards. Safe to
        call twice: each part is let go of once, in the order they depend on each other."""
        self._grammars.clear()  # they point into the model's vocabulary
        verifier, self._verifier = self._verifier, None
        if verifier is not None:  # its MTP context reads this one's: freed first
            verifier.close()
        context, self._context = self._context, None  # type: ignore[assignment]  # closed: `context` says so
        if context is not None:
            context.close()
        loaded, self._loaded = self._loaded, None  # type: ignore[assignment]  # closed: `llama_model` says so
        if loaded is not None:
            release(loaded)  # freed when no session uses it (or kept idle)
