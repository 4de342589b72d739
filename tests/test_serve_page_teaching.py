"""The web page against a server with `--token` and `--teach-token` (issue 61), in a real
headless Chromium: the page asks with the access token and shows no teaching control until the
teach token is given (a wrong one is named); then a fix is stored for the question it sits
under, a question verified with other SQL is replaced only after "Replace it" (nothing stored
before: the whole store compared), and the reply names what was stored."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from selenium.webdriver.common.by import By

from serve_helpers import ServerProcess, serve_command
from test_serve_page import QUICK, ask, browser, downloads, element, give_token, open_page, page, wait_for

__all__ = ["browser", "downloads", "page"]  # the fixtures of test_serve_page, used here

TOKEN, TEACH = "page-ask", "page-teach"
QUESTION = "How many products?"


def _dump(store: Path) -> list[str]:
    with sqlite3.connect(store) as conn:
        return list(conn.iterdump())


def test_teaching_controls_show_only_with_the_teach_token_and_replacing_needs_a_confirmation(
    tiny_gguf_fast, page, tmp_path, monkeypatch
):
    shop = tmp_path / "data" / "shop.db"
    shop.parent.mkdir()
    with sqlite3.connect(shop) as conn:
        conn.execute("CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT, price_cents INTEGER)")
        conn.executemany("INSERT INTO products (name, price_cents) VALUES (?, ?)", [("tea", 450), ("mug", 1200)])
    conn.close()
    home = tmp_path / "home"
    monkeypatch.setenv("EDGE_SQL_HOME", str(home))
    command = [
        *serve_command(tiny_gguf_fast, {}, *QUICK, "--port", "0", "--token", TOKEN, "--teach-token", TEACH),
        "--db",
        str(shop),
    ]
    process = ServerProcess(command, tmp_path / "server.log")
    store = home / "knowledge.sqlite"
    teacher = {"Authorization": f"Bearer {TEACH}"}
    try:
        status, _, first = process.request(
            "POST",
            "/v1/verify",
            {"database": "shop", "question": QUESTION, "sql": "SELECT COUNT(id) FROM products"},
            headers=teacher,
        )
        assert status == 201, first
        open_page(page, process, "?db=shop")
        give_token(page, TOKEN)
        wait_for(page, lambda d: element(d, "ask-form").is_displayed(), 30, "the token did not open the form")
        assert element(page, "teach-login").is_displayed()
        wait_for(page, lambda d: element(d, "notes-panel").is_displayed(), 30, "no notes panel")
        element(page, "notes-panel").find_element(By.TAG_NAME, "summary").click()
        assert not element(page, "note-form").is_displayed()  # listing is for everyone, adding is not
        ask(page, "Which product is the cheapest?")
        wait_for(page, lambda d: element(d, "sql-box").is_displayed(), 30, "no answer shown")
        assert not element(page, "fix-sql").is_displayed() and not element(page, "mark-right").is_displayed()

        def teach_with(token: str) -> str:
            element(page, "teach-login").find_element(By.TAG_NAME, "summary").click()
            if not element(page, "teach-input").is_displayed():
                element(page, "teach-login").find_element(By.TAG_NAME, "summary").click()
            page.execute_script("document.getElementById('teach-login-status').textContent = ''")
            element(page, "teach-input").send_keys(token, "\n")
            wait_for(page, lambda d: element(d, "teach-login-status").text, 30, "nothing said about the teach token")
            return element(page, "teach-login-status").text

        said = teach_with("not-it")
        assert said == "The server refused this teach token (401): check the --teach-token it was started with."
        assert not element(page, "fix-sql").is_displayed()
        assert teach_with(TEACH).startswith("Teaching is on")
        assert not element(page, "teach-login").is_displayed()
        assert element(page, "fix-sql").is_displayed() and element(page, "note-form").is_displayed()
        # the question that has a verified answer: a fix under its answer is refused until confirmed
        ask(page, QUESTION)  # at once, from the verified answer stored above
        element(page, "fix-sql").click()
        box = element(page, "sql-input")
        box.clear()
        box.send_keys("SELECT COUNT(*) FROM products")
        before = _dump(store)
        element(page, "run-and-mark").click()
        wait_for(page, lambda d: element(d, "replace-verified").is_displayed(), 30, "no Replace it")
        assert element(page, "teach-status").text == (
            f'Not stored yet: refused: "{QUESTION}" already has a verified answer (v1): SELECT COUNT(id) FROM products; '
            "press Replace it to replace it, once the person confirms (the old one is kept in the history)"
        )
        assert _dump(store) == before  # the refusal stored nothing
        element(page, "replace-verified").click()
        wait_for(page, lambda d: element(d, "teach-status").text.startswith("Marked right"), 30, "not replaced")
        assert element(page, "teach-status").text.startswith(
            f'Marked right: replaced v1 (SELECT COUNT(id) FROM products) by verified v2: "{QUESTION}" -> '
            "SELECT COUNT(*) FROM products."
        )
        status, _, listed = process.request(
            "GET", "/v1/notes?database=shop", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert [(a["question"], a["sql"]) for a in listed["verified"]] == [(QUESTION, "SELECT COUNT(*) FROM products")]
        status, _, history = process.request(
            "GET", "/v1/notes/history?database=shop", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert [(c["surface"], c["action"]) for c in history["changes"]] == [("HTTP", "added"), ("page", "replaced")]
    finally:
        assert process.stop() == 0, process.log()
