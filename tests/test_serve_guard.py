"""`edge-sql serve` closed to other web pages: real servers, real sockets, hand-made headers.

Each hostile request is one a web page in the user's browser can make (a DNS-rebinding name in
Host, a foreign Origin, a "simple" text/plain or form POST that needs no CORS preflight); each
must be refused before any work. The legitimate ones (curl without Origin, the page from its
own origin, localhost and 127.0.0.1, an allowed --cors-origin with its preflight) pass.
"""

from __future__ import annotations

import http.client
import json
import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from edge_sql.serve.guard import AllowList, host_name, normalize_origin
from serve_helpers import SMALL, ServerProcess, serve_command

CHINOOK = Path(__file__).resolve().parents[1] / "edge_sql" / "data" / "chinook" / "chinook.sqlite"
QUERY = {"database": "chinook", "sql": "SELECT Name FROM Artist ORDER BY ArtistId LIMIT 2"}
ASK = {"question": "How many albums are there?", "database": "chinook"}
APP = "http://app.example:3000"
TOKEN = "guard-s3cret"


@pytest.fixture(scope="module")
def chinook(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("guard-db") / "chinook.sqlite"
    shutil.copyfile(CHINOOK, path)
    return path


@pytest.fixture(scope="module")
def server(tiny_gguf_fast, chinook, tmp_path_factory):
    """The default: loopback, no token, no --cors-origin."""
    process = ServerProcess(
        serve_command(tiny_gguf_fast, {"chinook": chinook}, *SMALL, "--port", "0"),
        tmp_path_factory.mktemp("guard-log") / "server.log",
    )
    yield process
    assert process.stop() == 0, process.log()
    assert chinook.read_bytes() == CHINOOK.read_bytes()


@pytest.fixture(scope="module")
def opened(tiny_gguf_fast, chinook, tmp_path_factory):
    """Every address, a token, a LAN name, one web app's origin, and no access log."""
    process = ServerProcess(
        serve_command(
            tiny_gguf_fast,
            {"chinook": chinook},
            *SMALL,
            "--port",
            "0",
            "--host",
            "0.0.0.0",
            "--token",
            TOKEN,
            "--allow-host",
            "Proxy.Example",
            "--cors-origin",
            APP,
            "--quiet",
        ),
        tmp_path_factory.mktemp("guard-log-open") / "server.log",
    )
    yield process
    assert process.stop() == 0, process.log()


def send(
    server: ServerProcess, method: str, path: str, *, body: bytes | None = None, headers: dict[str, str]
) -> tuple[int, dict[str, str], str]:
    """Exactly these headers (http.client adds Host and Content-Length only when not given)."""
    conn = http.client.HTTPConnection(server.host, server.port, timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers)
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read().decode()
    finally:
        conn.close()


def no_work_done(server: ServerProcess) -> None:
    """Nothing reached a handler: no episode queued or run, no query run."""
    queue = server.health()["queue"]
    assert (queue["completed"], queue["cancelled"], queue["failed"], queue["running"], queue["waiting"]) == (
        0,
        0,
        0,
        False,
        0,
    )
    assert "ask #" not in server.log()


# ---- the table, row by row --------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("GET", "/", None),
        ("GET", "/static/app.js", None),
        ("GET", "/v1/databases", None),
        ("GET", "/health", None),
        ("GET", "/metrics", None),
        ("POST", "/v1/query", QUERY),
        ("POST", "/v1/ask", ASK),
        ("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    ],
)
def test_a_rebinding_host_gets_421_on_every_route(server, method, path, body):
    data = json.dumps(body).encode() if body is not None else None
    status, headers, text = send(
        server,
        method,
        path,
        body=data,
        headers={
            "Host": f"attacker.example:{server.port}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        },
    )
    assert status == 421 and headers["content-type"] == "application/json"
    assert "Host 'attacker.example:" in json.loads(text)["error"] and "Album" not in text
    assert "access-control-allow-origin" not in headers
    no_work_done(server)


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/query", QUERY),
        ("POST", "/v1/ask", ASK),
        ("GET", "/v1/databases", None),
        ("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
    ],
)
def test_a_foreign_origin_gets_403(server, method, path, body):
    data = json.dumps(body).encode() if body is not None else None
    status, headers, text = send(
        server,
        method,
        path,
        body=data,
        headers={
            "Origin": "http://attacker.example",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        },
    )
    assert status == 403 and "Origin 'http://attacker.example'" in json.loads(text)["error"]
    assert "access-control-allow-origin" not in headers and "Artist" not in text
    no_work_done(server)


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"],
)
@pytest.mark.parametrize("path", ["/v1/query", "/v1/ask"])
def test_a_simple_post_gets_415(server, content_type, path):
    """What a page can POST without a preflight: refused whether or not it says where it is from."""
    body = json.dumps(QUERY if path == "/v1/query" else ASK).encode()
    status, _, text = send(server, "POST", path, body=body, headers={"Content-Type": content_type})
    assert status == 415 and "application/json" in json.loads(text)["error"]
    status, _, text = send(
        server, "POST", path, body=body, headers={"Content-Type": content_type, "Origin": "http://attacker.example"}
    )
    assert status == 403
    no_work_done(server)


def test_an_untyped_post_from_a_page_is_refused(server):
    """fetch() with a Blob body sends no Content-Type and no preflight: its Origin gives it away."""
    status, _, _ = send(
        server,
        "POST",
        "/v1/query",
        body=json.dumps(QUERY).encode(),
        headers={"Origin": f"http://127.0.0.1:{server.port}"},
    )
    assert status == 415


def test_an_opaque_origin_is_refused(server):
    """Sandboxed frames and file:// pages send `Origin: null`."""
    status, _, _ = send(
        server,
        "POST",
        "/v1/query",
        body=json.dumps(QUERY).encode(),
        headers={"Origin": "null", "Content-Type": "application/json"},
    )
    assert status == 403


def test_a_preflight_from_a_foreign_origin_gets_403(server):
    status, headers, _ = send(
        server,
        "OPTIONS",
        "/v1/query",
        headers={
            "Origin": "http://attacker.example",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type",
        },
    )
    assert status == 403 and "access-control-allow-origin" not in headers


# ---- what must keep working -----------------------------------------------------------------------


def test_curl_without_origin_and_the_loopback_names(server):
    for host in ("127.0.0.1", "localhost", "LOCALHOST", "[::1]", "127.0.0.1"):
        status, headers, text = send(
            server,
            "POST",
            "/v1/query",
            body=json.dumps(QUERY).encode(),
            headers={"Host": f"{host}:{server.port}", "Content-Type": "application/json"},
        )
        assert status == 200 and json.loads(text)["rows"] == [["AC/DC"], ["Accept"]]
        assert "access-control-allow-origin" not in headers  # no CORS headers at all by default
    status, _, text = send(
        server, "POST", "/v1/query", body=json.dumps(QUERY).encode(), headers={}
    )  # untyped, as before
    assert status == 200 and json.loads(text)["columns"] == ["Name"]


def test_the_page_from_its_own_origin(server):
    """What the browser sends for the page and its API calls: same-origin Origin, JSON bodies."""
    for host in ("127.0.0.1", "localhost"):
        origin = f"http://{host}:{server.port}"
        status, headers, text = send(server, "GET", "/", headers={"Host": f"{host}:{server.port}"})
        assert status == 200 and "content-security-policy" in headers
        status, headers, text = send(
            server,
            "POST",
            "/v1/query",
            body=json.dumps(QUERY).encode(),
            headers={"Host": f"{host}:{server.port}", "Origin": origin, "Content-Type": "application/json"},
        )
        assert status == 200 and json.loads(text)["rows"][0] == ["AC/DC"]
        assert "access-control-allow-origin" not in headers
    # another port on the same name is another origin (another local server's page)
    status, _, _ = send(server, "GET", "/v1/databases", headers={"Origin": f"http://127.0.0.1:{server.port + 1}"})
    assert status == 403


def test_every_request_is_logged(server):
    send(server, "GET", "/v1/databases", headers={})
    send(server, "GET", "/v1/databases", headers={"Host": "attacker.example"})
    server.wait_for_log(r"GET /v1/databases 200 \d+\.\d ms")
    server.wait_for_log(r"GET /v1/databases 421 \d+\.\d ms")


def test_a_cors_origin_gets_its_preflight_and_headers(opened):
    auth = {"Authorization": f"Bearer {TOKEN}"}
    status, headers, _ = send(
        opened,
        "OPTIONS",
        "/v1/query",
        headers={
            "Origin": APP,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type",
        },
    )
    assert status == 204 and headers["access-control-allow-origin"] == APP
    assert "POST" in headers["access-control-allow-methods"]
    assert {"authorization", "content-type"} <= {
        h.strip().lower() for h in headers["access-control-allow-headers"].split(",")
    }
    status, headers, text = send(
        opened,
        "POST",
        "/v1/query",
        body=json.dumps(QUERY).encode(),
        headers={"Origin": APP, "Content-Type": "application/json", **auth},
    )
    assert status == 200 and headers["access-control-allow-origin"] == APP and headers["vary"] == "Origin"
    assert json.loads(text)["rows"][0] == ["AC/DC"]
    # the other origins still get nothing, and the page's own origin no CORS headers
    status, headers, _ = send(
        opened,
        "POST",
        "/v1/query",
        body=json.dumps(QUERY).encode(),
        headers={"Origin": "http://app.example:3001", "Content-Type": "application/json", **auth},
    )
    assert status == 403 and "access-control-allow-origin" not in headers


def test_with_a_token_and_every_address(opened):
    """--host 0.0.0.0: the machine's own name and --allow-host pass the guard (then the token
    decides); a rebinding name is refused even with the right token."""
    auth = {"Authorization": f"Bearer {TOKEN}"}
    own = socket.gethostname()
    for host in (own, "proxy.example", "localhost", "127.0.0.1"):
        status, _, text = send(opened, "GET", "/v1/databases", headers={"Host": f"{host}:{opened.port}", **auth})
        assert status == 200 and json.loads(text)["databases"][0]["name"] == "chinook", host
        assert send(opened, "GET", "/v1/databases", headers={"Host": f"{host}:{opened.port}"})[0] == 401
    for headers in ({"Host": "attacker.example"}, {"Origin": "http://attacker.example"}):
        status, _, text = send(
            opened,
            "POST",
            "/v1/query",
            body=json.dumps(QUERY).encode(),
            headers={"Content-Type": "application/json", **headers, **auth},
        )
        assert status in (421, 403) and "AC/DC" not in text
    status, _, _ = send(
        opened, "POST", "/v1/query", body=json.dumps(QUERY).encode(), headers={"Content-Type": "text/plain", **auth}
    )
    assert status == 415
    assert not re.search(r"^edge-sql serve: [A-Z]+ /\S* \d{3} [\d.]+ ms$", opened.log(), re.MULTILINE)  # --quiet
    # the OpenAI client sends its api_key as the bearer token
    import openai

    models = openai.OpenAI(base_url=f"http://127.0.0.1:{opened.port}/v1", api_key=TOKEN, max_retries=0).models.list()
    assert [model.id for model in models] == ["edge-sql/chinook"]
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"http://127.0.0.1:{opened.port}/v1", api_key="wrong", max_retries=0).models.list()


def test_mistaken_options(tiny_gguf_fast, chinook):
    for extra, message in (
        (["--cors-origin", "app.example"], "is not an origin"),
        (["--cors-origin", "http://app.example/page"], "without a path"),
        (["--mcp", "--allow-host", "x.example"], "--allow-host and --cors-origin guard"),
    ):
        run = subprocess.run(
            serve_command(tiny_gguf_fast, {"chinook": chinook}, *extra),
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert run.returncode == 2 and message in run.stderr, run.stderr


# ---- the allow-list itself, and the MCP SDK's guard built from it ---------------------------------


def test_host_names_and_origins():
    assert [host_name(h) for h in ("LocalHost:8765", "[::1]:80", "[::1]", "127.0.0.1", "a.example")] == [
        "localhost",
        "::1",
        "::1",
        "127.0.0.1",
        "a.example",
    ]
    assert normalize_origin("HTTP://App.Example:3000/") == "http://app.example:3000"
    assert normalize_origin("http://[::1]:8") == "http://[::1]:8"
    for bad in ("app.example", "ftp://a.example", "http://a.example/x", "null"):
        with pytest.raises(ValueError):
            normalize_origin(bad)


def test_the_mcp_guard_agrees_with_ours():
    """The SDK's TransportSecurityMiddleware, built from the same AllowList, answers the same Hosts."""
    import anyio
    from mcp.server.transport_security import TransportSecurityMiddleware
    from starlette.requests import Request

    allow = AllowList.build("127.0.0.1", ("lan.example",), (APP,))
    sdk = TransportSecurityMiddleware(allow.transport_security())

    async def sdk_allows(host: str, origin: str | None) -> bool:
        headers = [(b"host", host.encode()), (b"content-type", b"application/json")]
        if origin is not None:
            headers.append((b"origin", origin.encode()))
        request = Request({"type": "http", "method": "POST", "path": "/mcp", "headers": headers})
        return await sdk.validate_request(request, is_post=True) is None

    cases = [
        ("127.0.0.1:8765", None),
        ("localhost:8765", None),
        ("[::1]:8765", None),
        ("lan.example:8765", None),
        ("attacker.example:8765", None),
        ("localhost", None),
        ("127.0.0.1:8765", "http://127.0.0.1:8765"),
        ("127.0.0.1:8765", APP),
        ("127.0.0.1:8765", "http://attacker.example"),
        ("attacker.example:8765", APP),
    ]
    for host, origin in cases:
        ours = allow.host_allowed(host) and (origin is None or allow.origin_allowed(origin, host))
        assert anyio.run(sdk_allows, host, origin) == ours, (host, origin)
    assert AllowList.build("[::]", names={"box"}).hosts == {"localhost", "127.0.0.1", "::1", "box"}
    assert AllowList.build("[::1]").hosts == AllowList.build("::1").hosts == {"localhost", "127.0.0.1", "::1"}
    assert AllowList.build("0.0.0.0", names={"box", "10.0.0.7"}).hosts == {
        "localhost",
        "127.0.0.1",
        "::1",
        "box",
        "10.0.0.7",
    }
