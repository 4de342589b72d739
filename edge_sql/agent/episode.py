"""One agent episode: the SQaLe loop over a runtime session and a toolbox.

The transcript is raw text with each completion appended as generated; only new text is
tokenized and evaluated, so every token is evaluated once. A tool turn is generated call by
call (see `grammar.py`) and each call runs as soon as it is complete, repeats included, with
no cap on calls (training capped rounds, not calls; `room.py` keeps every segment within the
token budget). The round's results go back together as the next user turn, each numbered
`i/N`, with the budget line. After `max_rounds` rounds, or `max_failed_queries` failed
`run_query` calls in a row, or when another round would not fit in the token budget, the
results turn ends with the forced-final message instead of the budget line, and the model
answers with SQL as text. `submit_sql` ends the episode at once. When the answer is empty,
broken or fails to run, the last query that ran without error is the fallback.
The turns' text and the room each segment needs are `episode_room.py`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from edge_sql.agent.budget import Budget, RoundCounter
from edge_sql.agent.episode_room import SEGMENT_SLACK, EpisodeRoom
from edge_sql.agent.events import Answered, CallRan, EpisodeEvent, EventHandler, Forced, RoundStarted, Thought, Tokens
from edge_sql.agent.grammar import GrammarText
from edge_sql.agent.parsing import TurnParseError, parse_call, parse_final_turn, split_calls, split_think
from edge_sql.agent.prompt import PromptTemplate, load_prompt
from edge_sql.agent.result import CallRecord, EpisodeResult, RoundRecord, settle_answer
from edge_sql.agent.room import final_think_tokens, plan_call_segment
from edge_sql.agent.stats import EpisodeFigures, EpisodeStats, GrammarAudit
from edge_sql.agent.transcript import Piece, Transcript
from edge_sql.errors import EdgeSqlError, QuestionError
from edge_sql.runtime import Completion, SamplingParams, Session
from edge_sql.tools import Toolbox, ToolResult

# "tokens" events come at most this often: a 135M model writes 100 tokens a second, and each
# event crosses threads (serve: an SSE event or an MCP notification)
PROGRESS_INTERVAL_S = 0.5


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
    audit: bool = False,
    share_opening: bool = False,
    tuning: str | None = None,
) -> EpisodeResult:
    """Answer `question` over `toolbox`'s database. Resets `session` first (a new episode).

    `audit=True` is a measurement (slower): stats count the grammar steps where the model's
    own top token was not allowed (`grammar_overruled` of `grammar_steps_audited`).
    `share_opening=True` (the episodes of a vote, starting together on sessions of one cache):
    the opening (system prompt and question) is evaluated by one of them and restored by the
    others (`Session.shared_prefix`); nothing else changes.
    `tuning` (how the session's settings were chosen: the Agent's): the stats then also carry it and
    the session's settings (`stats.llama_settings`).
    Raises EdgeSqlError for an empty question or a context too small for the prompt.
    """
    episode = _Episode(session, toolbox, prompt or load_prompt(), budget, params, should_stop, on_event)
    episode.audit = audit
    episode.share_opening = share_opening
    episode.tuning = tuning
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
        self.transcript = Transcript(session)
        self.room = EpisodeRoom(
            prompt,
            budget,
            self.transcript,
            limit=self.limit,
            n_ctx=session.n_ctx,
            think_end_token=session.grammar_token(self.chat.think_end),
        )
        self.counter = RoundCounter(budget)
        self.rounds: list[RoundRecord] = []
        self._raw_calls: list[str] = []  # this round's calls as the model wrote them
        self._answer_run: tuple[str, ToolResult] | None = None  # submit_sql's run
        self.tools_s = 0.0
        self.audit = False
        self.share_opening = False
        self.tuning: str | None = None
        self.audited = self.overruled = 0
        self._progress_at = float("-inf")  # when the last "tokens" event went out
        self._unsent: list[str] = []  # text written since then, in this round

    # ---- the loop ------------------------------------------------------------------------

    def run(self, question: str, evidence: str | None) -> EpisodeResult:
        if not question or not question.strip():
            raise QuestionError("empty question")
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
                    self._emit(Forced(self.counter.rounds, force_reason))
                    answer, error = self._final_turn()
                    stop = "final_answer"
                    break
        except _Cancelled:
            stop, error = "cancelled", "stopped by the user"
        except _BrokenTurn as exc:
            stop, error = "error", f"a turn did not follow the protocol: {exc}"
        result = self._result(question, evidence, answer, stop, force_reason, error, started)
        self._emit(Answered(self.counter.rounds, result.sql))
        return result

    def _open(self, question: str, evidence: str | None) -> None:
        shared, own = self.prompt.opening(question, evidence, max_rounds=self.budget.max_rounds)
        pieces: list[Piece] = shared + own
        needed = len(self.transcript.tokenize(pieces)) + self.room.final_reserve(None)
        if plan_call_segment(self.limit - needed, self.budget, self.room.first_segment_need, think=True) is None:
            raise EdgeSqlError(
                f"the prompt and question need about {needed} tokens and leave no room for a tool "
                f"turn in {self.room.bound_and_remedy()}"
            )
        opening = self.transcript.tokenize(pieces) if self.share_opening else None
        self.session.shared_prefix(self.transcript.tokenize(shared), opening=opening)  # same for every question
        self.transcript.append(pieces)

    def _tool_round(self) -> str | None:
        """Generate one tool turn call by call, running each call. Returns submitted SQL or None."""
        record = RoundRecord(index=self.counter.rounds + 1, think="")
        self.rounds.append(record)
        self._raw_calls = []
        self._unsent = []
        self._emit(RoundStarted(record.index))
        bounds = plan_call_segment(
            self.room.available(self.counter.last_good_sql), self.budget, self.room.first_segment_need, think=True
        )
        assert bounds is not None, "a tool turn is opened only when it fits"
        completion = self._generate(self.room.grammar_first(bounds), stop_tokens=())
        try:
            record.think, call_text = split_think(completion.text, self.chat.think_end, self.chat.after_think)
        except TurnParseError as exc:
            raise _BrokenTurn(str(exc)) from None
        self._emit(Thought(record.index, record.think))
        submitted = self._run_call(record, call_text)
        cap = self.budget.max_calls_per_turn
        while submitted is None:
            bounds = plan_call_segment(
                self.room.available(self.counter.last_good_sql), self.budget, self.room.next_segment_need, think=False
            )
            if (cap is not None and len(record.calls) >= cap) or bounds is None:
                self.transcript.append_tokens([self.end_id])  # no room for another call: close the turn
                break
            completion = self._generate(self.room.grammar_next(bounds), stop_tokens=(self.end_id,))
            if completion.ended_turn and not completion.text.strip():
                break  # the model ended its turn
            if completion.ended_turn or "\n" not in completion.text:
                raise _BrokenTurn(f"expected the end of the turn or another call, got {completion.text!r}")
            submitted = self._run_call(record, completion.text)
        return submitted

    def _run_call(self, record: RoundRecord, text: str) -> str | None:
        """Parse and run one call (`text`: the call, maybe with whitespace around it); returns
        the SQL when it was submit_sql."""
        try:
            raw_calls = split_calls(text)
            if len(raw_calls) != 1:
                raise TurnParseError(f"expected one call, got {len(raw_calls)}")
            call = parse_call(raw_calls[0])
        except TurnParseError as exc:
            raise _BrokenTurn(str(exc)) from None
        tick = time.perf_counter()
        if call.tool == "submit_sql":
            sql = call.args["sql"]
            tool_result = self.toolbox.answer(sql, max_rows=self.budget.max_result_rows)
            self._answer_run = (sql, tool_result)
        else:
            tool_result = self.toolbox.call(call.tool, call.args)
            if call.tool == "run_query":
                self.counter.record_query(call.args["sql"], tool_result.ok)
        ok, output = tool_result.ok, tool_result.output
        self.tools_s += time.perf_counter() - tick
        entry = CallRecord(tool=call.tool, args=call.args, ok=ok, output=output)
        record.calls.append(entry)
        self._raw_calls.append(call.raw)  # echoed in the results as the model wrote it
        self._emit(CallRan(record.index, entry))
        return call.args["sql"] if call.tool == "submit_sql" else None

    def _results_turn(self) -> str | None:
        """Append the round's results; returns the force reason when the answer is now due."""
        self.counter.end_round()
        reason = self.counter.force_reason
        if reason is None:
            budget_line = self.prompt.budget_text(self.counter.turns_left)
            pieces = self.room.user_turn(self._results_body(None) + self.prompt.result_separator + budget_line)
            need = len(self.transcript) + len(self.transcript.tokenize(pieces))
            room = self.limit - need - self.room.final_reserve(self.counter.last_good_sql)
            if plan_call_segment(room, self.budget, self.room.first_segment_need, think=True) is not None:
                self.transcript.append(pieces)
                return None
            reason = "context"
        longest = max(len(call.output) for call in self.rounds[-1].calls)
        self.transcript.append(self.room.forced_turn(self._results_body, longest, self.counter.last_good_sql))
        return reason

    def _results_body(self, cap: int | None) -> str:
        """This round's calls with their results; outputs over `cap` characters are cut."""
        texts = []
        calls = self.rounds[-1].calls
        for index, (raw, call) in enumerate(zip(self._raw_calls, calls), start=1):
            output = call.output
            if cap is not None and len(output) > cap:
                output = output[:cap] + "\n" + self.prompt.results_cut_note
            texts.append(self.prompt.result_text(raw, output, i=index, n=len(calls)))
        return self.prompt.result_separator.join(texts)

    def _final_turn(self) -> tuple[str | None, str | None]:
        """Generate the forced final answer; returns (the model's SQL or None, parse error)."""
        sql_tokens = self.budget.max_final_sql_tokens
        available = self.limit - len(self.transcript) - SEGMENT_SLACK
        think = final_think_tokens(available, self.budget, sql_tokens)
        self._unsent = []
        completion = self._generate(self.room.grammar_final(think), stop_tokens=(self.end_id,))
        try:
            return parse_final_turn(
                completion.text, think_end=self.chat.think_end, after_think=self.chat.after_think
            ).sql, None
        except TurnParseError as exc:
            return None, f"the final answer was not usable: {exc}"

    # ---- generation and tools --------------------------------------------------------------

    def _generate(self, grammar: GrammarText, *, stop_tokens: tuple[int, ...]) -> Completion:
        if self.should_stop is not None and self.should_stop():
            raise _Cancelled
        completion = self.session.generate(
            grammar=grammar.lark,
            params=self.params,
            max_tokens=grammar.max_tokens,
            stop_tokens=stop_tokens,
            should_stop=self.should_stop,
            audit=self.audit,
            on_text=self._progress() if self.on_event is not None else None,
        )
        self.audited += completion.n_audited
        self.overruled += completion.n_overruled
        self.transcript.add_completion(completion)
        if completion.stop_reason == "cancelled":
            raise _Cancelled
        if completion.stop_reason == "context_full":
            raise _BrokenTurn(
                f"the turn reached the end of the {self.session.n_ctx}-token context; bound thinking "
                "(--think-tokens, Budget.max_think_tokens) or use a larger context (--ctx, n_ctx)"
            )
        if completion.stop_reason == "max_tokens":
            raise _BrokenTurn("generation hit max_tokens inside the grammar")
        return completion

    def _progress(self) -> Callable[[str], None]:
        """What sees each piece of text as the next segment is generated: a "tokens" event with
        the episode's generated tokens and rate, at most every PROGRESS_INTERVAL_S (the first at
        once), so a long generation shows that it is alive."""
        session = self.session
        start, before = session.n_past, session.timings.generated_tokens
        generating_before, started = session.timings.generate_s, time.perf_counter()

        def on_text(text: str) -> None:
            self._unsent.append(text)
            now = time.perf_counter()
            if now - self._progress_at < PROGRESS_INTERVAL_S:
                return
            self._progress_at = now
            tokens = before + session.n_past - start
            seconds = generating_before + now - started
            text, self._unsent = "".join(self._unsent), []
            self._emit(Tokens(self.rounds[-1].index, text, tokens, round(tokens / seconds, 2) if seconds > 0 else 0.0))

        return on_text

    def _emit(self, event: EpisodeEvent) -> None:
        if self.on_event is not None:
            self.on_event(event)

    # ---- the result ----------------------------------------------------------------------

    def _result(
        self,
        question: str,
        evidence: str | None,
        answer: str | None,
        stop: str,
        force_reason: str | None,
        error: str | None,
        started: float,
    ) -> EpisodeResult:
        """The episode's result, its answer (or the fallback) run on the database, its stats
        complete (the figures measured up to now, the session's settings and tuning)."""
        cancelled = stop == "cancelled"
        answer_run = None
        if answer:
            ran = self._answer_run
            answer_run = ran[1] if ran is not None and ran[0] == answer else self._run_answer(answer)
        fallback_run = None
        if (answer_run is None or not answer_run.ok) and self.counter.last_good_sql is not None and not cancelled:
            fallback_run = self._run_answer(self.counter.last_good_sql)
        settled = settle_answer(answer, answer_run, self.counter.last_good_sql, fallback_run, error=error)
        result = settled.result
        return EpisodeResult(
            question=question,
            evidence=evidence,
            sql=settled.sql,
            columns=list(result.columns) if result else [],
            rows=[list(row) for row in result.rows] if result else [],
            truncated=result.truncated if result else False,
            forced=force_reason is not None,
            fallback=settled.fallback,
            answer=answer,
            rounds=self.rounds,
            stats=EpisodeStats(
                figures=self._figures(started),
                llama_settings=self.session.info.settings if self.tuning is not None else None,
                tuning=self.tuning,
            ),
            transcript=self.transcript.text,
            stop=stop,
            error=error if cancelled else settled.error,
            force_reason=force_reason,
            prompt_version=self.prompt.version,
            generated_spans=self.transcript.generated_spans,
        )

    def _run_answer(self, sql: str) -> ToolResult:
        return self.toolbox.answer(sql, max_rows=self.budget.max_result_rows)

    def _figures(self, started: float) -> EpisodeFigures:
        return EpisodeFigures.of(
            self.session.timings,
            transcript_tokens=len(self.transcript),
            context_tokens=self.session.n_past,
            token_budget=self.limit,
            rounds=len(self.rounds),
            calls=sum(len(r.calls) for r in self.rounds),
            wall_s=round(time.perf_counter() - started, 4),
            tools_s=round(self.tools_s, 4),
            speculate=self.session.info.speculate,
            audit=GrammarAudit(self.audited, self.overruled) if self.audit else None,
        )
