"""Where an episode's tokens go: the turns it appends (a user turn, the forced-final turn with
results cut to fit) and the room each segment needs, within the smaller of the context and the
episode budget. Every tool turn is opened only when it and the final answer still fit (`room.py`
plans a segment; this measures it against the transcript)."""

from __future__ import annotations

from collections.abc import Callable

from edge_sql.agent.budget import Budget
from edge_sql.agent.grammar import (
    MAX_BYTES_PER_CHAR,
    GrammarText,
    StringBounds,
    final_grammar,
    first_call_grammar,
    next_call_grammar,
)
from edge_sql.agent.prompt import PromptTemplate
from edge_sql.agent.room import SegmentBounds, final_reserve_think_tokens
from edge_sql.agent.transcript import Piece, Transcript

SEGMENT_SLACK = 2  # tokens kept beyond a grammar's worst case (the end-of-turn token)


class EpisodeRoom:
    """The turns and the room of one episode over `transcript`, `limit` tokens in all."""

    def __init__(
        self,
        prompt: PromptTemplate,
        budget: Budget,
        transcript: Transcript,
        *,
        limit: int,
        n_ctx: int,
        think_end_token: str,
    ) -> None:
        self.prompt, self.chat, self.budget, self.transcript = prompt, prompt.chat, budget, transcript
        self.limit, self.n_ctx, self.think_end_token = limit, n_ctx, think_end_token
        self.layout = prompt.call_layout

    # ---- turns ---------------------------------------------------------------------------

    def user_turn(self, content: str) -> list[Piece]:
        chat = self.chat
        return [
            (chat.turn_separator + chat.open_turn("user"), True),
            (content, False),
            (chat.turn_end + chat.turn_separator + chat.open_turn("assistant") + chat.assistant_prefix, True),
        ]

    def forced_turn(
        self, results_body: Callable[[int | None], str], longest_output: int, last_good_sql: str | None
    ) -> list[Piece]:
        """The round's results (`results_body(cap)`: outputs over `cap` characters cut) and the
        forced-final message; long results cut to fit the room."""
        forced = self.prompt.forced_text(last_good_sql)

        def pieces(body: str) -> list[Piece]:
            return self.user_turn(body + self.prompt.result_separator + forced)

        room = self.limit - len(self.transcript) - self.final_answer_reserve()

        def fits(cap: int | None) -> bool:
            return len(self.transcript.tokenize(pieces(results_body(cap)))) <= room

        if fits(None):
            return pieces(results_body(None))
        if not fits(0):  # not even the calls fit: only the note (what final_reserve kept room for)
            return pieces(self.prompt.results_cut_note)
        low, high = 0, longest_output  # the longest cap that fits
        while low < high:
            mid = (low + high + 1) // 2
            low, high = (mid, high) if fits(mid) else (low, mid - 1)
        return pieces(results_body(low))

    # ---- grammars ------------------------------------------------------------------------

    def grammar_final(self, think_tokens: int) -> GrammarText:
        return final_grammar(
            think_end_token=self.think_end_token,
            think_end_text=self.chat.think_end,
            after_think=self.chat.after_think,
            max_think_tokens=think_tokens,
            max_sql_tokens=self.budget.max_final_sql_tokens,
        )

    def grammar_first(self, bounds: SegmentBounds) -> GrammarText:
        return first_call_grammar(
            think_end_token=self.think_end_token,
            think_end_text=self.chat.think_end,
            after_think=self.chat.after_think,
            max_think_tokens=max(1, bounds.think_tokens),
            bounds=StringBounds(bounds.sql_chars, bounds.name_chars),
            layout=self.layout,
        )

    def grammar_next(self, bounds: SegmentBounds) -> GrammarText:
        return next_call_grammar(bounds=StringBounds(bounds.sql_chars, bounds.name_chars), layout=self.layout)

    # ---- room ----------------------------------------------------------------------------

    def final_answer_reserve(self) -> int:
        """Tokens always kept for the final answer: some thinking and the SQL bound."""
        return self.grammar_final(final_reserve_think_tokens(self.budget)).max_tokens + SEGMENT_SLACK

    def final_reserve(self, last_good_sql: str | None) -> int:
        """Tokens to keep for the forced turn (results cut to nothing) and the final answer."""
        forced = self.prompt.results_cut_note + self.prompt.result_separator + self.prompt.forced_text(last_good_sql)
        return len(self.transcript.tokenize(self.user_turn(forced))) + self.final_answer_reserve()

    def first_segment_need(self, bounds: SegmentBounds) -> int:
        # the segment itself; a longer quoted last query in the forced message; the
        # end-of-turn token
        return self.grammar_first(bounds).max_tokens + MAX_BYTES_PER_CHAR * bounds.sql_chars + 2 + 1

    def next_segment_need(self, bounds: SegmentBounds) -> int:
        # the separator and call, a longer quoted last query, the end-of-turn token
        return self.grammar_next(bounds).max_tokens + MAX_BYTES_PER_CHAR * bounds.sql_chars + 2 + 1

    def available(self, last_good_sql: str | None) -> int:
        """Tokens left for the next segment once the forced turn and final answer are kept."""
        return self.limit - len(self.transcript) - self.final_reserve(last_good_sql)

    def bound_and_remedy(self) -> str:
        """Which bound the episode's room comes from and the option that raises it."""
        episode, context = self.budget.max_tokens, self.n_ctx
        if episode < context:
            return (
                f"the {episode}-token episode budget; raise --episode-tokens (Budget.max_tokens), up to "
                f"the context's {context}"
            )
        if context < episode:
            return f"the {context}-token context; use a larger context (--ctx, n_ctx), up to the episode's {episode}"
        return (
            f"the {context}-token context and episode budget; raise both --ctx and --episode-tokens "
            "(n_ctx, Budget.max_tokens)"
        )
