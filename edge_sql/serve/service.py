"""What both interfaces share: the named databases, the limits, one `Agent` behind one queue
(answering the Agent's `settings.parallel` requests at once: its pool, `api/session_pool.py`).

The operator names every database at start (`--db NAME=PATH`, or `--db PATH`: named by its
file's stem); clients refer to them by name only. A request's shape is `AskRequest`'s to check; its limits (known name, question and
evidence lengths) are checked here, so that HTTP and MCP give the same answers to the same
mistakes.
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from edge_sql.agent.events import EpisodeEvent
from edge_sql.agent.result import EpisodeResult
from edge_sql.checks import Checks, check_sql
from edge_sql.errors import BadRequest, EdgeSqlError, QueueFull, UnknownDatabase, VerifiedExists
from edge_sql.knowledge import FollowUp, Note
from edge_sql.knowledge.changes import Change, Stored, Surface
from edge_sql.serve.metrics import ServeMetrics, outcome_of
from edge_sql.serve.queue import AskQueue, Finished, Job
from edge_sql.serve.request import AskRequest, NoteRequest, VerifyRequest
from edge_sql.tools import QueryResult, ReadOnlyDatabase

if TYPE_CHECKING:  # the Agent's module loads llama.cpp; serve's other modules start without it
    from edge_sql.api import Agent
    from edge_sql.api.session_pool import Place

LOCAL_HOSTS = {"localhost"}


@dataclass(frozen=True)
class Limits:
    """Bounds on what one request may send and get back."""

    max_body_bytes: int = 64 * 1024
    max_question_chars: int = 2000
    max_evidence_chars: int = 4000
    max_rows: int = 200  # rows of the answer returned over HTTP (Budget.max_result_rows)
    mcp_rows: int = 20  # rows shown in an MCP tool result (with the total count)
    mcp_output_chars: int = 200  # each call's output in an MCP tool result
    vote: int | Literal["auto"] | None = None  # the vote of a request that names none (`serve --vote`)
    seed: int | None = None  # the seed of a request that names none (`serve --seed`)
    greedy: bool = False  # `serve --greedy`: a request without a vote takes the most likely token
    max_waiting: int = 8  # requests waiting behind the running ones
    wait_timeout_s: float = 300.0  # longest wait in the queue before the request is dropped


def parse_db_option(item: str) -> tuple[str, Path]:
    """`NAME=PATH` -> (NAME, PATH); a bare PATH (as `run --db` takes) is named by its file's stem
    (`shop.db` -> shop, `export/` -> export). ValueError with the reason otherwise."""
    name, sep, path = item.partition("=")
    if not sep or "/" in name or "\\" in name:  # no NAME= (a path may hold '=' in a folder's name)
        return name_from_path(Path(item).expanduser()), Path(item).expanduser()
    name = name.strip()
    if not name or not path:
        raise ValueError(f"{item!r} is not [NAME=]PATH")
    if not all(c.isalnum() or c in "-_." for c in name):
        raise ValueError(f"database name {name!r}: use letters, digits, '-', '_' and '.' only")
    return name, Path(path).expanduser()


def name_from_path(path: Path) -> str:
    """A database's name from its file or folder: the stem, with what a name may not hold as '_'."""
    stem = path.stem or path.resolve().name
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in stem) or "db"


def parse_db_options(items: tuple[str, ...] | list[str]) -> dict[str, Path]:
    """Every `--db [NAME=]PATH` of `serve`, by name; ValueError for a malformed one or a name twice."""
    databases: dict[str, Path] = {}
    for item in items:
        name, path = parse_db_option(item)
        if name in databases:
            raise ValueError(
                f"database name {name!r} given twice ({databases[name]} and {path}): name them with NAME=PATH"
            )
        databases[name] = path
    return databases


def is_local_host(host: str) -> bool:
    """True for localhost and loopback addresses (127.0.0.0/8, ::1)."""
    if host in LOCAL_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class DatabaseEntry:
    name: str
    path: Path
    tables: list[str] = field(default_factory=list)


class Service:
    """One agent, its queue and the databases it may open."""

    def __init__(
        self,
        agent: Agent,
        databases: dict[str, Path],
        limits: Limits = Limits(),
        log: Callable[[str], None] = lambda _m: None,
    ) -> None:
        if not databases:
            raise EdgeSqlError("name at least one database with --db NAME=PATH")
        self.agent = agent
        self.limits = limits
        self.log = log
        self.databases: dict[str, DatabaseEntry] = {}
        for name, path in databases.items():
            with ReadOnlyDatabase(path) as db:  # a bad file fails at start, not on the first request
                self.databases[name] = DatabaseEntry(name, Path(path), db.table_names())
        self.variant = model_variant(agent.info.model_path)
        self.queue = AskQueue(  # the Agent's own queue, with serve's bound and time limit
            self._ask,
            agent.queue,
            max_waiting=limits.max_waiting,
            wait_timeout_s=limits.wait_timeout_s,
            log=log,
            on_ended=self._ended,
        )
        self.metrics = ServeMetrics(list(self.databases), self.queue.by_database)

    def _ended(self, job: Job, outcome: Finished, episode_s: float | None) -> None:
        result = outcome.result
        kind = outcome_of(result.stop if result else None, bool(result and result.sql), outcome.error)
        waited = job.started - job.submitted if job.started is not None else None
        self.metrics.ended(
            job.request.database, kind, result.stats if result else None, waited_s=waited, ran_s=episode_s
        )

    def _ask(
        self,
        request: AskRequest,
        db: ReadOnlyDatabase,
        on_event: Callable[[EpisodeEvent], None],
        should_stop: Callable[[], bool],
        place: Place | None = None,
    ) -> EpisodeResult:
        vote = request.vote if request.vote is not None else self.limits.vote
        return self.agent.ask(
            request.question,
            db,
            evidence=request.evidence,
            seed=request.seed if request.seed is not None else self.limits.seed,
            greedy=self.limits.greedy and vote is None,  # a vote samples its K episodes
            on_event=on_event,
            should_stop=should_stop,
            vote=vote,
            abstain_below=request.abstain_below,
            follow_up=FollowUp(request.follow_up.question, request.follow_up.sql) if request.follow_up else None,
            fresh=request.fresh,
            place=place,  # the request's turn in the Agent's queue, which it holds now
        )

    def check(self, request: AskRequest) -> Path:
        """The database path for a valid request; UnknownDatabase or BadRequest otherwise."""
        limits = self.limits
        if not request.question.strip():
            raise BadRequest("question is empty")
        if len(request.question) > limits.max_question_chars:
            raise BadRequest(
                f"question has {len(request.question)} characters; the limit is {limits.max_question_chars}"
            )
        if request.evidence is not None and len(request.evidence) > limits.max_evidence_chars:
            raise BadRequest(
                f"evidence has {len(request.evidence)} characters; the limit is {limits.max_evidence_chars}"
            )
        follow_up = request.follow_up
        if follow_up is not None and not (follow_up.question.strip() and follow_up.sql.strip()):
            raise BadRequest("follow_up needs the previous question and its SQL, both non-empty")
        if follow_up is not None and len(follow_up.question) + len(follow_up.sql) > limits.max_evidence_chars:
            raise BadRequest(
                f"follow_up has {len(follow_up.question) + len(follow_up.sql)} characters; "
                f"the limit is {limits.max_evidence_chars}"
            )
        return self.database_path(request.database)

    def database_path(self, name: str) -> Path:
        """The file behind a database name; UnknownDatabase for a name the server was not given."""
        entry = self.databases.get(name)
        if entry is None:
            names = ", ".join(sorted(self.databases))
            raise UnknownDatabase(f"unknown database {name!r}; this server has: {names}")
        return entry.path

    def submit(self, request: AskRequest) -> Job:
        """Check and queue a request (on the event loop that reads it); raises QueueFull when full."""
        path = self.check(request)
        try:
            return self.queue.submit(request, path)
        except QueueFull:
            self.metrics.ended(request.database, "refused")
            raise

    def query(self, database: str, sql: str) -> QueryResult:
        """Run a client's own SQL on a named database as the tools run an answer: read-only,
        under the same time limit, row cap (`max_rows`) and cell cap; QueryError otherwise."""
        path = self.database_path(database)
        started = time.monotonic()
        try:
            with ReadOnlyDatabase(path) as db:
                result = db.execute(sql, max_rows=self.limits.max_rows)
        except EdgeSqlError as exc:
            self.log(f"query ({database}): error: {exc}")
            raise
        rows = f"{len(result.rows)}{'+' if result.truncated else ''} row{'' if len(result.rows) == 1 else 's'}"
        self.log(f"query ({database}): {rows}, {time.monotonic() - started:.2f} s")
        return result

    def check_query(self, database: str, sql: str, result: QueryResult) -> Checks:
        """The answer checks (edge_sql/checks) of a client's own SQL that ran as `result`."""
        with ReadOnlyDatabase(self.database_path(database)) as db:
            return check_sql(db, sql, result=result)

    # ---- what a person teaches about a database (edge_sql/knowledge, via the agent's store) ------

    def add_note(self, request: NoteRequest, surface: Surface = "HTTP") -> Note:
        """Store a note for the named database (KnowledgeError: empty, over its bound)."""
        with ReadOnlyDatabase(self.database_path(request.database)) as db:
            note = self.agent.knowledge.add_note(db, request.text, question=request.question, surface=surface)
        self.log(f"note {note.id} added ({request.database}, {surface})")
        return note

    def knowledge_of(self, database: str) -> dict[str, object]:
        """The named database's notes and verified answers (stale ones flagged), and a schema change."""
        with ReadOnlyDatabase(self.database_path(database)) as db:
            kb = self.agent.knowledge
            return {
                "database": database,
                "notes": [n.to_json() for n in kb.notes(db)],
                "verified": [a.to_json() for a in kb.verified(db)],
                "schema_change": kb.schema_change(db),
            }

    def remove_note(self, database: str, note_id: int, surface: Surface = "HTTP") -> Note:
        """Delete one note of the named database (kept in the history; KnowledgeError when it has none)."""
        with ReadOnlyDatabase(self.database_path(database)) as db:
            note = self.agent.knowledge.remove_note(db, note_id, surface=surface)
        self.log(f"note {note_id} removed ({database}, {surface})")
        return note

    def verify(self, request: VerifyRequest, surface: Surface = "HTTP") -> Stored:
        """Store what a person confirmed: this SQL answers this question (KnowledgeError: SQL that
        writes or does not run, an empty question; VerifiedExists: the question has a verified
        answer with other SQL and the request did not say `replace`)."""
        how = {"MCP": 'call verify again with "replace": true', "page": "press Replace it"}.get(
            surface, 'send "replace": true'
        )
        with ReadOnlyDatabase(self.database_path(request.database)) as db:
            try:
                answer = self.agent.knowledge.keep(
                    db,
                    request.question,
                    request.sql,
                    evidence=request.evidence,
                    follows=request.follows,
                    replace=request.replace,
                    surface=surface,
                )
            except VerifiedExists as exc:
                raise exc.hinted(
                    f"{how} to replace it, once the person confirms (the old one is kept in the history)"
                ) from None
        self.log(f"verified answer v{answer.answer.id} {answer.action} ({request.database}, {surface})")
        return answer

    def history(self, database: str) -> dict[str, object]:
        """What teaching changed in the named database's notes and verified answers, oldest first."""
        with ReadOnlyDatabase(self.database_path(database)) as db:
            changes = self.agent.knowledge.history(db)
        return {"database": database, "changes": [c.to_json() for c in changes]}

    def undo(self, database: str, change_id: int, surface: Surface = "HTTP") -> Change:
        """Undo one change of the named database (KnowledgeError, nothing changed, when it cannot)."""
        with ReadOnlyDatabase(self.database_path(database)) as db:
            change = self.agent.knowledge.undo(db, change_id, surface=surface)
        self.log(f"change #{change_id} undone ({database}, {surface})")
        return change

    def list_databases(self) -> list[dict[str, Any]]:  # Any: schema
        """Names and tables, never paths: clients do not need to know where files live."""
        return [{"name": e.name, "tables": list(e.tables)} for e in self.databases.values()]

    def health(self) -> dict[str, object]:
        info = self.agent.info
        return {
            "status": "ok",
            "model": info.model_path.name,
            "variant": self.variant,
            "architecture": info.architecture,
            "backend": info.backend,
            "queue": self.queue.snapshot(),
        }

    def close(self) -> None:
        self.queue.close()


def model_variant(path: Path) -> str:
    """The GGUF's storage type (Q4_K_M, BF16, ...), from its `general.file_type`."""
    from edge_sql.convert.gguf_file import validate_gguf

    info = validate_gguf(path)
    if info.file_type is not None:
        return info.file_type.name.removeprefix("MOSTLY_").removeprefix("ALL_")
    raw = info.metadata.get("general.file_type")
    return "unknown" if raw is None else f"file type {raw}"
