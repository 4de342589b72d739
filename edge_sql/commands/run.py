"""`edge-sql run`: ask questions about a SQLite database and watch the model explore it."""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import click

from edge_sql.commands.files import DB_HELP, load_for_db
from edge_sql.commands.options import VOTE, db_option, episode_options, greedy_with
from edge_sql.commands.settings import reads_settings
from edge_sql.errors import EdgeSqlError
from edge_sql.interrupts import Terminated

if TYPE_CHECKING:  # the CLI imports the runtime only when a command runs
    from types import FrameType

    from edge_sql.agent.budget import Budget
    from edge_sql.agent.events import EpisodeEvent
    from edge_sql.agent.result import EpisodeResult
    from edge_sql.api import Agent
    from edge_sql.api.agent_settings import AgentSettings
    from edge_sql.knowledge import FollowUp
    from edge_sql.knowledge.answers import Stale
    from edge_sql.tools import ReadOnlyDatabase

EXIT_NO_ANSWER = 3
EXIT_NOT_SURE = 4  # --abstain-below: the vote agreed too little
EXIT_INTERRUPTED = 130


@dataclass(frozen=True)
class RunOptions:
    """`edge-sql run`'s options, as click parsed them: the Agent's settings (`AgentSettings`, its
    budget included; a vote of "auto" is resolved by the Agent's plan when the model loads) and
    `run`'s own."""

    db_path: Path
    settings: AgentSettings
    question: str | None
    evidence: str | None
    as_json: bool
    trace: bool
    abstain_below: float | None = None  # with a vote: "not sure" below this share of agreeing episodes
    fresh: bool = False  # ask the model even when the question has a verified answer
    chart: Path | None = None  # --chart: the answer's chart written here (.svg or .png)

    @property
    def budget(self) -> Budget:
        assert self.settings.budget is not None  # `command` sets it
        return self.settings.budget


@contextmanager
def _ctrl_c_stops(stop: threading.Event, interrupt_db: Callable[[], None]) -> Iterator[None]:
    """While inside, Ctrl-C sets `stop` (the episode ends cleanly) and interrupts SQLite."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()
        interrupt_db()

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _event_line(event: EpisodeEvent) -> str | None:
    """The live view's line for an episode event (None: the event prints nothing)."""
    from edge_sql.agent.display import call_line
    from edge_sql.agent.events import CallRan, Forced, RoundStarted

    match event:
        case RoundStarted(round=index):
            return f"round {index}"
        case CallRan(call=call):
            return call_line(call)
        case Forced():
            return "final answer (forced)"
    return None


@reads_settings
@click.command()
@db_option("What to ask about: " + DB_HELP + ". Opened read-only; never modified.")
@click.option("--question", default=None, help="Answer this one question and exit (otherwise: an interactive prompt).")
@click.option(
    "--evidence",
    default=None,
    help="A hint that goes with the question, as BIRD questions carry one (interactive: with every question).",
)
@click.option(
    "--fresh",
    is_flag=True,
    help="Ask the model even when the question was verified before (by default a verified question "
    "is answered at once from its stored SQL, run afresh, without loading the model).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per question instead of the live view.")
@click.option(
    "--chart",
    "chart",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="FILE.svg|FILE.png",
    help="With --question: write the answer's chart (chosen by rules from the result, docs/charts.md) "
    "to this SVG or PNG file; needs the charts extra (pip install 'edge-sql[charts]').",
)
@click.option("--trace", is_flag=True, help="Also print the raw transcript (the exact text the model saw and wrote).")
@click.option(
    "--vote",
    type=VOTE,
    default=None,
    metavar="K|auto",
    help="Answer by vote: K sampled episodes run at once (K sequences of one context, seeds --seed, "
    "--seed + 1, ...), each one's final SQL runs again, and the answer is the result set most of "
    "them return (ties: fewest failed queries, then the first); the episodes still running stop "
    "once they cannot change it; prints how many agreed. 'auto': the largest K this machine "
    "answers within 2x one episode, predicted from the calibrated decode rates (`edge-sql tune` "
    "shows it; none: one episode). Not with --greedy.",
)
@click.option(
    "--abstain-below",
    type=click.FloatRange(0, 1, min_open=True),
    default=None,
    metavar="FRACTION",
    help='With --vote: answer "not sure" (exit status 4) instead of the voted answer when fewer than '
    "FRACTION of the K episodes return its result (e.g. 0.75: at least 3 of 4 must agree); every "
    "episode then runs to its end.",
)
@episode_options
def command(
    db_path: Path,
    settings: AgentSettings,
    question: str | None,
    evidence: str | None,
    as_json: bool,
    trace: bool,
    budget: dict[str, int],
    abstain_below: float | None = None,
    fresh: bool = False,
    chart: Path | None = None,
) -> None:
    """Answer questions about a SQLite database, or a data file (CSV, TSV, JSON Lines, Excel,
    Parquet) or a folder of them, with the local model.

    Without --question it opens a prompt: type a question, watch each tool round as it
    runs, and get the final SQL with its result. `:quit`, `exit` or Ctrl-D quits;
    Ctrl-C stops the current question; the arrow keys edit the line and recall earlier
    questions (kept in the model store). With stdin not a terminal, questions are read
    one a line, without prompts, each answer printed after a `question:` line. On a
    terminal, stderr shows a status line while the model works (round, tokens generated,
    tok/s, elapsed time; --json too), erased when the answer prints. The database is
    checked before the model loads. Options you always give can live in edge-sql.toml
    (see --profile; `edge-sql run --profile small` tries a small model offline).

    \b
    Exit status:
      0    --question answered (its SQL ran); at the prompt: the prompt was left
      1    an error, in one `Error:` line (bad database or model file, question too long, ...)
      2    a usage error (unknown option, a value out of range)
      3    --question ended with no answer (its SQL failed to run, or it gave none)
      4    --question with --abstain-below: not sure (too few of the --vote episodes agreed)
      130  stopped by Ctrl-C; 143 and 129: terminated by SIGTERM or SIGHUP (128 + N)

    \b
    Examples:
      edge-sql run --db chinook.sqlite
      edge-sql run --db chinook.sqlite --question "How many albums are there?" --json
      edge-sql run --db chinook.sqlite --question "Which genre sells most?" --vote 4 --seed 1
      edge-sql run --db sales.csv --question "Which region sold most in March?"
      edge-sql run --db chinook.sqlite --question "What was the revenue per month?" --chart revenue.svg
      edge-sql run --profile small --db chinook.sqlite --question "How many albums are there?"
    """
    from edge_sql.agent.budget import Budget
    from edge_sql.commands.chart_file import check_chart_file

    check_chart_file(chart, question)
    settings = settings.with_(greedy=greedy_with(settings.vote, settings.greedy), budget=Budget(**budget))
    if abstain_below is not None and settings.vote is None:
        raise click.UsageError("--abstain-below needs --vote K: it is the share of the K episodes that agree")
    try:
        code = _run(
            RunOptions(
                db_path=db_path,
                settings=settings,
                question=question,
                evidence=evidence,
                as_json=as_json,
                trace=trace,
                abstain_below=abstain_below,
                fresh=fresh,
                chart=chart,
            )
        )
    except Terminated:
        raise  # the CLI group ends it with 128 + the signal number
    except KeyboardInterrupt:
        click.echo("\nstopped.", err=True)
        code = EXIT_INTERRUPTED
    if code:
        sys.exit(code)


def _run(options: RunOptions) -> int:
    from edge_sql.tools import ReadOnlyDatabase

    if options.question is not None and not options.question.strip():
        raise EdgeSqlError("empty question: pass some text to --question")
    load_for_db(options.db_path)  # a data file is loaded into SQLite first (once), with its progress on stderr
    db = ReadOnlyDatabase(options.db_path)  # a bad database fails here, before the model loads
    try:
        if options.settings.prompt_file is not None:  # so is a bad prompt file (the packaged one is not read
            from edge_sql.agent.prompt import load_prompt  # here: a verified answer needs no prompt, nor its grammar)

            load_prompt(options.settings.prompt_file)
        fresh = options.fresh
        if options.question is not None and not options.fresh:
            found = _answer_verified(db, options)
            if isinstance(found, int):
                return found  # a verified question: answered without loading the model
            fresh = found is None  # none: the Agent need not look again (a stale one: it says why it is not used)
        agent = _load_agent(options)
        vote = agent.plan.choose_vote(options.settings.vote)  # "auto": the plan's K (None: one episode)
        if vote.line is not None:  # said on stderr with why
            click.echo(vote.line, err=True)
        options = replace(options, settings=options.settings.with_(vote=vote.k))
        try:
            if options.question is not None:
                return _answer(agent, db, options.question, options, fresh=fresh)
            _interactive(agent, db, options)
            return 0
        finally:
            agent.close()
    finally:
        db.close()


def _answer_verified(db: ReadOnlyDatabase, options: RunOptions) -> int | Stale | None:
    """`--question` answered at once from its verified answer (docs/knowledge.md), printed as any
    answer (0); None when it has none, Stale when it no longer holds (the model answers).

    This is the knowledge's first step for a question (`knowledge.answers.at_once`, the one the
    Agent's `consult` takes for every `ask`), taken before any model loads: it needs none."""
    from edge_sql.agent.display import answer_text
    from edge_sql.knowledge import Knowledge
    from edge_sql.knowledge.answers import Stale, at_once, given_lines

    assert options.question is not None
    with Knowledge.open() as kb:
        result = at_once(kb, db, options.question, options.evidence, max_rows=options.budget.max_result_rows)
    if result is None or isinstance(result, Stale):
        return result
    if options.as_json:
        click.echo(json.dumps(result.to_json(transcript=options.trace), ensure_ascii=False))
    else:
        click.echo("\n".join([answer_text(result), *given_lines(result)]))
    _chart(result, options)
    return 0


def _chart(result: EpisodeResult, options: RunOptions) -> None:
    if options.chart is not None:
        from edge_sql.commands.chart_file import write_chart

        write_chart(result, options.chart)


def _load_agent(options: RunOptions) -> Agent:
    """The Agent; a vote of K runs its K episodes at once (K sequences, its plan's), otherwise one."""
    from edge_sql.api import Agent

    click.echo(f"loading {options.settings.model or 'the default model'} ...", err=True)
    agent = Agent(settings=options.settings, log=lambda message: click.echo(message, err=True))
    click.echo(f"loaded {agent.info.describe()}", err=True)
    click.echo(f"settings ({agent.tuning}): {agent.info.settings}", err=True)
    return agent


def _interactive(agent: Agent, db: ReadOnlyDatabase, options: RunOptions) -> None:
    """The prompt (commands/repl.py), each question answered by `_answer`."""
    from edge_sql.commands.repl import interactive

    def answer(question: str, follow_up: FollowUp | None, fresh: bool) -> EpisodeResult | None:
        answered: list[EpisodeResult] = []
        _answer(agent, db, question, options, interactive=True, follow_up=follow_up, fresh=fresh, seen=answered.append)
        return answered[0] if answered else None

    interactive(agent, db, answer, as_json=options.as_json)


def _answer(
    agent: Agent,
    db: ReadOnlyDatabase,
    question: str,
    options: RunOptions,
    *,
    interactive: bool = False,
    follow_up: FollowUp | None = None,
    fresh: bool = False,
    seen: Callable[[EpisodeResult], None] | None = None,
) -> int:
    """One question; returns the exit status (0 answered, EXIT_NO_ANSWER, EXIT_NOT_SURE, EXIT_INTERRUPTED).
    `follow_up` and `fresh` go to `Agent.ask`; `seen` gets the result (the prompt keeps the last).

    The live view prints each round and call on stdout; on a terminal, stderr also shows a
    status line (round, tokens, tok/s, elapsed), with `--json` too, erased before the answer."""
    from edge_sql.agent.display import answer_text, vote_text
    from edge_sql.agent.events import Tokens
    from edge_sql.commands.progress import StatusLine
    from edge_sql.knowledge.answers import given_lines

    evidence, as_json, trace, vote = options.evidence, options.as_json, options.trace, options.settings.vote
    stop = threading.Event()
    status = StatusLine(what=f"voting ({vote} episodes)" if vote is not None else "reading the question")

    def show(event: EpisodeEvent) -> None:
        if stop.is_set():  # after Ctrl-C, nothing but the one line saying so
            return
        line = None if as_json else _event_line(event)
        if line is not None:
            with status.above():
                click.echo(line)
        if isinstance(event, Tokens):
            status.update(round=event.round, tokens=event.tokens, tok_s=event.tok_s)
        else:
            status.update(round=event.round)

    if vote is not None and not as_json:
        click.echo(f"voting: {vote} sampled episodes at once")
    with _ctrl_c_stops(stop, db.interrupt), status:
        result = agent.ask(
            question,
            db,
            evidence=evidence,
            seed=options.settings.seed,
            greedy=options.settings.greedy,
            vote=vote,
            on_event=None if as_json and not status.enabled else show,
            should_stop=stop.is_set,
            abstain_below=options.abstain_below if vote is not None else None,
            follow_up=follow_up,
            fresh=fresh,
        )
    if seen is not None:
        seen(result)
    cancelled = result.stop == "cancelled"
    if as_json:
        click.echo(json.dumps(result.to_json(transcript=trace), ensure_ascii=False))
    elif cancelled and interactive:
        # over the terminal's `^C` echo, when there is one
        click.echo(("\r" if sys.stdout.isatty() else "") + "stopped; ask another question")
    else:
        if result.stats.vote is not None and not cancelled:
            click.echo(vote_text(result.stats.vote))
        click.echo(answer_text(result))
        for line in given_lines(result):
            click.echo(line)
        if trace:
            click.echo("\n--- transcript ---\n" + result.transcript)
    if not cancelled:
        _chart(result, options)
    if cancelled:
        return EXIT_INTERRUPTED
    if result.stop == "abstained":
        return EXIT_NOT_SURE
    return EXIT_NO_ANSWER if result.sql is None else 0
