"""`edge-sql serve`: the agent as an MCP server (stdio) or a local HTTP API (with MCP at /mcp)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click
from click.core import ParameterSource

from edge_sql.commands.files import DB_HELP, load_for_db
from edge_sql.commands.options import VOTE, episode_options, greedy_with
from edge_sql.commands.settings import reads_settings

if TYPE_CHECKING:  # the CLI imports the runtime only when a command runs
    from edge_sql.api.agent_settings import AgentSettings
    from edge_sql.serve.guard import AllowList


@dataclass(frozen=True)
class ServeOptions:
    """`edge-sql serve`'s options once checked: the named databases, the transport, the Agent's
    settings (`AgentSettings`: the model, --parallel, the vote, seed and greedy of a request that
    names none, --queue-size, ...) and the limits the service enforces."""

    databases: dict[str, Path]
    http: bool  # HTTP (the API, the page and MCP at /mcp); False: MCP over stdio
    host: str
    port: int
    token: str | None
    settings: AgentSettings
    queue_timeout: float
    max_body: int
    max_question: int
    max_rows: int
    open_page: bool = False
    allow: AllowList | None = None  # the guard's Host names and origins (None: loopback and the bound address)
    quiet: bool = False  # no access-log line per request
    teach_token: str | None = None  # teaching (notes, verify, undo) needs it; asking only `token`


def _log(message: str) -> None:
    click.echo(f"edge-sql serve: {message}", err=True)  # stderr: stdout carries MCP over stdio


def _databases(items: tuple[str, ...]) -> dict[str, Path]:
    from edge_sql.serve.service import parse_db_options

    try:
        return parse_db_options(items)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--db") from None


@reads_settings
@click.command()
@click.option(
    "--db",
    "db_items",
    multiple=True,
    required=True,
    metavar="[NAME=]PATH",
    help="A database clients may ask about, by NAME (repeatable; without NAME=, the file's stem): "
    + DB_HELP
    + ". Opened read-only; clients never see or pass paths.",
)
@click.option("--mcp", "use_mcp", is_flag=True, help="Serve MCP over stdin/stdout (what desktop MCP clients launch).")
@click.option(
    "--http",
    "use_http",
    is_flag=True,
    help="Serve HTTP: the /v1 API and MCP (streamable HTTP) at /mcp. The default without --mcp.",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to bind for --http. Anything but localhost requires --token.",
)
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8765, show_default=True, help="Port for --http (0: any free port)."
)
@click.option(
    "--open", "open_page", is_flag=True, help="Open the web page in the default browser once the server listens."
)
@click.option(
    "--token",
    envvar="EDGE_SQL_TOKEN",
    default=None,
    help="Bearer token every HTTP request must carry (or set EDGE_SQL_TOKEN).",
)
@click.option(
    "--teach-token",
    envvar="EDGE_SQL_TEACH_TOKEN",
    default=None,
    help="Token that adding and removing notes, verifying, replacing and undoing need (403 without it), "
    "while asking and listing need only --token; the page shows its teaching buttons once it is given "
    "(or set EDGE_SQL_TEACH_TOKEN). Without it, whoever may ask may teach.",
)
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    metavar="NAME",
    help="Another Host name (or address) to answer, besides loopback and the bound address: "
    "a LAN name, or the name a reverse proxy passes (repeatable). Other Hosts get 421.",
)
@click.option(
    "--cors-origin",
    "cors_origins",
    multiple=True,
    metavar="URL",
    help="A web app's origin (scheme://host[:port]) that may call the API from a browser: its "
    "preflights are answered and it gets CORS headers (repeatable). Other origins get 403.",
)
@click.option("--quiet", is_flag=True, help="No access-log line per HTTP request on stderr.")
@episode_options
@click.option(
    "--parallel",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Requests answered at the same time, each in its own sequence of the model's context "
    "(one context window of --ctx tokens each); the rest wait in the queue.",
)
@click.option(
    "--vote",
    type=VOTE,
    default=None,
    metavar="K|auto",
    help='The vote of a request that names none (a request\'s own "vote" wins): K sampled episodes, '
    "the result set most of them return. 'auto': the largest K this machine answers within 2x one "
    "episode, from the calibrated decode rates (said at start; `edge-sql tune` shows it). The K "
    'sequences are opened beside --parallel\'s, so a request\'s "vote": "auto" votes at that K; '
    "without --vote it votes within --parallel's sequences.",
)
@click.option(
    "--queue-size",
    type=click.IntRange(min=0),
    default=8,
    show_default=True,
    help="Requests that may wait behind the running ones; more get 503 (HTTP) or a tool error (MCP).",
)
@click.option(
    "--queue-timeout",
    type=click.FloatRange(min=0.1),
    default=300.0,
    show_default=True,
    help="Seconds a request may wait in the queue before it is dropped with an error.",
)
@click.option(
    "--max-body",
    type=click.IntRange(min=256),
    default=64 * 1024,
    show_default=True,
    help="Largest HTTP request body in bytes (413 above).",
)
@click.option(
    "--max-question",
    type=click.IntRange(min=1),
    default=2000,
    show_default=True,
    help="Longest question in characters (422 above).",
)
@click.option(
    "--max-rows",
    type=click.IntRange(min=1),
    default=200,
    show_default=True,
    help="Rows of an answer returned to clients.",
)
def command(
    db_items: tuple[str, ...],
    use_mcp: bool,
    use_http: bool,
    host: str,
    port: int,
    open_page: bool,
    token: str | None,
    teach_token: str | None,
    allow_hosts: tuple[str, ...],
    cors_origins: tuple[str, ...],
    quiet: bool,
    settings: AgentSettings,
    budget: dict[str, int],
    queue_timeout: float,
    max_body: int,
    max_question: int,
    max_rows: int,
) -> None:
    """Serve the agent to other programs: MCP over stdio, or a local HTTP API.

    One model answers every client, --parallel of them at a time; the other requests queue in
    arrival order. Databases are named at start and clients refer to them by name only.

    \b
    Examples:
      edge-sql serve --mcp --db chinook=chinook.sqlite
      edge-sql serve --db chinook=chinook.sqlite --port 8765
      edge-sql serve --db chinook.sqlite --open                # the web page (database "chinook")
      edge-sql serve --db sales=sales.csv --db orders=export/  # data files, loaded into SQLite once
      curl -s localhost:8765/v1/ask -H 'Content-Type: application/json' \\
           -d '{"question": "How many albums?", "database": "chinook"}'
    """
    settings = settings.with_(greedy=greedy_with(settings.vote, settings.greedy))
    databases = _databases(db_items)
    http = use_http or not use_mcp
    _check_token(token, http, host)
    _check_token_text(teach_token, "teach_token", http)
    if teach_token is not None and teach_token == token:
        raise click.BadParameter("the teach token must differ from --token (else whoever may ask may teach)")
    if open_page and not http:
        raise click.UsageError("--open opens the web page, which needs HTTP: add --http (or drop --mcp)")
    allow = _allow_list(http, host, allow_hosts, cors_origins)
    from edge_sql.agent.budget import Budget

    _serve(
        ServeOptions(
            databases=databases,
            http=http,
            host=host,
            port=port,
            token=token,
            settings=settings.with_(budget=Budget(**{"max_result_rows": max_rows, **budget})),
            queue_timeout=queue_timeout,
            max_body=max_body,
            max_question=max_question,
            max_rows=max_rows,
            open_page=open_page,
            allow=allow,
            quiet=quiet,
            teach_token=teach_token,
        )
    )


def _allow_list(http: bool, host: str, allow_hosts: tuple[str, ...], cors_origins: tuple[str, ...]) -> AllowList:
    """The guard's Host names and origins (loopback, the bound address, the operator's), checked now."""
    from edge_sql.serve.guard import AllowList

    if not http and (allow_hosts or cors_origins):
        raise click.UsageError(
            "--allow-host and --cors-origin guard the HTTP server, and --mcp alone serves "
            "over stdio: add --http, or leave them out"
        )
    try:
        return AllowList.build(host, allow_hosts, cors_origins)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--cors-origin") from None


def _check_token(token: str | None, http: bool, host: str) -> None:
    """A token where one is needed, usable in a header, and not given where nothing checks it."""
    from edge_sql.serve.service import is_local_host

    if http and not is_local_host(host) and not token:
        raise click.UsageError(
            f"--host {host} is not a local address: set --token (or EDGE_SQL_TOKEN) so that "
            "only clients with the token can ask"
        )
    _check_token_text(token, "token", http)


def _check_token_text(token: str | None, name: str, http: bool) -> None:
    """A token (--token, --teach-token) usable in a header, and not given where nothing checks it."""
    option = "--" + name.replace("_", "-")
    if token is None:
        return
    if not token.strip():
        raise click.BadParameter("the token is empty", param_hint=option)
    if not all("!" <= c <= "~" for c in token):
        raise click.BadParameter(
            "use printable ASCII without spaces (clients send it in an HTTP header)", param_hint=option
        )
    given = click.get_current_context().get_parameter_source(name)
    if not http and given is ParameterSource.COMMANDLINE:
        raise click.UsageError(
            f"{option} protects the HTTP server, and --mcp alone serves over stdio: add --http, or leave the token out"
        )


def _serve(options: ServeOptions) -> None:
    from edge_sql.agent import load_prompt
    from edge_sql.api import Agent
    from edge_sql.api.agent_settings import DEFAULT_MAX_WAITING
    from edge_sql.serve.run import bind, serve_http, serve_stdio
    from edge_sql.serve.service import Limits, Service
    from edge_sql.tools import ReadOnlyDatabase

    o = options
    asked = o.settings
    databases, parallel = o.databases, asked.parallel
    # every failure the operator can cause shows before the model loads (which takes a while)
    for path in databases.values():
        load_for_db(path)  # data files are loaded here, with their progress, not on the first request
        ReadOnlyDatabase(path).close()
    load_prompt(asked.prompt_file)
    limits = Limits(
        max_body_bytes=o.max_body,
        max_question_chars=o.max_question,
        max_rows=o.max_rows,
        vote=asked.vote,
        seed=asked.seed,
        greedy=asked.greedy,
        max_waiting=asked.max_waiting,
        wait_timeout_s=o.queue_timeout,
    )
    listener = bind(o.host, o.port) if o.http else None
    try:
        _log(f"loading {asked.model or 'the default model'} ...")
        # serve's requests wait in the Agent's queue, each entering with --queue-size as its bound
        # (`limits`, serve/queue.py); the pool's own bound, for other callers, stays the default
        with Agent(settings=asked.with_(max_waiting=DEFAULT_MAX_WAITING), log=_log) as agent:
            line = agent.plan.choose_vote(asked.vote).line  # "auto": the plan's K, opened beside --parallel's
            if line is not None:
                _log(line)
            _log(f"loaded {agent.info.describe()}" + (f", {parallel} requests at a time" if parallel > 1 else ""))
            agent.warm_up()  # so that no client's first request waits for the grammar engine's set-up
            service = Service(agent, databases, limits, log=_log)
            try:
                if listener is not None:
                    serve_http(
                        service,
                        listener,
                        o.host,
                        token=o.token,
                        teach_token=o.teach_token,
                        log=_log,
                        open_page=o.open_page,
                        allow=o.allow,
                        quiet=o.quiet,
                    )
                else:
                    _log(f"MCP over stdio; databases: {', '.join(databases)}")
                    serve_stdio(service)
            finally:
                service.close()
    finally:
        if listener is not None:
            listener.close()
    _log("stopped")
