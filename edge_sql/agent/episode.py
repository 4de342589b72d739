"""One agent episode: the SQaLe loop over a runtime session and a toolbox.

The transcript is raw text with each completion appended as generated; only new text is
tokenized and evaluated, so every token is evaluated once. A tool turn is generated call by
call (see `grammar.py`) and each call runs as soon as it is complete; the round's results go
back together as the next user turn with the budget line. After `max_rounds` rounds, or
`max_failed_queries` failed `run_query` calls in a row, or when another round would not
fit in the token budget, the results turn ends with the forced-final message and the model
answers with one SQL statement. `submit_sql` ends the episode at once. When the answer is
empty, broken or fails to run, the last query that ran without error is the fallback.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from edge_sql.agent.budget import Budget, RoundCounter
from edge_sql.agent.grammar import (
    CALL_SEPARATOR,
    MAX_BYTES_PER_CHAR,
    GrammarText,
    StringBounds,
    final_grammar,
    first_call_grammar,
    next_call_grammar,
)
from edge_sql.agent.parsing import TurnParseError, parse_call, parse_final_turn, split_think
from edge_sql.agent.prompt import PromptTemplate, load_prompt
from edge_sql.agent.result import CallRecord, EpisodeResult, RoundRecord
from edge_sql.agent.transcript import Piece, Transcript
from edge_sql.errors import EdgeSqlError
from edge_sql.runtime import Completion, SamplingParams, Session
from edge_sql.tools import QueryError, QueryResult, Toolbox, format_result


@dataclass(frozen=True)
class EpisodeEvent:
    """Progress of an episode, for streaming: a round starts, a call ran, the answer is forced."""

    kind: str                      # "round", "call", "forced", "answer"
    round: int
    call: CallRecord | None = None
    reason: str | None = None      # "forced": max_rounds, failed_queries or context
    sql: str | None = None         # "answer": the model's answer


EventHandler = Callable[[EpisodeEvent], None]


class _Cancelled(Exception):
    """should_stop() asked to end the episode."""


class _BrokenTurn(Exception):
    """A turn that does not parse (the grammar should make this impossible)."""


def run_episode(
    session: Session,
    toolbox: Toolbox,
    question: str,
    *,
    evidence: str | None = None,
    params: SamplingParams = SamplingParams(),
    prompt: PromptTemplate | None = None,
    budget: Budget = Budget(),
    should_stop: Callable[[], bool] | None = None,
    on_event: EventHandler | None = None,
) -> EpisodeResult:
    """Answer `question` over `toolbox`'s database. Resets `session` first (a new episode).

    Raises EdgeSqlError for an empty question or a context too small for the prompt.
    """
    episode = _Episode(session, toolbox, prompt or load_prompt(), budget, params, should_stop, on_event)
    return episode.run(question, evidence)


class _Episode:
    def __init__(
        self,
        session: Session,
        toolbox: Toolbox,
        prompt: PromptTemplate,
        budget: Budget,
        params: SamplingParams,
        should_stop: Callable[[], bool] | None,
        on_event: EventHandler | None,
    ) -> None:
        self.session, self.toolbox, self.prompt, self.budget, self.params = session, toolbox, prompt, budget, params
        self.chat = prompt.chat
        self.should_stop = should_stop
        self.on_event = on_event
        self.limit = min(budget.max_tokens, session.n_ctx)
        end_ids = session.tokenize(self.chat.turn_end, special=True)
        if len(end_ids) != 1:
            raise EdgeSqlError(f"chat.turn_end {self.chat.turn_end!r} is not a single token of this model")
        self.end_id = end_ids[0]
        self.think_end_token = session.grammar_token(self.chat.think_end)
        self.final = final_grammar(
            think_end_token=self.think_end_token, think_end_text=self.chat.think_end,
            after_think=self.chat.after_think, max_think_tokens=budget.max_final_think_tokens,
            max_sql_tokens=budget.max_final_sql_tokens,
        )
        self.transcript = Transcript(session)
        self.counter = RoundCounter(budget)
        self.rounds: list[RoundRecord] = []
        self._raw_calls: list[str] = []  # this round's calls as the model wrote them
        self._answer_run: tuple[str, QueryResult | None, str] | None = None  # submit_sql's run
        self.tools_s = 0.0

    # ---- the loop ------------------------------------------------------------------------

    def run(self, question: str, evidence: str | None) -> EpisodeResult:
        if not question or not question.strip():
            raise EdgeSqlError("empty question")
        started = time.perf_counter()
        self.session.reset()
        self.session.seed(self.params.seed)
        self._open(question, evidence)
        answer: str | None = None
        stop, force_reason, error = "error", None, None
        try:
            while True:
                submitted = self._tool_round()
                if submitted is not None:
                    answer, stop = submitted, "submitted"
                    break
                force_reason = self._results_turn()
                if force_reason is not None:
                    self._emit(EpisodeEvent("forced", self.counter.rounds, reason=force_reason))
                    answer, error = self._final_turn()
                    stop = "final_answer"
                    break
        except _Cancelled:
            stop, error = "cancelled", "stopped by the user"
        except _BrokenTurn as exc:
            stop, error = "error", f"a turn did not follow the protocol: {exc}"
        result = self._result(question, evidence, answer, stop, force_reason, error)
        result.stats.update(self._stats(started))
        self._emit(EpisodeEvent("answer", self.counter.rounds, sql=result.sql))
        return result

    def _open(self, question: str, evidence: str | None) -> None:
        chat = self.chat
        pieces: list[Piece] = [
            (chat.open_turn("system"), True),
            (self.prompt.system_text(max_rounds=self.budget.max_rounds), True),
            (chat.turn_end + chat.turn_separator + chat.open_turn("user"), True),
            (self.prompt.user_text(question, evidence), False),
            (chat.turn_end + chat.turn_separator + chat.open_turn("assistant") + chat.assistant_prefix, True),
        ]
        needed = len(self.transcript.tokenize(pieces)) + self._final_reserve(None)
        if needed + self._first_segment_need(*self._min_bounds()) > self.limit:
            raise EdgeSqlError(
                f"the prompt and question need about {needed} tokens and leave no room for a tool "
                f"turn in a {self.limit}-token context; use a larger context (--ctx)"
            )
        self.session.shared_prefix(self.transcript.tokenize(pieces[:3]))  # same for every question: saved once
        self.transcript.append(pieces)

    def _tool_round(self) -> str | None:
        """Generate one tool turn call by call, running each call. Returns submitted SQL or None."""
        record = RoundRecord(index=self.counter.rounds + 1, think="")
        self.rounds.append(record)
        self._raw_calls = []
        self._emit(EpisodeEvent("round", record.index))
        plan = self._plan_first_segment()
        assert plan is not None, "a tool turn is opened only when it fits"
        completion = self._generate(plan, stop_tokens=())
        try:
            record.think, line = split_think(completion.text, self.chat.think_end, self.chat.after_think)
        except TurnParseError as exc:
            raise _BrokenTurn(str(exc)) from None
        submitted = self._run_call(record, line)
        while submitted is None:
            if len(record.calls) >= self.budget.max_calls_per_turn or (plan := self._plan_next_segment()) is None:
                self.transcript.append_tokens([self.end_id])  # no room for another call: close the turn
                break
            completion = self._generate(plan, stop_tokens=(self.end_id,))
            if completion.ended_turn and not completion.text:
                break  # the model ended its turn
            if completion.ended_turn or not completion.text.startswith(CALL_SEPARATOR):
                raise _BrokenTurn(f"expected the end of the turn or another call, got {completion.text!r}")
            submitted = self._run_call(record, completion.text[len(CALL_SEPARATOR):])
        return submitted

    def _run_call(self, record: RoundRecord, line: str) -> str | None:
        """Parse and run one call; returns the SQL when it was submit_sql."""
        try:
            call = parse_call(line)
        except TurnParseError as exc:
            raise _BrokenTurn(str(exc)) from None
        tick = time.perf_counter()
        if call.tool == "submit_sql":
            sql = call.args["sql"]
            result, message = self._execute(sql)
            self._answer_run = (sql, result, message)
            ok = result is not None
            output = message if result is None else self._preview(result)
        else:
            tool_result = self.toolbox.call(call.tool, call.args)
            ok, output = tool_result.ok, tool_result.output
            if call.tool == "run_query":
                self.counter.record_query(call.args["sql"], ok)
        self.tools_s += time.perf_counter() - tick
        entry = CallRecord(tool=call.tool, args=call.args, ok=ok, output=output)
        record.calls.append(entry)
        self._raw_calls.append(call.raw)
        self._emit(EpisodeEvent("call", record.index, call=entry))
        return call.args["sql"] if call.tool == "submit_sql" else None

    def _results_turn(self) -> str | None:
        """Append the round's results; returns the force reason when the answer is now due."""
        self.counter.end_round()
        reason = self.counter.force_reason
        if reason is None:
            budget_line = self.prompt.budget_text(self.counter.turns_left)
            pieces = self._user_turn(self._results_body(None) + self.prompt.result_separator + budget_line)
            need = len(self.transcript) + len(self.transcript.tokenize(pieces))
            if need + self._first_segment_need(*self._min_bounds()) + self._final_reserve(self.counter.last_good_sql) <= self.limit:
                self.transcript.append(pieces)
                return None
            reason = "context"
        self.transcript.append(self._forced_turn())
        return reason

    def _results_body(self, cap: int | None) -> str:
        """This round's calls with their results; outputs over `cap` characters are cut."""
        texts = []
        for raw, call in zip(self._raw_calls, self.rounds[-1].calls):
            output = call.output
            if cap is not None and len(output) > cap:
                output = output[:cap] + "\n" + self.prompt.results_cut_note
            texts.append(self.prompt.result_text(raw, output))
        return self.prompt.result_separator.join(texts)

    def _final_turn(self) -> tuple[str | None, str | None]:
        """Generate the forced final answer; returns (the model's SQL or None, parse error)."""
        completion = self._generate(self.final, stop_tokens=(self.end_id,))
        try:
            return parse_final_turn(completion.text, think_end=self.chat.think_end, after_think=self.chat.after_think).sql, None
        except TurnParseError as exc:
            return None, f"the final answer was not usable: {exc}"

    # ---- turns and room ------------------------------------------------------------------

    def _user_turn(self, content: str) -> list[Piece]:
        chat = self.chat
        return [
            (chat.turn_separator + chat.open_turn("user"), True),
            (content, False),
            (chat.turn_end + chat.turn_separator + chat.open_turn("assistant") + chat.assistant_prefix, True),
        ]

    def _forced_turn(self) -> list[Piece]:
        """The round's results and the forced-final message; long results cut to fit the room."""
        forced = self.prompt.forced_text(self.counter.last_good_sql)

        def pieces(body: str) -> list[Piece]:
            return self._user_turn(body + self.prompt.result_separator + forced)

        room = self.limit - len(self.transcript) - self.final.max_tokens

        def fits(cap: int | None) -> bool:
            return len(self.transcript.tokenize(pieces(self._results_body(cap)))) <= room

        if fits(None):
            return pieces(self._results_body(None))
        if not fits(0):  # not even the calls fit: only the note (what _final_reserve kept room for)
            return pieces(self.prompt.results_cut_note)
        low, high = 0, max(len(call.output) for call in self.rounds[-1].calls)  # the longest cap that fits
        while low < high:
            mid = (low + high + 1) // 2
            low, high = (mid, high) if fits(mid) else (low, mid - 1)
        return pieces(self._results_body(low))

    def _final_reserve(self, last_good_sql: str | None) -> int:
        """Tokens to keep for the forced turn (results cut to nothing) and the final answer."""
        forced = self.prompt.results_cut_note + self.prompt.result_separator + self.prompt.forced_text(last_good_sql)
        return len(self.transcript.tokenize(self._user_turn(forced))) + self.final.max_tokens

    def _min_bounds(self) -> tuple[int, int, int]:
        b = self.budget
        return min(b.min_think_tokens, b.max_think_tokens), min(b.min_string_chars, b.max_sql_chars), min(
            b.min_string_chars, b.max_name_chars)

    def _grammar_first(self, think: int, sql: int, name: int) -> GrammarText:
        return first_call_grammar(
            think_end_token=self.think_end_token, think_end_text=self.chat.think_end,
            after_think=self.chat.after_think, max_think_tokens=think, bounds=StringBounds(sql, name),
        )

    def _first_segment_need(self, think: int, sql: int, name: int) -> int:
        # the segment itself; a longer quoted last query in the forced message; the
        # end-of-turn token
        return self._grammar_first(think, sql, name).max_tokens + MAX_BYTES_PER_CHAR * sql + 2 + 1

    def _next_segment_need(self, sql: int, name: int) -> int:
        # the separator and call, a longer quoted last query, the end-of-turn token
        return next_call_grammar(bounds=StringBounds(sql, name)).max_tokens + MAX_BYTES_PER_CHAR * sql + 2 + 1

    def _available(self) -> int:
        return self.limit - len(self.transcript) - self._final_reserve(self.counter.last_good_sql)

    def _plan_first_segment(self) -> GrammarText | None:
        b = self.budget
        think, sql, name = b.max_think_tokens, b.max_sql_chars, b.max_name_chars
        min_think, min_sql, min_name = self._min_bounds()
        available = self._available()
        while self._first_segment_need(think, sql, name) > available:
            if sql > min_sql:
                sql = max(min_sql, sql // 2)
            elif think > min_think:
                think = max(min_think, think // 2)
            elif name > min_name:
                name = max(min_name, name // 2)
            else:
                return None
        return self._grammar_first(think, sql, name)

    def _plan_next_segment(self) -> GrammarText | None:
        """The grammar of one more call, or None when a worst-case call would not fit."""
        b = self.budget
        sql, name = b.max_sql_chars, b.max_name_chars
        _, min_sql, min_name = self._min_bounds()
        available = self._available()
        while self._next_segment_need(sql, name) > available:
            if sql > min_sql:
                sql = max(min_sql, sql // 2)
            elif name > min_name:
                name = max(min_name, name // 2)
            else:
                return None
        return next_call_grammar(bounds=StringBounds(sql, name))

    # ---- generation and tools --------------------------------------------------------------

    def _generate(self, grammar: GrammarText, *, stop_tokens: tuple[int, ...]) -> Completion:
        if self.should_stop is not None and self.should_stop():
            raise _Cancelled
        completion = self.session.generate(
            grammar=grammar.lark, params=self.params, max_tokens=grammar.max_tokens,
            stop_tokens=stop_tokens, should_stop=self.should_stop,
        )
        self.transcript.add_completion(completion)
        if completion.stop_reason == "cancelled":
            raise _Cancelled
        if completion.stop_reason in ("max_tokens", "context_full"):
            raise _BrokenTurn(f"generation hit {completion.stop_reason} inside the grammar")
        return completion

    def _execute(self, sql: str) -> tuple[QueryResult | None, str]:
        """Run an answer for its rows; (result, "") or (None, the error text)."""
        try:
            return self.toolbox.db.execute(sql, max_rows=self.budget.max_result_rows), ""
        except QueryError as exc:
            return None, f"Error: {exc}"

    def _preview(self, result: QueryResult) -> str:
        rows = self.toolbox.preview_rows
        return format_result(result.columns, result.rows[:rows], max_rows=rows,
                             more_rows=result.truncated or len(result.rows) > rows)

    def _emit(self, event: EpisodeEvent) -> None:
        if self.on_event is not None:
            self.on_event(event)

    # ---- the result ----------------------------------------------------------------------

    def _result(self, question: str, evidence: str | None, answer: str | None, stop: str,
                force_reason: str | None, error: str | None) -> EpisodeResult:
        sql, result, fallback = None, None, False
        if answer:
            if self._answer_run is not None and self._answer_run[0] == answer:
                _, result, message = self._answer_run
            else:
                result, message = self._execute(answer)
            if result is not None:
                sql = answer
            else:
                error = f"the answer failed to run: {message.removeprefix('Error: ')}"
        if result is None and self.counter.last_good_sql is not None and stop != "cancelled":
            fallback_result, _ = self._execute(self.counter.last_good_sql)
            if fallback_result is not None:
                sql, result, fallback, error = self.counter.last_good_sql, fallback_result, True, None
        if result is None and stop != "cancelled" and error is None:
            error = "no answer: the model gave none and no query ran without error"
        return EpisodeResult(
            question=question, evidence=evidence, sql=sql,
            columns=list(result.columns) if result else [],
            rows=[list(row) for row in result.rows] if result else [],
            truncated=result.truncated if result else False,
            forced=force_reason is not None, fallback=fallback, answer=answer,
            rounds=self.rounds, stats={}, transcript=self.transcript.text, stop=stop,
            error=error, force_reason=force_reason, prompt_version=self.prompt.version,
        )

    def _stats(self, started: float) -> dict[str, float | int]:
        timings = self.session.timings
        return {
            "prompt_tokens_evaluated": self.session.prompt_tokens_evaluated,
            "prefix_tokens_restored": self.session.prefix_tokens_restored,
            "generated_tokens": self.session.generated_tokens,
            "forced_tokens": timings.forced_tokens,
            "transcript_tokens": len(self.transcript),
            "context_tokens": self.session.n_past,
            "token_budget": self.limit,
            "rounds": len(self.rounds),
            "calls": sum(len(r.calls) for r in self.rounds),
            "wall_s": round(time.perf_counter() - started, 4),
            "prefill_s": round(timings.prompt_s, 4),
            "prefill_tok_s": round(timings.prompt_tok_s, 2),
            "generate_s": round(timings.generate_s, 4),
            "decode_tok_s": round(timings.decode_tok_s, 2),
            "tools_s": round(self.tools_s, 4),
        }
