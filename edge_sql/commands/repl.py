"""`edge-sql run`'s interactive prompt: questions go to the model, short commands to the prompt.

A line that starts with `:` (and `help`, `?`) is the prompt's own command, never a question:
`:right` keeps the last answer as verified, `:fix SQL` replaces its SQL and keeps that, `:note`
and `:notes` teach and show what the knowledge holds (docs/knowledge.md). Both act on the
question last asked, the one on screen: after Ctrl-C, `:fix` stores the interrupted question's
answer, never an older one's; each says what it stored, and replacing a verified answer with
other SQL asks first (issue 61).

A question asked after an answer follows it: the previous question and its SQL go into the
evidence and the model decides what to keep, as a thread does in WrenAI; the question itself is
never rewritten (Vanna's rewriter merged questions that should have stayed apart, vanna-ai/vanna
#804). `:new` starts afresh, so the next question stands alone.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

import click

from edge_sql.errors import EdgeSqlError
from edge_sql.interrupts import Terminated

if TYPE_CHECKING:
    from edge_sql.agent.result import EpisodeResult
    from edge_sql.api import Agent
    from edge_sql.knowledge import FollowUp
    from edge_sql.knowledge.changes import Stored
    from edge_sql.tools import ReadOnlyDatabase

PROMPT = "edge-sql> "
CONFIRM = "replace it? [y/N] "
QUIT_WORDS = {"exit", "quit", r"\q", ":quit", ":q", ":exit"}
HELP_WORDS = {":help", "help", "?", ":?", ":h"}
HISTORY_FILE = "run-history"  # in the model store: the interactive prompt's questions
HISTORY_LENGTH = 1000
COMMANDS = (
    (":help", "list these commands (also `help` and `?`)"),
    (":right", "the last answer is right: keep it as verified (the same question is then answered at once)"),
    (":fix SQL", "SQL is the right answer to the last question: run it and keep it as verified"),
    (":note TEXT", "a note the model reads with every question about this database"),
    (":notes", "the notes and verified answers of this database"),
    (":new", "start afresh: the next question does not follow the last answer"),
    (":fresh", "ask the last question again, by the model (not from a verified answer)"),
    (":quit", "quit (also `exit` or Ctrl-D; an empty line does nothing)"),
)

# answers one question: (question, follow-up, fresh) -> the result (None when it raised)
Answer = Callable[[str, "FollowUp | None", bool], "EpisodeResult | None"]
# asks the person to confirm (the line says what would change) -> yes
Confirm = Callable[[str], bool]


@dataclass
class Conversation:
    """The question last asked and what it got (what `:right`, `:fix` and `:fresh` act on: the
    answer on screen, a stopped one included), and the last answer (with SQL: what the next
    question follows)."""

    last: EpisodeResult | None = None
    follows: bool = True  # `:new` turns it off until the next answer
    asked: str | None = None  # the question last asked, answered or not
    asked_after: FollowUp | None = None  # the answer it followed
    shown: EpisodeResult | None = None  # what it got: an answer, a stopped one; None when it raised

    def follow_up(self) -> FollowUp | None:
        from edge_sql.knowledge import FollowUp

        if not self.follows or self.last is None or self.last.sql is None:
            return None
        return FollowUp(self.last.question, self.last.sql)

    def asking(self, question: str, follow_up: FollowUp | None) -> None:
        self.asked, self.asked_after, self.shown = question, follow_up, None

    def answered(self, result: EpisodeResult | None) -> None:
        if result is not None:
            self.shown = result
        if result is not None and result.stop != "cancelled":
            self.last, self.follows = result, True


def banner(db: ReadOnlyDatabase) -> str:
    from edge_sql.agent.display import plural

    return (
        f"Ask about {db.path.name} ({plural(len(db.table_names()), 'table')}). Questions go to the model; "
        "lines starting with `:` are this prompt's commands (`:help` lists them). A question after an "
        "answer follows it (`:new` starts afresh). Ctrl-D or `:quit` quits; Ctrl-C stops a question."
    )


def help_text() -> str:
    width = max(len(name) for name, _ in COMMANDS)
    lines = [f"  {name:<{width}}  {what}" for name, what in COMMANDS]
    return "\n".join(["Commands (anything else is a question for the model):", *lines])


def is_command(text: str) -> bool:
    return text.startswith(":") or text.lower() in HELP_WORDS


def run_command(
    text: str,
    conversation: Conversation,
    agent: Agent,
    db: ReadOnlyDatabase,
    answer: Answer,
    confirm: Confirm = lambda line: False,
) -> str:
    """Do one prompt command; returns what to print. EdgeSqlError for a refused one (nothing stored)."""
    word, _, rest = text.partition(" ")
    word, rest = word.lower(), rest.strip()
    if word in HELP_WORDS:
        return help_text()
    if word == ":note":
        note = agent.knowledge.add_note(db, rest, surface="prompt")
        return f"noted (note {note.id}): the model reads it with every question about {db.path.name}"
    if word == ":notes":
        return _notes_text(agent, db)
    if word == ":new":
        conversation.follows = False
        return "the next question starts afresh"
    if word not in (":right", ":fix", ":fresh"):
        raise EdgeSqlError(f"unknown command {word} (`:help` lists the commands)")
    question, shown = conversation.asked, conversation.shown
    if question is None:
        raise EdgeSqlError(f"no answer yet for {word} to act on: ask a question first")
    # what the answer on screen followed (an answer at once from a standalone verified answer
    # followed nothing); with no answer, what the question was asked after
    given = shown.given if shown is not None else None
    follow_up = given.follow_up if given is not None else conversation.asked_after
    if word == ":fresh":
        conversation.asking(question, follow_up)
        conversation.answered(answer(question, follow_up, True))
        return ""
    if word == ":fix":
        return _fix(rest, question, follow_up, conversation, agent, db, answer, confirm)
    if shown is None or shown.stop == "cancelled":
        why = "was stopped before its answer" if shown is not None else "got no answer"
        raise EdgeSqlError(f'the last question ("{question}") {why}: nothing to keep (give its SQL with :fix SQL)')
    if shown.sql is None:
        raise EdgeSqlError("the last answer has no SQL that ran to keep: give the right one with :fix SQL")
    if rest:
        raise EdgeSqlError(":right takes nothing after it (to change the SQL: :fix SQL)")
    return _said(_keep(agent, db, question, shown.sql, shown.evidence, follow_up, confirm))


def _fix(
    sql: str,
    question: str,
    follow_up: FollowUp | None,
    conversation: Conversation,
    agent: Agent,
    db: ReadOnlyDatabase,
    answer: Answer,
    confirm: Confirm,
) -> str:
    """`:fix SQL`: keep SQL as the verified answer to the question last asked (the interrupted
    one after Ctrl-C), then answer it from there."""
    if not sql:
        raise EdgeSqlError(":fix needs the SQL that answers the last question, e.g. :fix SELECT COUNT(*) FROM t")
    evidence = conversation.shown.evidence if conversation.shown is not None else None
    click.echo(_said(_keep(agent, db, question, sql, evidence, follow_up, confirm)), err=True)
    conversation.asking(question, follow_up)
    conversation.answered(answer(question, follow_up, False))  # answered at once, from the fix
    return ""


def _said(kept: Stored) -> str:
    """What was stored, and (when something was) what it does from now on."""
    return kept.said() + ("" if kept.action == "unchanged" else "; the same question is answered at once from now on")


def _keep(
    agent: Agent,
    db: ReadOnlyDatabase,
    question: str,
    sql: str,
    evidence: str | None,
    follow_up: FollowUp | None,
    confirm: Confirm,
) -> Stored:
    """Store a verified answer; one with other SQL is replaced only once the person confirms."""
    from edge_sql.errors import VerifiedExists

    follows = follow_up.question if follow_up else None
    try:
        return agent.knowledge.keep(db, question, sql, evidence=evidence, follows=follows, surface="prompt")
    except VerifiedExists as exc:
        if not confirm(f'"{exc.question}" already has a verified answer (v{exc.answer_id}): {exc.sql}'):
            raise EdgeSqlError(
                f'not replaced: v{exc.answer_id} stays the verified answer to "{exc.question}"'
            ) from None
    return agent.knowledge.keep(db, question, sql, evidence=evidence, follows=follows, replace=True, surface="prompt")


def _notes_text(agent: Agent, db: ReadOnlyDatabase) -> str:
    kb = agent.knowledge
    notes, answers = kb.notes(db), kb.verified(db)
    if not notes and not answers:
        return f"no notes or verified answers for {db.path.name} yet (:note TEXT adds one, :right keeps an answer)"
    lines = [f"{n.id:>4}  {n.text}" + (f" [with: {n.question}]" if n.question else "") for n in notes]
    lines += [
        f"{'v' + str(a.id):>4}  {a.question} -> {a.sql}" + (f"  (stale: {a.stale})" if a.stale else "") for a in answers
    ]
    return "\n".join(lines)


def interactive(
    agent: Agent, db: ReadOnlyDatabase, answer: Answer, *, as_json: bool, echo_questions: bool = True
) -> None:
    """Read questions and commands until `:quit`, `exit` or end of input (an empty line is
    skipped). At a terminal: a prompt with line editing and the questions of earlier sessions;
    otherwise one a line, no prompt."""
    terminal = sys.stdin.isatty()
    if terminal and not as_json:
        click.echo(banner(db), err=True)
    conversation = Conversation()
    with _line_history(terminal):
        while True:
            try:
                line = _read_question(terminal)
            except EOFError:
                if terminal:
                    click.echo("", err=True)
                return
            except Terminated:
                raise  # SIGTERM/SIGHUP end the session, not just the line
            except KeyboardInterrupt:
                click.echo("\n(Ctrl-D or `:quit` quits)", err=True)
                continue
            text = line.strip()
            if not text:
                continue  # a stray Enter asks nothing and quits nothing
            if text.lower() in QUIT_WORDS:
                return
            try:
                if is_command(text):
                    reply = run_command(text, conversation, agent, db, answer, lambda said: _confirm(said, terminal))
                    if reply:
                        click.echo(reply, err=as_json)
                    continue
                if not terminal and not as_json and echo_questions:
                    click.echo(f"question: {text}")  # read from a file or a pipe: say which answer follows
                follow_up = conversation.follow_up()
                conversation.asking(text, follow_up)
                conversation.answered(answer(text, follow_up, False))
            except EdgeSqlError as exc:  # a refused command, a question too long for the episode: go on
                click.echo(f"Error: {exc}", err=True)


def _read_question(terminal: bool, prompt: str = PROMPT) -> str:
    """One line of input; the prompt goes where it cannot mix with answers (none off a terminal)."""
    if not terminal:
        return input()
    if sys.stdout.isatty():
        return input(prompt)  # through readline: line editing and history
    click.echo(prompt, nl=False, err=True)  # stdout is for the answers (`--json | jq`)
    return input()


def _confirm(said: str, terminal: bool) -> bool:
    """Ask before replacing: `said` names what is stored; only `y` or `yes` replaces (off a
    terminal, the next line answers; end of input or Ctrl-C is no)."""
    click.echo(said, err=True)
    try:
        reply = _read_question(terminal, CONFIRM)
    except (EOFError, KeyboardInterrupt):
        click.echo("", err=True)
        return False
    return reply.strip().lower() in ("y", "yes")


@contextmanager
def _line_history(terminal: bool) -> Iterator[None]:
    """At a terminal, load the standard library's readline (arrow keys, history) with the questions
    of earlier sessions, and keep this session's in the model store. A store that cannot be written
    costs only the history."""
    readline: ModuleType | None
    try:
        import readline
    except ImportError:  # Python built without it (Windows): plain input
        readline = None
    if not terminal or readline is None:
        yield
        return
    from edge_sql.store.home import store_root

    path = store_root() / HISTORY_FILE
    readline.set_history_length(HISTORY_LENGTH)
    try:
        readline.read_history_file(path)
    except OSError:
        pass  # no history yet
    try:
        yield
    finally:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            readline.write_history_file(path)
        except OSError:
            pass
