"""What keeps other web pages out of a local server: Host, Origin and Content-Type, checked once
in front of every route (the page, its files, the API, /metrics and /mcp).

A page the user opens in a browser can send requests to `127.0.0.1:PORT` (cross-site "simple"
requests need no CORS preflight) or rename itself to it (DNS rebinding: `attacker.example`
resolving to 127.0.0.1). Three checks close both, with and without a token:

- **Host**: only loopback names and addresses, the address `serve` is bound to (with a wildcard
  bind: this machine's own names and addresses) and names the operator allows (`--allow-host`).
  A rebinding page's requests carry its own name, so they get 421 before any work.
- **Origin**: a request that has one (browsers send it on every cross-origin request and on
  every POST) must come from the server's own origin or from one the operator named
  (`--cors-origin`), which alone gets CORS headers and preflight answers. Otherwise 403.
- **Content-Type**: a POST body is `application/json` (or, from a client that sends no Origin,
  untyped), so no cross-site "simple" request (text/plain, form) reaches a handler: 415.

`AllowList` is built once at start; the same instance configures the MCP SDK's own transport
guard (`transport_security`), so the two can never disagree.
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from mcp.server.transport_security import TransportSecuritySettings
from starlette.datastructures import Headers
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
WILDCARD_ADDRESSES = ("0.0.0.0", "::", "")
CORS_METHODS = "GET, POST, DELETE, OPTIONS"
CORS_HEADERS = "Authorization, Content-Type, Accept, Last-Event-ID, Mcp-Session-Id, Mcp-Protocol-Version"
CORS_EXPOSE = "Mcp-Session-Id, Retry-After"


def host_name(value: str) -> str:
    """The name or address of a Host header or URL netloc, without port or brackets, lower case."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value[1:]
    if value.count(":") == 1:
        return value.split(":", 1)[0]
    return value  # a bare name, or an IPv6 address without brackets (not a valid Host, harmless)


def normalize_origin(url: str) -> str:
    """`scheme://host[:port]` as browsers send it in Origin; ValueError for anything else."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r} is not an origin (scheme://host[:port], e.g. http://localhost:3000)")
    if parts.path not in ("", "/") or parts.query or parts.fragment or parts.username or parts.password:
        raise ValueError(f"{url!r} is not an origin: give scheme://host[:port] without a path")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port is not None else "")


def machine_names() -> set[str]:
    """This machine's own names and addresses (for a wildcard bind): its host name, fully
    qualified name, what they resolve to, and the addresses it would use towards other hosts."""
    own = {socket.gethostname().lower(), socket.getfqdn().lower()}
    names = set(own)
    for name in own:
        try:
            names.update(str(info[4][0]).lower() for info in socket.getaddrinfo(name, None))
        except OSError:
            pass
    for family, probe in ((socket.AF_INET, "192.0.2.1"), (socket.AF_INET6, "2001:db8::1")):
        try:  # a UDP "connect" sends nothing: it only picks the local address of the route
            with socket.socket(family, socket.SOCK_DGRAM) as sock:
                sock.connect((probe, 9))
                names.add(str(sock.getsockname()[0]).lower())
        except OSError:
            pass
    return {name.split("%", 1)[0] for name in names if name}


@dataclass(frozen=True)
class AllowList:
    """The Host names and Origins the server answers: built once, used by every guard."""

    hosts: frozenset[str]
    cors_origins: tuple[str, ...] = ()
    extra: tuple[str, ...] = field(default=())  # the --allow-host names as given (for the log)

    @classmethod
    def build(
        cls,
        bound: str,
        allow_hosts: tuple[str, ...] = (),
        cors_origins: tuple[str, ...] = (),
        names: set[str] | None = None,
    ) -> AllowList:
        """Loopback, the bound address (a wildcard: `names`, by default this machine's), the
        operator's `allow_hosts`; `cors_origins` normalized (ValueError for one that is not an origin)."""
        hosts = set(LOOPBACK_NAMES)
        address = host_name(bound)
        address = "" if address in WILDCARD_ADDRESSES else address
        if address:
            hosts.add(address)
        else:
            hosts.update(machine_names() if names is None else names)
        extra = tuple(host_name(name) for name in allow_hosts if name.strip())
        hosts.update(extra)
        return cls(frozenset(hosts), tuple(dict.fromkeys(normalize_origin(url) for url in cors_origins)), extra)

    def host_allowed(self, host: str | None) -> bool:
        if not host:
            return False
        name = host_name(host)
        if name in self.hosts:
            return True
        try:
            return ipaddress.ip_address(name).is_loopback
        except ValueError:
            return False

    def cors_origin(self, origin: str) -> str | None:
        """The origin, normalized, when the operator named it with --cors-origin; else None."""
        try:
            normalized = normalize_origin(origin)
        except ValueError:
            return None
        return normalized if normalized in self.cors_origins else None

    def origin_allowed(self, origin: str, host: str) -> bool:
        """Same origin as the request's (allowed) Host, or one named with --cors-origin."""
        try:
            normalized = normalize_origin(origin)
        except ValueError:
            return False  # "null" (sandboxed frames, file://) and anything malformed
        return normalized in self.cors_origins or urlsplit(normalized).netloc == host.strip().lower()

    def transport_security(self) -> TransportSecuritySettings:
        """The MCP SDK's own Host/Origin check, from the same list (any port for each name)."""
        hosts = sorted(f"[{h}]" if ":" in h else h for h in self.hosts)
        return TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=[*hosts, *(f"{h}:*" for h in hosts)],
            allowed_origins=[
                *(f"{scheme}://{h}" for scheme in ("http", "https") for h in hosts),
                *(f"{scheme}://{h}:*" for scheme in ("http", "https") for h in hosts),
                *self.cors_origins,
            ],
        )


def refusal(status: int, message: str) -> Response:
    return JSONResponse({"error": message}, status_code=status)


class Guard:
    """The ASGI layer in front of everything: Host, then Origin (and CORS), then the body's type."""

    def __init__(self, app: ASGIApp, allow: AllowList) -> None:
        self.app = app
        self.allow = allow

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        host = headers.get("host", "")
        origin = headers.get("origin")
        response = self.check(scope, headers, host, origin)
        if response is not None and scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})  # policy violation (none is served today)
            return
        if response is not None:
            await response(scope, receive, send)
            return
        cors = self.allow.cors_origin(origin) if origin is not None else None
        if cors is None:
            await self.app(scope, receive, send)
            return

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *_raw(_cors_headers(cors))]}
            await send(message)

        await self.app(scope, receive, send_with_cors)

    def check(self, scope: Scope, headers: Headers, host: str, origin: str | None) -> Response | None:
        """The refusal for a request that must not reach the app, or None."""
        if not self.allow.host_allowed(host):
            return refusal(
                421,
                f"Host {host!r} is not served here (a DNS-rebinding page sends its own name); "
                "start serve with --allow-host NAME to allow it",
            )
        if origin is not None and not self.allow.origin_allowed(origin, host):
            return refusal(
                403,
                f"Origin {origin!r} may not call this server (cross-site request); "
                "start serve with --cors-origin URL to allow a web app",
            )
        method = scope.get("method", "GET")
        if method == "OPTIONS" and origin is not None and "access-control-request-method" in headers:
            cors = self.allow.cors_origin(origin)
            if cors is None:  # a same-origin page never sends a preflight
                return refusal(403, f"Origin {origin!r} is not a --cors-origin of this server")
            return Response(
                status_code=204,
                headers={
                    **dict(_cors_headers(cors)),
                    "Access-Control-Allow-Methods": CORS_METHODS,
                    "Access-Control-Allow-Headers": CORS_HEADERS,
                    "Access-Control-Max-Age": "600",
                },
            )
        if method == "POST":
            kind = headers.get("content-type")
            media = (kind or "").split(";", 1)[0].strip().lower()
            if media != "application/json" and (kind is not None or origin is not None):
                return refusal(
                    415, f"a POST body must be JSON: send Content-Type: application/json (got {kind or 'none'})"
                )
        return None


def _cors_headers(origin: str) -> list[tuple[str, str]]:
    """What a --cors-origin gets on every answer (and no other origin ever does)."""
    return [("Access-Control-Allow-Origin", origin), ("Access-Control-Expose-Headers", CORS_EXPOSE), ("Vary", "Origin")]


def _raw(headers: list[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    return [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in headers]
