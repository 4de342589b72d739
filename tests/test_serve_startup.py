"""`edge-sql serve` refuses what cannot work before it loads the model: one `Error:` line each.

Every case runs the real command in a subprocess with a real model, so a check that moved
after the load would show as a "loading" line (and, for the port, a traceback) in stderr.
"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from serve_helpers import CLI

CHINOOK = Path(__file__).resolve().parents[1] / "edge_sql" / "data" / "chinook" / "chinook.sqlite"


def _serve(model: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "serve", "--model", str(model), "--no-tune", *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        env=env,
    )


def _refused_before_the_load(run: subprocess.CompletedProcess[str], exit_code: int, message: str) -> None:
    assert run.returncode == exit_code, run.stderr
    assert "Traceback" not in run.stderr
    assert "loading" not in run.stderr  # the model was never loaded
    errors = [line for line in run.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and message in errors[0], run.stderr


def test_a_port_in_use_is_one_line_before_the_model_loads(tiny_gguf_fast):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        run = _serve(tiny_gguf_fast, "--db", f"chinook={CHINOOK}", "--port", str(port))
    _refused_before_the_load(run, 1, f"cannot listen on 127.0.0.1:{port}: the port is in use")


@pytest.mark.parametrize(
    ("args", "exit_code", "message"),
    [
        (
            ["--host", "no-such-host.invalid", "--token", "s3cret"],
            1,
            "cannot listen on no-such-host.invalid:0: the host name does not resolve",
        ),
        (
            ["--host", "192.0.2.1", "--token", "s3cret"],
            1,
            "cannot listen on 192.0.2.1:0: this machine has no such address",
        ),
        (["--host", "0.0.0.0"], 2, "--host 0.0.0.0 is not a local address: set --token"),
        (["--token", "  "], 2, "the token is empty"),
        (["--token", "two words"], 2, "printable ASCII without spaces"),
        (["--mcp", "--token", "s3cret"], 2, "--token protects the HTTP server"),
        (["--teach-token", " "], 2, "the token is empty"),
        (["--mcp", "--teach-token", "t3ach"], 2, "--teach-token protects the HTTP server"),
        (["--token", "s3cret", "--teach-token", "s3cret"], 2, "the teach token must differ from --token"),
    ],
)
def test_bad_listen_and_token_use(tiny_gguf_fast, args, exit_code, message):
    _refused_before_the_load(
        _serve(tiny_gguf_fast, "--db", f"chinook={CHINOOK}", "--port", "0", *args), exit_code, message
    )


@pytest.mark.parametrize(
    ("db", "exit_code", "message"),
    [
        ("chinook", 1, "database file not found: chinook"),  # a bare path, named by its stem
        ("=x.sqlite", 2, "'=x.sqlite' is not [NAME=]PATH"),
        ("chinook=", 2, "'chinook=' is not [NAME=]PATH"),
        ("a b=x.sqlite", 2, "database name 'a b': use letters, digits"),
        ("chinook={missing}", 1, "missing.sqlite"),
        ("chinook={folder}", 1, "a-folder"),
    ],
)
def test_bad_database_options(tiny_gguf_fast, tmp_path, db, exit_code, message):
    (tmp_path / "a-folder").mkdir()
    db = db.format(missing=tmp_path / "missing.sqlite", folder=tmp_path / "a-folder")
    _refused_before_the_load(_serve(tiny_gguf_fast, "--db", db, "--port", "0"), exit_code, message)


def test_a_database_named_twice(tiny_gguf_fast, tmp_path):
    run = _serve(tiny_gguf_fast, "--db", f"chinook={CHINOOK}", "--db", f"chinook={CHINOOK}", "--port", "0")
    _refused_before_the_load(run, 2, "database name 'chinook' given twice")
    other = tmp_path / "chinook.sqlite"  # two files of one stem, given without names
    run = _serve(tiny_gguf_fast, "--db", str(CHINOOK), "--db", str(other), "--port", "0")
    _refused_before_the_load(
        run, 2, f"database name 'chinook' given twice ({CHINOOK} and {other}): name them with NAME=PATH"
    )


def test_the_token_from_the_environment_does_not_stop_mcp(tiny_gguf_fast, tmp_path):
    """EDGE_SQL_TOKEN set for HTTP servers does not refuse `--mcp` (only an explicit --token does):
    the token check passes and the next check, of the databases, speaks instead."""
    import os

    env = {**os.environ, "EDGE_SQL_TOKEN": "s3cret"}
    run = _serve(tiny_gguf_fast, "--mcp", "--db", f"chinook={tmp_path / 'missing.sqlite'}", env=env)
    _refused_before_the_load(run, 1, "missing.sqlite")
