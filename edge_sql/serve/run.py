"""Running the interfaces: MCP over stdio, or the HTTP app (with MCP at /mcp) on uvicorn."""

from __future__ import annotations

import errno
import signal
import socket
import threading
import webbrowser
from collections.abc import Callable
from types import FrameType

from edge_sql.errors import ListenError
from edge_sql.serve.guard import AllowList
from edge_sql.serve.service import Service


def serve_stdio(service: Service) -> None:
    """MCP over stdin/stdout until the client closes stdin (what desktop MCP clients launch)."""
    import anyio

    from edge_sql.serve.mcp_server import build_mcp

    anyio.run(build_mcp(service).run_stdio_async)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket (port 0: a free one), bound before the model loads: a port in use or
    a host that does not resolve is one line (ListenError), not a traceback after the load."""
    address = host.strip("[]")
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
        sock.listen(128)
    except OSError as exc:
        sock.close()
        raise ListenError(f"cannot listen on {url_host(host)}:{port}: {_bind_reason(exc, port)}") from None
    sock.set_inheritable(True)
    return sock


def url_host(host: str) -> str:
    """The host as a URL writes it: an IPv6 address in brackets."""
    address = host.strip("[]")
    return f"[{address}]" if ":" in address else address


def page_host(host: str) -> str:
    """Where a browser on this machine reaches a server bound to `host` (a wildcard: loopback)."""
    return {"0.0.0.0": "127.0.0.1", "::": "[::1]", "": "127.0.0.1"}.get(host.strip("[]"), url_host(host))


def _bind_reason(exc: OSError, port: int) -> str:
    if isinstance(exc, socket.gaierror):
        return f"the host name does not resolve ({exc.strerror}); give --host a name or address of this machine"
    if exc.errno == errno.EADDRINUSE:
        return "the port is in use (is another server running?); choose another --port, or --port 0 for a free one"
    if exc.errno == errno.EACCES:
        return f"permission denied (ports below 1024 need privileges; port {port} was asked)"
    if exc.errno == errno.EADDRNOTAVAIL:
        return "this machine has no such address; give --host an address of this machine (or 127.0.0.1)"
    return exc.strerror or str(exc)


def serve_http(
    service: Service,
    sock: socket.socket,
    host: str,
    *,
    token: str | None,
    log: Callable[[str], None],
    teach_token: str | None = None,
    open_page: bool = False,
    allow: AllowList | None = None,
    quiet: bool = False,
) -> None:
    """The HTTP API and MCP streamable HTTP on the socket from `bind`, until SIGINT/SIGTERM; with
    `open_page`, the web page opens in the default browser (the socket listens: its request waits).

    `allow` (default: loopback and `host`) guards every route, and configures the MCP SDK's own
    transport guard too; without `quiet`, each request is logged as one line."""
    import uvicorn

    from edge_sql.serve.http_app import build_app
    from edge_sql.serve.mcp_server import build_mcp

    allow = allow if allow is not None else AllowList.build(host)
    mcp = build_mcp(service)
    mcp_app = mcp.streamable_http_app(host=host, transport_security=allow.transport_security())
    app = build_app(
        service,
        token=token,
        teach_token=teach_token,
        mcp_app=mcp_app,
        mcp_lifespan=lambda _app: mcp.session_manager.run(),
        allow=allow,
        access_log=None if quiet else log,
    )
    bound_port = sock.getsockname()[1]
    url = f"http://{page_host(host)}:{bound_port}/"
    log(
        f"listening on http://{url_host(host)}:{bound_port} (the web page: {url} ; "
        "POST /v1/ask, GET /v1/databases, GET /health, GET /metrics, MCP at /mcp)"
    )
    log(
        f"answering Host names: {', '.join(sorted(allow.hosts))}"
        + (f"; cross-origin web apps: {', '.join(allow.cors_origins)}" if allow.cors_origins else "")
    )
    if teach_token:
        log("teaching (adding and removing notes, verifying, replacing, undoing) needs the teach token")
    if open_page:
        log(f"opening {url} in the browser")
        threading.Thread(target=webbrowser.open, args=(url,), daemon=True).start()
    config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=5, lifespan="on")
    previous = signal.signal(signal.SIGTERM, _raise_stopped)
    try:
        # uvicorn shuts down gracefully on SIGINT/SIGTERM, then re-raises the signal: ours turns
        # it into an exception, so the caller still closes the queue and the model
        uvicorn.Server(config).run(sockets=[sock])
    except (_Stopped, KeyboardInterrupt):
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)


class _Stopped(Exception):
    """SIGTERM arrived."""


def _raise_stopped(signum: int, frame: FrameType | None) -> None:
    raise _Stopped
