"""`edge-sql run`'s interactive prompt: questions go to the model, short commands to the prompt.

A line that starts with `:` (and `help`, `?`) is the prompt's own command, never a question:
`:right` keeps the last answer as verified, `:fix SQL` replaces its SQL and keeps that, `:note`
and `:notes` teach and show what the knowledge holds (docs/knowledge.md).

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
    from edge_sql.tools import ReadOnlyDatabase

PROMPT = "edge-sql> "
QUIT_WORDS = {"exit", "quit", r"\q"}
HELP_WORDS = {":help", "help", "?", ":?", ":h"}
HISTORY_FILE = "run-history"  # in the model store: the interactive prompt's questions
HISTORY_LENGTH = 1000
COMMANDS = (
    (":help", "list these commands (also `help` and `?`)"),
    (":right", "the last answer is right: keep it as verified (the same question is then answered at once)"),
    (":fix SQL", "the last answer's SQL should be SQL: run it and keep it as verified"),
    (":note TEXT", "a note the model reads with every question about this database"),
    (":notes", "the notes and verified answers of this database"),
    (":new", "start afresh: the next question does not follow the last answer"),
    (":fresh", "ask the last question again, by the model (not from a verified answer)"),
    ("exit", "quit (also an empty line or Ctrl-D)"),
)

# answers one question: (question, follow-up, fresh) -> the result (None when it raised)
Answer = Callable[[str, "FollowUp | None", bool], "EpisodeResult | None"]


@dataclass
class Conversation:
    """The last answer: what `:right`, `:fix` and `:fresh` act on, and (with SQL) what the next
    question follows."""

    last: EpisodeResult | None = None
    follows: bool = True  # `:new` turns it off until the next answer

    def follow_up(self) -> FollowUp | None:
        from edge_sql.knowledge import FollowUp

        if not self.follows or self.last is None or self.last.sql is None:
            return None
        return FollowUp(self.last.question, self.last.sql)

    def answered(self, result: EpisodeResult | None) -> None:
        if result is not None and result.stop != "cancelled":
            self.last, self.follows = result, True


def banner(db: ReadOnlyDatabase) -> str:
    from edge_sql.agent.display import plural

    return (
        f"Ask about {db.path.name} ({plural(len(db.table_names()), 'table')}). Questions go to the model; "
        "lines starting with `:` are this prompt's commands (`:help` lists them). A question after an "
        "answer follows it (`:new` starts afresh). An empty line or `exit` quits; Ctrl-C stops a question."
    )


def help_text() -> str:
    width = max(len(name) for name, _ in COMMANDS)
    lines = [f"  {name:<{width}}  {what}" for name, what in COMMANDS]
    return "\n".join(["Commands (anything else is a question for the model):", *lines])


def is_command(text: str) -> bool:
    return text.startswith(":") or text.lower() in HELP_WORDS


def run_command(text: str, conversation: Conversation, agent: Agent, db: ReadOnlyDatabase, answer: Answer) -> str:
    """Do one prompt command; returns what to print. EdgeSqlError for a refused one."""
    word, _, rest = text.partition(" ")
    word, rest = word.lower(), rest.strip()
    if word in HELP_WORDS:
        return help_text()
    if word == ":note":
        note = agent.knowledge.add_note(db, rest)
        return f"noted (note {note.id}): the model reads it with every question about {db.path.name}"
    if word == ":notes":
        return _notes_text(agent, db)
    if word == ":new":
        conversation.follows = False
        return "the next question starts afresh"
    last = conversation.last
    if word in (":right", ":fix", ":fresh") and last is None:
        raise EdgeSqlError(f"no answer yet for {word} to act on: ask a question first")
    assert last is not None or word not in (":right", ":fix", ":fresh")
    if word == ":right" and last is not None:
        if last.sql is None:
            raise EdgeSqlError("the last answer has no SQL that ran to keep: give the right one with :fix SQL")
        if rest:
            raise EdgeSqlError(":right takes nothing after it (to change the SQL: :fix SQL)")
        follow_up = last.given.follow_up if last.given is not None else None
        kept = agent.knowledge.verify(
            db, last.question, last.sql, evidence=last.evidence, follows=follow_up.question if follow_up else None
        )
        return f"kept as verified (v{kept.id}): the same question is answered at once from now on"
    if word == ":fix" and last is not None:
        return _fix(rest, conversation, last, agent, db, answer)
    if word == ":fresh" and last is not None:
        follow_up = last.given.follow_up if last.given is not None else None
        conversation.answered(answer(last.question, follow_up, True))
        return ""
    raise EdgeSqlError(f"unknown command {word} (`:help` lists the commands)")


def _fix(
    sql: str, conversation: Conversation, last: EpisodeResult, agent: Agent, db: ReadOnlyDatabase, answer: Answer
) -> str:
    """`:fix SQL`: keep SQL as the last question's verified answer, then answer it from there."""
    if not sql:
        raise EdgeSqlError(":fix needs the SQL that answers the last question, e.g. :fix SELECT COUNT(*) FROM t")
    follow_up = last.given.follow_up if last.given is not None else None
    kept = agent.knowledge.verify(
        db, last.question, sql, evidence=last.evidence, follows=follow_up.question if follow_up else None
    )
    click.echo(f"kept as verified (v{kept.id}): the same question is answered at once from now on", err=True)
    conversation.answered(answer(last.question, follow_up, False))  # answered at once, from the fix
    return ""


def _notes_text(agent: Agent, db: ReadOnlyDatabase) -> str:
    kb = agent.knowledge
    notes, answers = kb.notes(db), kb.verified(db)
    if not notes and not answers:
        return f"no notes or verified answers for {db.path.name} yet (:note TEXT adds one, :right keeps an answer)"
    lines = [f"{n.id:>4}  {n.text}" + (f" [with: {n.question}]" if n.question else "") for n in notes]
    lines += [f"{'v' + str(a.id):>4}  {a.question} -> {a.sql}" for a in answers]
    return "\n".join(lines)


def interactive(
    agent: Agent, db: ReadOnlyDatabase, answer: Answer, *, as_json: bool, echo_questions: bool = True
) -> None:
    """Read questions and commands until an empty line, `exit` or end of input. At a terminal: a
    prompt with line editing and the questions of earlier sessions; otherwise one a line, no prompt."""
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
                click.echo("\n(Ctrl-D, an empty line or `exit` quits)", err=True)
                continue
            text = line.strip()
            if not text or text.lower() in QUIT_WORDS:
                return
            try:
                if is_command(text):
                    reply = run_command(text, conversation, agent, db, answer)
                    if reply:
                        click.echo(reply, err=as_json)
                    continue
                if not terminal and not as_json and echo_questions:
                    click.echo(f"question: {text}")  # read from a file or a pipe: say which answer follows
                conversation.answered(answer(text, conversation.follow_up(), False))
            except EdgeSqlError as exc:  # a refused command, a question too long for the episode: go on
                click.echo(f"Error: {exc}", err=True)


def _read_question(terminal: bool) -> str:
    """One line of input; the prompt goes where it cannot mix with answers (none off a terminal)."""
    if not terminal:
        return input()
    if sys.stdout.isatty():
        return input(PROMPT)  # through readline: line editing and history
    click.echo(PROMPT, nl=False, err=True)  # stdout is for the answers (`--json | jq`)
    return input()


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
