"""Running the interfaces: MCP over stdio, or the HTTP app (with MCP at /mcp) on uvicorn."""

from __future__ import annotations

import signal
import socket
from collections.abc import Callable

from edge_sql.serve.service import Service


def serve_stdio(service: Service) -> None:
    """MCP over stdin/stdout until the client closes stdin (what desktop MCP clients launch)."""
    import anyio

    from edge_sql.serve.mcp_server import build_mcp

    anyio.run(build_mcp(service).run_stdio_async)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket (port 0: a free one), bound before the server starts so the port is known."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host.strip("[]"), port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def serve_http(service: Service, host: str, port: int, *, token: str | None,
               log: Callable[[str], None]) -> None:
    """The HTTP API and MCP streamable HTTP on one port, until SIGINT/SIGTERM."""
    import uvicorn

    from edge_sql.serve.http_app import build_app
    from edge_sql.serve.mcp_server import build_mcp

    mcp = build_mcp(service)
    mcp_app = mcp.streamable_http_app(host=host)
    app = build_app(service, token=token, mcp_app=mcp_app, mcp_lifespan=lambda _app: mcp.session_manager.run())
    sock = bind(host, port)
    bound_port = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    log(f"listening on http://{shown}:{bound_port} (POST /v1/ask, GET /v1/databases, GET /health, MCP at /mcp)")
    config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=5,
                            lifespan="on")
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


def _raise_stopped(signum, frame) -> None:
    raise _Stopped
