"""The web page at `/`: static files shipped in the wheel (static/: HTML, CSS, small ES modules).

The page talks to the same API as every other client (/v1/databases, /v1/ask with SSE, and
/v1/query for the SQL a user edits on it), so a token, when the server has one, guards the
data for the page as for them. The files hold no data and are served without the token: a
browser cannot send a bearer header when it opens a URL, so the page asks for the token and
sends it with each API call. Every response of the page carries a Content-Security-Policy that
allows only its own files and requests to its own server (no CDN, no inline script or style).
"""

from __future__ import annotations

from pathlib import Path

from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

STATIC_DIR = Path(__file__).with_name("static")
MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
}
CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    )
)
PAGE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


class PageInFront:
    """Answers `GET /` and `GET /static/<file>` with the page's files; everything else goes to
    `app` (the API, behind its token when there is one)."""

    def __init__(self, app: ASGIApp, static_dir: Path = STATIC_DIR) -> None:
        self.app = app
        files = {  # the page's files and, under vendor/, Vega's bundles (their licences are not served)
            f"/static/{p.relative_to(static_dir).as_posix()}": p
            for p in sorted(static_dir.rglob("*"))
            if p.suffix in MEDIA_TYPES and p.is_file()
        }
        files["/"] = files.pop("/static/index.html")
        self.responses = {route: _file_response(path) for route, path in files.items()}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and scope["path"] in self.responses:
            await self.responses[scope["path"]](scope, receive, send)
            return
        await self.app(scope, receive, send)


def _file_response(path: Path) -> Response:
    """One of the page's files, read once at start (they are small and never change)."""
    return Response(path.read_bytes(), media_type=MEDIA_TYPES[path.suffix], headers=PAGE_HEADERS)
