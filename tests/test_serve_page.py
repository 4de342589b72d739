"""The web page of `edge-sql serve` in a real headless Chromium (Debian's `chromium` and
`chromium-driver`, driven by Selenium) against real servers with the fixture model and a real
copy of Chinook, which must be byte-identical after every test."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import shutil
import sqlite3
import time
from pathlib import Path

import pytest
from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.service import Service as DriverService
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select, WebDriverWait

from edge_sql.serve.web import CONTENT_SECURITY_POLICY
from edge_sql.tools import ReadOnlyDatabase, Toolbox
from serve_helpers import ServerProcess, read_events, serve_command

DATA_DIR = Path(__file__).resolve().parents[1] / "edge_sql" / "data"
STATIC_DIR = Path(__file__).resolve().parents[1] / "edge_sql" / "serve" / "static"
TOKEN = "page-s3cret"
# A short episode for the page's flow; a long one (many think tokens) to press Stop during.
QUICK = ["--threads", "1", "--ctx", "2048", "--max-rounds", "2", "--think-tokens", "16", "--no-tune"]
LONG = ["--threads", "1", "--ctx", "4096", "--max-rounds", "6", "--think-tokens", "600", "--no-tune"]
# NULL (63), double quotes (125), a 98-character cell (808), commas everywhere
EDITED_SQL = (
    "SELECT TrackId, Name, Composer, UnitPrice FROM Track WHERE TrackId IN (1, 63, 125, 808, 2) ORDER BY TrackId"
)
CHART_SQL = (
    "SELECT g.Name, COUNT(*) AS tracks, SUM(t.UnitPrice) AS price FROM Track t JOIN Genre g USING (GenreId) "
    "GROUP BY g.Name ORDER BY tracks DESC LIMIT 6"
)
WAIT_S = 240.0


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def chinook(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("page-db") / "chinook.sqlite"
    shutil.copyfile(DATA_DIR / "chinook" / "chinook.sqlite", path)
    return path


@pytest.fixture(autouse=True)
def database_unchanged(chinook):
    before = _digest(chinook)
    yield
    assert _digest(chinook) == before, "the database file changed"


@pytest.fixture(scope="module")
def server(tiny_gguf_fast, chinook, tmp_path_factory):
    log = tmp_path_factory.mktemp("page-log") / "server.log"
    process = ServerProcess(serve_command(tiny_gguf_fast, {"chinook": chinook}, *QUICK, "--port", "0"), log)
    yield process
    assert process.stop() == 0, process.log()


@pytest.fixture(scope="module")
def guarded(tiny_gguf_fast, chinook, tmp_path_factory):
    """A server with a token and long episodes."""
    log = tmp_path_factory.mktemp("page-log-token") / "server.log"
    process = ServerProcess(
        serve_command(tiny_gguf_fast, {"chinook": chinook}, *LONG, "--port", "0", "--token", TOKEN), log
    )
    yield process
    assert process.stop() == 0, process.log()


@pytest.fixture(scope="module")
def downloads(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("page-downloads")


@pytest.fixture(scope="module")
def browser(downloads):
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    assert chromium and driver_path, "the page tests need Debian's chromium and chromium-driver (see .ci/run)"
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1100,1000",
        "--disable-gpu",
        "--no-first-run",
    ):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=DriverService(driver_path), options=options)
    driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    yield driver
    driver.quit()


@pytest.fixture
def page(browser):
    """The browser; after the test, no page error and no CSP violation in its console."""
    browser.get_log("browser")  # drop what earlier tests left
    yield browser
    problems = [
        entry["message"]
        for entry in browser.get_log("browser")
        if entry["level"] == "SEVERE" and "the server responded with a status of 4" not in entry["message"]
    ]
    assert problems == []


def wait_for(driver: WebDriver, condition, timeout: float = WAIT_S, message: str = ""):
    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(lambda d: condition(d), message)


def element(driver: WebDriver, element_id: str):
    return driver.find_element(By.ID, element_id)


def open_page(driver: WebDriver, server: ServerProcess, query: str = "") -> None:
    driver.get(f"http://127.0.0.1:{server.port}/{query}")
    wait_for(
        driver,
        lambda d: element(d, "ask-form").is_displayed() or element(d, "token-panel").is_displayed(),
        30,
        "the page did not load",
    )


def give_token(driver: WebDriver, token: str) -> None:
    field = element(driver, "token-input")
    field.clear()
    field.send_keys(token, Keys.ENTER)


def ask(driver: WebDriver, question: str) -> None:
    """Type a question and press Enter; returns when the answer (or an error) is shown."""
    field = element(driver, "question")
    field.clear()
    field.send_keys(question, Keys.ENTER)
    wait_for(
        driver,
        lambda d: element(d, "answer").is_displayed() or "error" in element(d, "status").get_attribute("class"),
        message="no answer",
    )


def run_sql(driver: WebDriver, sql: str) -> None:
    """Edit the SQL and Run it; returns once its result or its error is shown."""
    element(driver, "edit-sql").click()
    box = element(driver, "sql-input")
    box.clear()
    box.send_keys(sql)
    element(driver, "run-sql").click()  # the page says "Running the SQL…" before this returns
    wait_for(
        driver,
        lambda d: element(d, "status").text in ("The edited SQL ran.", "The edited SQL did not run."),
        60,
        "the SQL did not run",
    )


def table_rows(driver: WebDriver) -> list[list[str]]:
    return [
        [cell.text for cell in row.find_elements(By.TAG_NAME, "td")]
        for row in driver.find_elements(By.CSS_SELECTOR, "#result-table tbody tr")
    ]


def shown(value) -> str:
    """A value as the page shows it and writes it to CSV: JavaScript's number text, NULL empty."""
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def sqlite_rows(path: Path, sql: str) -> list[list]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return [list(row) for row in conn.execute(sql)]


def downloaded(folder: Path, name: str, timeout: float = 30.0) -> bytes:
    target = folder / name
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if target.exists() and not list(folder.glob("*.crdownload")):
            return target.read_bytes()
        time.sleep(0.05)
    raise AssertionError(f"{name} was not downloaded: {sorted(p.name for p in folder.iterdir())}")


# ---- the files and their headers (plain HTTP) -------------------------------------------------


def test_page_and_assets_come_from_the_server_with_the_csp(server):
    status, headers, html = server.request("GET", "/")
    assert status == 200 and headers["content-type"] == "text/html; charset=utf-8"
    assert headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert "default-src 'none'" in CONTENT_SECURITY_POLICY and "script-src 'self'" in CONTENT_SECURITY_POLICY
    referenced = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert referenced and all(ref.startswith("/static/") or ref == "/" for ref in referenced), referenced
    modules = {p.name for p in STATIC_DIR.glob("*.js")}
    for path in STATIC_DIR.iterdir():
        if path.name == "index.html" or path.is_dir():
            continue
        status, headers, body = server.request("GET", f"/static/{path.name}")
        assert status == 200 and headers["content-security-policy"] == CONTENT_SECURITY_POLICY, path.name
        if path.suffix == ".js":
            assert headers["content-type"] == "text/javascript; charset=utf-8"
            imports = re.findall(r'from "([^"]+)"', body)
            assert all(i.startswith("./") and i[2:] in modules for i in imports), (path.name, imports)
            assert "http://" not in body.replace("http://www.w3.org/2000/svg", "") and "https://" not in body
    status, _, body = server.request("GET", "/static/../service.py")
    assert status == 404
    # Vega's bundles, served as the page's own files (chart.js loads them on the first chart)
    # beside their licences, which ship in the package and are not served
    vendor = STATIC_DIR / "vendor"
    assert sorted(p.name for p in vendor.glob("*.js")) == ["vega-embed.min.js", "vega-lite.min.js", "vega.min.js"]
    licences = (vendor / "THIRD_PARTY_LICENSES.txt").read_text(encoding="utf-8")
    assert all(f"\n{name} " in licences for name in ("vega", "vega-lite", "vega-embed", "vega-tooltip", "d3-scale"))
    for name in ("vega", "vega-lite", "vega-embed"):
        assert "Redistribution and use in source and binary forms" in (vendor / f"LICENSE-{name}.txt").read_text()
        status, headers, body = server.request("GET", f"/static/vendor/{name}.min.js")
        assert status == 200 and headers["content-type"] == "text/javascript; charset=utf-8"
        assert headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert body.encode() == (vendor / f"{name}.min.js").read_bytes()
    assert server.request("GET", "/static/vendor/THIRD_PARTY_LICENSES.txt")[0] == 404


def test_query_endpoint_answers_and_refuses_like_the_tools(server, chinook):
    status, _, body = server.request("POST", "/v1/query", {"database": "chinook", "sql": EDITED_SQL})
    assert status == 200 and body["columns"] == ["TrackId", "Name", "Composer", "UnitPrice"]
    assert body["rows"] == sqlite_rows(chinook, EDITED_SQL) and body["truncated"] is False
    status, _, body = server.request("POST", "/v1/query", {"database": "chinook", "sql": "SELECT * FROM Track"})
    assert status == 200 and len(body["rows"]) == 200 and body["truncated"] is True  # the server's --max-rows
    with ReadOnlyDatabase(chinook) as db:
        tools = Toolbox(db)
        status, _, body = server.request(
            "POST", "/v1/query", {"database": "chinook", "sql": "PRAGMA table_info(Genre)"}
        )
        assert status == 200 and [row[1] for row in body["rows"]] == ["GenreId", "Name"]  # a PRAGMA that reads
        for sql in (
            "DELETE FROM Album",
            "DROP TABLE Album",
            "UPDATE Genre SET Name = 'x'",
            "SELECT nope FROM Album",
            "PRAGMA writable_schema = ON",
            "ATTACH DATABASE ':memory:' AS other",
        ):
            status, _, body = server.request("POST", "/v1/query", {"database": "chinook", "sql": sql})
            assert status == 400 and f"Error: {body['error']}" == tools.call("run_query", {"sql": sql}).output
    for raw, code, message in [
        (b'{"database": "nope", "sql": "SELECT 1"}', 404, "unknown database 'nope'"),
        (
            b'{"database": "chinook", "sql": "SELECT 1", "path": "/etc/passwd"}',
            422,
            "unknown field(s) 'path'; allowed: database, sql",
        ),
        (b'{"database": "chinook"}', 422, "missing field 'sql'"),
        (b'{"database": "chinook", "sql": 1}', 422, "field 'sql' has the wrong type (int)"),
        (b'["chinook", "SELECT 1"]', 422, 'the body must be a JSON object: {"database": ..., "sql": ...}'),
        (b"not json", 422, "the body is not JSON"),
    ]:
        status, _, body = server.request("POST", "/v1/query", raw=raw)
        assert status == code and message in body["error"], body
    server.wait_for_log(r"query \(chinook\): error: no such column: nope\n")
    server.wait_for_log(r"query \(chinook\): 200\+ rows, \d+\.\d\d s\n")


def test_with_a_token_the_page_loads_but_the_api_needs_it(guarded):
    status, headers, _ = guarded.request("GET", "/")
    assert status == 200 and headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert guarded.request("GET", "/static/app.js")[0] == 200
    for method, path, body in [
        ("GET", "/v1/databases", None),
        ("GET", "/health", None),
        ("POST", "/v1/query", {"database": "chinook", "sql": "SELECT 1"}),
    ]:
        assert guarded.request(method, path, body)[0] == 401
    status, _, body = guarded.request(
        "POST", "/v1/query", {"database": "chinook", "sql": "SELECT 1"}, headers={"Authorization": f"Bearer {TOKEN}"}
    )
    assert status == 200 and body["rows"] == [[1]]


# ---- in the browser ---------------------------------------------------------------------------

RECORD_ORDER = """
window.seen = [];
new MutationObserver(() => {
  const rounds = document.querySelectorAll('#rounds .round').length;
  const calls = document.querySelectorAll('#rounds .call').length;
  const thinking = document.querySelectorAll('#rounds details.thinking').length;
  const open = document.querySelectorAll('#rounds details.thinking[open]').length;
  const answered = !document.getElementById('answer').hidden;
  const live = [...document.querySelectorAll('#rounds details.thinking[data-live] .think')]
    .map((node) => node.textContent.length).reduce((a, b) => a + b, 0);
  const counter = [...document.querySelectorAll('#rounds .counter')].map((node) => node.textContent).join('|');
  const last = window.seen[window.seen.length - 1];
  if (!last || last.rounds !== rounds || last.calls !== calls || last.thinking !== thinking || last.answered !== answered
      || last.live !== live || last.counter !== counter)
    window.seen.push({rounds, calls, thinking, open, answered, live, counter});
}).observe(document.body, {subtree: true, childList: true, attributes: true, characterData: true});
"""


def test_a_link_fills_the_form_and_enter_asks_while_rounds_stream(server, page, chinook):
    counts = server.health()["queue"]
    open_page(page, server, "?db=chinook&q=How+many+albums+are+there%3F&e=Album+holds+the+albums")
    assert element(page, "question").get_attribute("value") == "How many albums are there?"
    assert element(page, "evidence").get_attribute("value") == "Album holds the albums"
    assert "press Ask" in element(page, "status").text and not element(page, "work").is_displayed()
    assert server.health()["queue"] == counts  # the link does not run the question
    page.execute_script(RECORD_ORDER)
    element(page, "question").send_keys(Keys.END, Keys.ENTER)
    wait_for(page, lambda d: element(d, "answer").is_displayed(), message="no answer")
    seen = page.execute_script("return window.seen")
    first_round = next(i for i, s in enumerate(seen) if s["rounds"] > 0)
    answered = next(i for i, s in enumerate(seen) if s["answered"])
    assert first_round < answered and not seen[first_round]["answered"], seen  # rounds appeared while streaming
    assert any(s["calls"] > 0 and not s["answered"] for s in seen), seen  # and calls too
    assert any(s["thinking"] > 0 and not s["answered"] for s in seen), seen  # and the thinking,
    assert all(s["open"] == 0 for s in seen), seen  # collapsed
    # the thinking text as the model writes it, with a token counter, before the answer
    assert any(
        s["live"] > 0 and re.search(r"\d+ tokens?, [\d.]+ tok/s, \d+ s", s["counter"]) and not s["answered"]
        for s in seen
    ), seen
    stats = element(page, "stats").text
    rounds, calls = map(
        int, re.match(r"(\d+) rounds?, (\d+) calls?; [\d.]+ s; \d+ tokens generated at [\d.]+ tok/s", stats).groups()
    )
    assert len(page.find_elements(By.CSS_SELECTOR, "#rounds .round")) == rounds >= 1
    assert len(page.find_elements(By.CSS_SELECTOR, "#rounds .call")) == calls
    badges = [b.text for b in page.find_elements(By.CSS_SELECTOR, "#rounds .badge")]
    assert len(badges) == calls and set(badges) <= {"ok", "error"}
    thinking = page.find_elements(By.CSS_SELECTOR, "#rounds details.thinking")
    assert len(thinking) == rounds and not any(d.get_attribute("open") for d in thinking)  # collapsed
    if element(page, "result").is_displayed():  # the random model's SQL ran
        expected = sqlite_rows(chinook, element(page, "sql-code").text)
        assert len(table_rows(page)) == min(len(expected), 200)
    else:
        assert element(page, "answer-note").text.startswith("Error: ")
    health = server.health()["queue"]
    assert health["completed"] == counts["completed"] + 1 and not health["running"]


def test_edit_and_run_shows_the_table_the_chart_and_downloads(server, page, chinook, downloads):
    open_page(page, server)
    ask(page, "Which tracks are the longest?")
    run_sql(page, EDITED_SQL)
    assert element(page, "status").text == "The edited SQL ran." and not element(page, "query-error").is_displayed()
    expected = sqlite_rows(chinook, EDITED_SQL)
    headers = [th.text for th in page.find_elements(By.CSS_SELECTOR, "#result-table th")]
    assert headers == ["TrackId", "Name", "Composer", "UnitPrice"]
    assert element(page, "row-count").text == "5 rows" and not element(page, "truncated-note").is_displayed()
    rows = table_rows(page)
    assert rows[2][2] == "NULL" and expected[2][2] is None  # TrackId 63 has no composer
    long_cell = page.find_elements(By.CSS_SELECTOR, "#result-table tbody tr")[4].find_elements(By.TAG_NAME, "td")[2]
    full = expected[4][2]
    assert len(full) > 80 and long_cell.text.startswith(full[:80] + "…") and full not in long_cell.text
    long_cell.find_element(By.CSS_SELECTOR, "button.more").click()
    assert long_cell.find_element(By.TAG_NAME, "span").text == full  # the full value on demand
    for i, row in enumerate(rows):
        if i not in (2, 4):
            assert row == [shown(v) for v in expected[i]]

    # sorting: by Name ascending, then descending
    page.find_element(By.XPATH, "//th/button[text()='Name']").click()
    names = sorted(str(r[1]) for r in expected)
    assert [r[1] for r in table_rows(page)] == sorted(names, key=lambda s: s.lower())
    page.find_element(By.XPATH, "//th/button[text()='Name']").click()
    assert [r[1] for r in table_rows(page)] == sorted(names, key=lambda s: s.lower(), reverse=True)
    assert page.find_element(By.XPATH, "//th[button[text()='Name']]").get_attribute("aria-sort") == "descending"

    # CSV: byte for byte the JSON download's rows
    for name in ("edge-sql-chinook.csv", "edge-sql-chinook.json"):
        (downloads / name).unlink(missing_ok=True)
    element(page, "download-json").click()
    data = json.loads(downloaded(downloads, "edge-sql-chinook.json"))
    assert data["sql"] == EDITED_SQL and data["rows"] == expected and data["truncated"] is False
    element(page, "download-csv").click()
    text = io.StringIO()
    csv.writer(text, lineterminator="\r\n").writerows([data["columns"], *[[shown(v) for v in r] for r in data["rows"]]])
    assert downloaded(downloads, "edge-sql-chinook.csv") == text.getvalue().encode()
    # Name and Composer are text (TrackId an id): no chart, no switch, the table alone
    assert not element(page, "chart-box").is_displayed() and not element(page, "view-switch").is_displayed()
    assert element(page, "table-box").is_displayed()

    # more rows than the server returns: the count says so and the note shows
    run_sql(page, "SELECT TrackId, Name FROM Track")
    assert element(page, "row-count").text == "200+ rows" and element(page, "truncated-note").is_displayed()


def chart_marks(driver: WebDriver, role: str) -> list:
    """The drawn chart's marks of one kind (`bar`, `point`, `line mark`), once it is drawn."""
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#chart svg"), 30, "no chart was drawn")
    return driver.find_elements(By.CSS_SELECTOR, f'#chart svg [aria-roledescription="{role}"]')


def test_the_chart_its_switch_and_its_images(server, page, chinook, downloads):
    """The server's spec drawn by the vendored Vega under the CSP (the `page` fixture fails on
    any violation), every row of it, a switch to the table and back, PNG and SVG saved."""
    open_page(page, server)
    ask(page, "Which genres have the most tracks?")
    run_sql(page, CHART_SQL)  # a category and two numbers: grouped bars
    rows = sqlite_rows(chinook, CHART_SQL)
    assert element(page, "view-switch").is_displayed() and element(page, "chart-box").is_displayed()
    assert not element(page, "table-box").is_displayed()  # a chart says more: it comes first
    assert element(page, "show-chart").get_attribute("aria-pressed") == "true"
    bars = chart_marks(page, "bar")
    assert len(bars) == 2 * len(rows)
    labels = {bar.get_attribute("aria-label") for bar in bars}
    assert f"value: {rows[0][1]}; Name: {rows[0][0]}; series: tracks; column: tracks" in labels, labels
    caption = "A category with several numbers: grouped bars; all 6 rows."
    assert element(page, "chart-caption").text == caption

    element(page, "show-table").click()
    assert element(page, "table-box").is_displayed() and not element(page, "chart-box").is_displayed()
    assert element(page, "show-table").get_attribute("aria-pressed") == "true"
    assert [r[0] for r in table_rows(page)] == [r[0] for r in rows]
    element(page, "show-chart").click()
    assert element(page, "chart-box").is_displayed() and not element(page, "table-box").is_displayed()

    for name in ("edge-sql-chinook-chart.png", "edge-sql-chinook-chart.svg"):
        (downloads / name).unlink(missing_ok=True)
    element(page, "save-png").click()
    png = downloaded(downloads, "edge-sql-chinook-chart.png")
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    element(page, "save-svg").click()
    svg = downloaded(downloads, "edge-sql-chinook-chart.svg").decode()
    assert svg.startswith("<svg") and svg.count('aria-roledescription="bar"') == 2 * len(rows)
    assert element(page, "chart-status").text == "Saved as SVG."

    # a time and a number: a line through every month; the table keeps the user's choice
    element(page, "show-table").click()
    months = "SELECT strftime('%Y-%m', InvoiceDate) AS month, SUM(Total) AS revenue FROM Invoice GROUP BY month"
    run_sql(page, months)
    assert element(page, "table-box").is_displayed() and not element(page, "chart-box").is_displayed()
    element(page, "show-chart").click()
    assert len(chart_marks(page, "line mark")) == 1
    assert len(chart_marks(page, "point")) == len(sqlite_rows(chinook, months))

    # more rows than the server returns: points of all 200 it kept, and the chart says it was cut
    run_sql(page, "SELECT Milliseconds, Bytes FROM Track")
    assert element(page, "row-count").text == "200+ rows"
    assert len(chart_marks(page, "point")) == 200
    assert element(page, "chart-caption").text == "Two numbers: points; the first 200 rows only: the query had more."
    assert "The first 200 rows only: the query had more." in page.find_element(By.CSS_SELECTOR, "#chart svg").text

    # one row: no chart, no switch, the table
    run_sql(page, "SELECT COUNT(*) AS tracks FROM Track")
    assert not element(page, "view-switch").is_displayed() and not element(page, "chart-box").is_displayed()
    assert element(page, "table-box").is_displayed() and table_rows(page) == [["3503"]]


@pytest.mark.parametrize(("width", "height"), [(1280, 860), (390, 844)])
def test_the_answer_comes_into_view(server, page, width, height):
    """After an episode, whose rounds fill the page above it, the answer is in the window, on a
    laptop-sized one and on a phone-sized one."""
    page.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600},
    )
    try:
        open_page(page, server)
        ask(page, "Which customers spent the most?")
        wait_for(page, lambda d: element(d, "status").text in ("Answered.", "Stopped."), 30)
        wide = page.execute_script(  # boxes past the window, or whose words stick out of them
            f"return [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > {width} + 1"
            " || (e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX === 'visible'))"
            ".map(e => `${e.tagName}#${e.id}.${e.className} ${e.scrollWidth}/${e.clientWidth}`)"
        )
        assert page.execute_script("return innerHeight") == height, wide  # nothing wider than the window
        assert page.execute_script("return scrollY") > 0  # the page moved, the rounds stay above
        top, bottom, at_end = page.execute_script(
            "const box = document.getElementById('answer').getBoundingClientRect(); "
            "return [box.top, box.bottom, scrollY + innerHeight >= document.documentElement.scrollHeight - 1]"
        )
        # at the window's top; or lower, with the page scrolled to its end or the whole answer in the window
        assert -2 <= top < height and (top < 40 or at_end or bottom <= height), (top, bottom, at_end)
    finally:
        page.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


# every element the page writes a server's, a model's or a database's words into
FILLED_TEXT = (
    "server-line",
    "tables",
    "following-text",
    "notes-status",
    "status",
    "forced",
    "answer-note",
    "checks-line",
    "copy-status",
    "teach-status",
    "query-error",
    "row-count",
    "truncated-note",
    "chart-caption",
    "chart-status",
    "stats",
    "token-message",
    "teach-login-status",
)


def test_a_long_word_never_widens_a_phone_page(server, page):
    """A word longer than the window (an error quoting a random model's answer) breaks inside its
    element: a page wider than a phone is zoomed out for good, and the answer comes into view small."""
    page.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride", {"width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": True}
    )
    try:
        open_page(page, server)
        widths = page.execute_script(
            "const word = 'Bug'.repeat(40) + '\u0442\u0430\u043b\u0438'.repeat(40); const widths = {};"
            "for (const id of arguments[0]) {"
            "  let node = document.getElementById(id);"
            "  node.textContent = 'Error: the final answer was not SQL: ' + word;"
            "  for (; node && node !== document.body; node = node.parentElement) node.hidden = false;"
            "  widths[id] = document.documentElement.scrollWidth;"
            "  document.getElementById(id).textContent = '';"
            "}"
            "return widths",
            list(FILLED_TEXT),
        )
        assert {id: width for id, width in widths.items() if width > 390} == {}
        assert page.execute_script("return innerHeight") == 844
    finally:
        page.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


def test_a_write_is_refused_with_the_tools_message(server, page, chinook):
    open_page(page, server)
    ask(page, "How many genres are there?")
    with ReadOnlyDatabase(chinook) as db:
        tools = Toolbox(db)
        for sql in (
            "DELETE FROM Album",
            "DROP TABLE Genre",
            "INSERT INTO Genre (Name) VALUES ('x')",
            "SELECT nope FROM Album",
        ):
            run_sql(page, sql)
            error = element(page, "query-error")
            assert error.is_displayed() and error.text == tools.call("run_query", {"sql": sql}).output
            element(page, "cancel-edit").click()
            # back to the agent's answer (with SQL or without), the edit's error gone with the edit
            assert element(page, "sql-box").is_displayed() and not error.is_displayed()
    assert sqlite_rows(chinook, "SELECT COUNT(*) FROM Genre") == [[25]]


# an answer as the page stores it when the model submitted no SQL (a random model's usual end)
NO_SQL_ENTRY = {
    "database": "chinook",
    "question": "How many genres are there?",
    "evidence": None,
    "sql": "",
    "columns": None,
    "rows": None,
    "truncated": None,
    "ran": False,
    "checks": None,
    "stats": "2 rounds, 0 calls; 1.0 s; 40 tokens generated at 40.0 tok/s",
    "note": "Error: the model submitted no SQL",
    "time": "2026-12-06T08:00:00.000Z",
}


def test_cancel_goes_back_to_an_answer_with_no_sql(server, page):
    """Cancel returns to what Edit left, even an answer with no SQL (CI's CPU once gave one and
    Cancel hid the whole answer); only one's own SQL that never ran leaves nothing to show."""
    open_page(page, server)
    page.execute_script("localStorage.setItem('edge-sql-history', arguments[0])", json.dumps([NO_SQL_ENTRY]))
    page.refresh()
    open_page(page, server)
    page.find_elements(By.CSS_SELECTOR, "#history-list li button")[0].click()
    assert element(page, "sql-code").text == "(no SQL)"
    assert element(page, "answer-note").text == NO_SQL_ENTRY["note"]
    for sql in (None, "SELECT nope FROM Album"):
        element(page, "edit-sql").click()
        assert element(page, "sql-input").get_attribute("value") == ""
        if sql:
            element(page, "sql-input").send_keys(sql)
            element(page, "run-sql").click()
            wait_for(page, lambda d: element(d, "query-error").is_displayed(), 60, "the SQL did not fail")
        element(page, "cancel-edit").click()
        assert element(page, "answer").is_displayed() and element(page, "sql-box").is_displayed()
        assert element(page, "sql-code").text == "(no SQL)" and not element(page, "query-error").is_displayed()
    assert element(page, "answer-note").text == NO_SQL_ENTRY["note"]

    element(page, "own-sql").click()
    element(page, "cancel-edit").click()
    assert not element(page, "answer").is_displayed()  # nothing of one's own ran: nothing to show
    page.execute_script("localStorage.clear()")


# text cells a spreadsheet would run as formulas (OWASP), a negative number, plain text
FORMULA_SQL = (
    "SELECT '=cmd|'' /C calc''!A0' AS a, '+1+1' AS b, '-2+3' AS c, '@SUM(1)' AS d, char(9) || '=1' AS e, "
    "char(13) || '=2' AS f, -3 AS n, 'plain, \"quoted\"' AS p"
)


def test_own_sql_runs_before_any_question_and_its_csv_runs_no_formula(server, page, downloads):
    """The SQL editor is there from the start (nobody has to ask the agent first), and the CSV
    download neutralises formula cells as OWASP describes while the JSON stays exact."""
    counts = server.health()["queue"]
    open_page(page, server)
    assert not element(page, "answer").is_displayed() and not element(page, "work").is_displayed()
    element(page, "own-sql").click()
    assert element(page, "sql-input").is_displayed() and element(page, "sql-input").get_attribute("value") == ""
    element(page, "sql-input").send_keys(FORMULA_SQL)
    element(page, "run-sql").click()
    wait_for(page, lambda d: element(d, "status").text == "The edited SQL ran.", 60, "the SQL did not run")
    assert not element(page, "work").is_displayed()  # no question was asked
    assert server.health()["queue"] == counts
    assert element(page, "row-count").text == "1 row"
    assert table_rows(page)[0][0] == "=cmd|' /C calc'!A0"  # shown as it is on the page
    assert "a tab or a carriage" in element(page, "csv-note").text

    for name in ("edge-sql-chinook.csv", "edge-sql-chinook.json"):
        (downloads / name).unlink(missing_ok=True)
    element(page, "download-json").click()
    data = json.loads(downloaded(downloads, "edge-sql-chinook.json"))
    exact = ["=cmd|' /C calc'!A0", "+1+1", "-2+3", "@SUM(1)", "\t=1", "\r=2", -3, 'plain, "quoted"']
    assert data["rows"] == [exact] and data["sql"] == FORMULA_SQL
    element(page, "download-csv").click()
    rows = list(csv.reader(io.StringIO(downloaded(downloads, "edge-sql-chinook.csv").decode(), newline="")))
    assert rows == [
        ["a", "b", "c", "d", "e", "f", "n", "p"],
        ["'=cmd|' /C calc'!A0", "'+1+1", "'-2+3", "'@SUM(1)", "'\t=1", "'\r=2", "-3", 'plain, "quoted"'],
    ]


def test_history_reopens_a_question_with_its_sql_and_result(server, page):
    open_page(page, server)
    ask(page, "Which artists are there?")
    run_sql(page, CHART_SQL)
    page.refresh()
    open_page(page, server)
    entries = page.find_elements(By.CSS_SELECTOR, "#history-list li button")
    assert entries and entries[0].text == "Which artists are there?"
    element(page, "question").clear()
    entries[0].click()
    assert element(page, "question").get_attribute("value") == "Which artists are there?"
    assert element(page, "answer").is_displayed() and element(page, "sql-code").text
    assert "From the history" in element(page, "status").text
    link = element(page, "share-link").get_attribute("href")
    assert link.endswith("/?db=chinook&q=Which+artists+are+there%3F")


def test_the_token_is_asked_once_and_a_wrong_one_is_named(guarded, page):
    open_page(page, guarded)
    assert element(page, "token-panel").is_displayed() and not element(page, "ask-form").is_displayed()
    assert "needs its access token" in element(page, "token-message").text
    give_token(page, "wrong")
    wait_for(page, lambda d: "refused this token" in element(d, "token-message").text, 30)
    assert element(page, "token-panel").is_displayed() and not element(page, "ask-form").is_displayed()
    give_token(page, TOKEN)
    wait_for(page, lambda d: element(d, "ask-form").is_displayed(), 30, "the right token was not taken")
    assert not element(page, "token-panel").is_displayed()
    assert [o.text for o in element(page, "database").find_elements(By.TAG_NAME, "option")] == ["chinook"]
    page.refresh()  # kept for this tab: not asked again
    open_page(page, guarded)
    assert element(page, "ask-form").is_displayed() and not element(page, "token-panel").is_displayed()


def test_stop_cancels_the_running_episode(guarded, page):
    open_page(page, guarded)
    if element(page, "token-panel").is_displayed():
        give_token(page, TOKEN)
        wait_for(page, lambda d: element(d, "ask-form").is_displayed(), 30)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    before = guarded.request("GET", "/health", headers=headers)[2]["queue"]
    field = element(page, "question")
    field.clear()
    field.send_keys("List every track with its album and artist", Keys.ENTER)
    live = "#rounds details.thinking[data-live]"  # the model is writing round 1's thinking
    wait_for(page, lambda d: d.find_elements(By.CSS_SELECTOR, live), 60, "no thinking streamed")
    assert element(page, "stop").is_displayed()
    element(page, "stop").click()
    wait_for(page, lambda d: element(d, "status").text.startswith("Stopped"), 30, "the page did not stop")
    # the round that was writing says it stopped, not "Thinking…" for ever
    assert not page.find_elements(By.CSS_SELECTOR, live)
    summaries = [s.get_attribute("textContent") for s in page.find_elements(By.CSS_SELECTOR, "#rounds summary")]
    assert summaries and summaries[-1] == "Thinking (stopped)", summaries
    assert "…" not in element(page, "rounds").get_attribute("textContent").replace("tok/s", "")
    deadline = time.monotonic() + 60
    while True:
        queue = guarded.request("GET", "/health", headers=headers)[2]["queue"]
        if not queue["running"] and queue["waiting"] == 0:
            break
        if time.monotonic() > deadline:
            raise TimeoutException(f"the server still runs the episode: {queue}")
        time.sleep(0.1)
    assert queue["cancelled"] == before["cancelled"] + 1 and queue["completed"] == before["completed"]
    guarded.wait_for_log(r"ask #\d+ \(chinook\): cancelled")
    assert not element(page, "answer").is_displayed() and element(page, "ask").is_enabled()


def test_a_database_by_its_path_shows_its_own_tables_and_example(tiny_gguf_fast, chinook, page, tmp_path):
    """`--db shop.db` (no NAME=) serves it as "shop"; the page counts its one table in the singular
    and the example in the question box names that table, not Chinook's."""
    shop = tmp_path / "shop.db"
    with sqlite3.connect(shop) as conn:
        conn.execute("CREATE TABLE order_items (id INTEGER PRIMARY KEY, product TEXT, quantity INTEGER)")
    conn.close()
    before = _digest(shop)
    command = [*serve_command(tiny_gguf_fast, {"chinook": chinook}, *QUICK, "--port", "0"), "--db", str(shop)]
    process = ServerProcess(command, tmp_path / "server.log")
    try:
        status, _, listed = process.request("GET", "/v1/databases")
        assert status == 200 and [d["name"] for d in listed["databases"]] == ["chinook", "shop"]
        open_page(page, process, "?db=shop")
        assert element(page, "tables").text == "1 table: order_items"
        assert element(page, "question").get_attribute("placeholder") == "How many order items are there?"
        chinook_tables = next(d["tables"] for d in listed["databases"] if d["name"] == "chinook")
        Select(element(page, "database")).select_by_value("chinook")
        assert element(page, "tables").text == f"{len(chinook_tables)} tables: {', '.join(chinook_tables)}"
        assert chinook_tables[0] == "Album"
        assert element(page, "question").get_attribute("placeholder") == "How many albums are there?"
    finally:
        assert process.stop() == 0, process.log()
    assert _digest(shop) == before and sorted(p.name for p in tmp_path.iterdir()) == ["server.log", "shop.db"]


def test_mark_right_fix_and_follow_up_from_under_an_answer(tiny_gguf_fast, page, tmp_path, monkeypatch):
    """The notes panel and the buttons under an answer (issue 51), with a server keeping its
    knowledge in a store of its own: notes added (one tied to a word), a blank one refused, one
    removed, the other given with the question; a fix that writes is refused and stores nothing,
    a fix that runs is marked right, the
    same question is then answered at once as a verified answer and marked right again, and a
    follow-up carries the previous question and its SQL."""
    shop = tmp_path / "data" / "shop.db"
    shop.parent.mkdir()
    with sqlite3.connect(shop) as conn:
        conn.execute("CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT, price_cents INTEGER)")
        conn.executemany("INSERT INTO products (name, price_cents) VALUES (?, ?)", [("tea", 450), ("mug", 1200)])
    conn.close()
    before = _digest(shop)
    monkeypatch.setenv("EDGE_SQL_HOME", str(tmp_path / "home"))
    command = [*serve_command(tiny_gguf_fast, {}, *QUICK, "--port", "0"), "--db", str(shop)]
    process = ServerProcess(command, tmp_path / "server.log")

    def verified() -> list[dict]:
        status, _, body = process.request("GET", "/v1/notes?database=shop")
        assert status == 200, body
        return body["verified"]

    def teach_status() -> str:
        wait_for(page, lambda d: element(d, "teach-status").text, 30, "nothing said about marking it right")
        return element(page, "teach-status").text

    try:
        open_page(page, process, "?db=shop")
        # the notes panel: add a note, a tied one, refuse a blank one, remove the tied one
        wait_for(page, lambda d: element(d, "notes-panel").is_displayed(), 30, "no notes panel")
        element(page, "notes-panel").find_element(By.TAG_NAME, "summary").click()
        assert element(page, "notes-count").text == "(0)"

        def add_note(text: str, words: str = "") -> str:
            element(page, "note-words").send_keys(words)
            element(page, "note-text").send_keys(text, Keys.ENTER)
            wait_for(page, lambda d: element(d, "notes-status").text.startswith(("Added: ", "Not added: ")), 30)
            status = element(page, "notes-status").text
            page.execute_script("document.getElementById('notes-status').textContent = ''")
            return status

        assert add_note("prices are in cents") == "Added: prices are in cents"
        assert add_note("a mug is a cup", "mug") == "Added: a mug is a cup"
        assert add_note("   ").startswith("Not added: empty note")
        assert element(page, "notes-count").text == "(2)"  # each line comes once the list is redrawn
        notes = page.find_elements(By.CSS_SELECTOR, "#notes-list li")
        assert [n.text for n in notes] == [
            "prices are in cents Remove",
            "a mug is a cup (only with questions about: mug) Remove",
        ]
        notes[1].find_element(By.TAG_NAME, "button").click()
        wait_for(page, lambda d: element(d, "notes-status").text == "Removed: a mug is a cup", 30)
        assert element(page, "notes-count").text == "(1)"
        status, _, listed = process.request("GET", "/v1/notes?database=shop")
        assert status == 200 and [n["text"] for n in listed["notes"]] == ["prices are in cents"]
        ask(page, "How many products?")
        given = [li.text for li in page.find_elements(By.CSS_SELECTOR, "#given-list li")]
        assert given == ["Note: prices are in cents"]  # the note that always applies went with the question
        assert element(page, "teach").is_displayed() and element(page, "fix-sql").is_displayed()
        assert element(page, "mark-right").is_displayed() == element(page, "result").is_displayed()  # ran or not
        # a fix that writes is refused by the tools: nothing stored
        element(page, "fix-sql").click()
        assert element(page, "run-and-mark").is_displayed()
        box = element(page, "sql-input")
        box.clear()
        box.send_keys("DELETE FROM products")
        element(page, "run-and-mark").click()
        wait_for(page, lambda d: element(d, "status").text == "The edited SQL did not run.", 30)
        assert element(page, "query-error").is_displayed() and verified() == []
        box.clear()
        box.send_keys("SELECT COUNT(*) FROM products")
        element(page, "run-and-mark").click()
        assert teach_status().startswith(  # what it stored, under the question it sits under
            'Marked right: kept as verified (v1): "How many products?" -> SELECT COUNT(*) FROM products. Asked again'
        )
        stored = verified()
        assert [(a["question"], a["sql"]) for a in stored] == [("How many products?", "SELECT COUNT(*) FROM products")]
        # the same question (other case and punctuation): answered at once, shown as a verified answer
        completed = process.health()["queue"]["completed"]
        ask(page, "how many PRODUCTS")
        day = stored[0]["verified_at"][:10]
        given = [li.text for li in page.find_elements(By.CSS_SELECTOR, "#given-list li")]
        assert given == [f"A verified answer from {day}: its SQL was run afresh, no model asked."]
        assert element(page, "stats").text == "No episode: a verified answer, its SQL run afresh."
        assert table_rows(page) == [["2"]] and not element(page, "work").is_displayed()
        assert process.health()["queue"]["completed"] == completed + 1
        element(page, "mark-right").click()
        assert teach_status().startswith(
            'Marked right: already verified (v1), nothing changed: "How many products?" -> SELECT COUNT(*) FROM products'
        )
        assert len(verified()) == 1  # the same answer: nothing doubled, nothing replaced
        # a follow-up: the previous question and its SQL go with the next question
        element(page, "follow-up").click()
        assert element(page, "following").is_displayed()
        assert element(page, "following-text").text == 'Following the answer to "how many PRODUCTS".'
        assert element(page, "question").get_attribute("value") == ""
        ask(page, "and their names?")
        assert not element(page, "following").is_displayed()
        given = [li.text for li in page.find_elements(By.CSS_SELECTOR, "#given-list li")]
        assert 'The previous answer: "how many PRODUCTS"' in given, given
    finally:
        assert process.stop() == 0, process.log()
    assert _digest(shop) == before and [p.name for p in shop.parent.iterdir()] == ["shop.db"]


def test_open_starts_the_browser_on_the_page(tiny_gguf_fast, chinook, tmp_path, monkeypatch):
    opener = tmp_path / "opener.sh"  # stands in for the user's browser: $BROWSER is what webbrowser runs
    opener.write_text('#!/bin/sh\nprintf %s "$1" > "$(dirname "$0")/opened.txt"\n')
    opener.chmod(0o755)
    monkeypatch.setenv("BROWSER", f"{opener} %s")
    process = ServerProcess(
        serve_command(tiny_gguf_fast, {"chinook": chinook}, *QUICK, "--port", "0", "--open"), tmp_path / "server.log"
    )
    try:
        opened = tmp_path / "opened.txt"
        deadline = time.monotonic() + 30
        while not opened.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert opened.read_text() == f"http://127.0.0.1:{process.port}/"
        status, headers, _ = process.request("GET", "/")
        assert status == 200 and headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    finally:
        assert process.stop() == 0, process.log()


def test_a_waiting_question_shows_its_place_and_stop_takes_it_out_of_the_queue(guarded, page):
    headers = {"Authorization": f"Bearer {TOKEN}"}
    open_page(page, guarded)
    if element(page, "token-panel").is_displayed():
        give_token(page, TOKEN)
        wait_for(page, lambda d: element(d, "ask-form").is_displayed(), 30)
    before = guarded.request("GET", "/health", headers=headers)[2]["queue"]
    other = guarded.connection()  # another client's long episode runs first
    other.request(
        "POST",
        "/v1/ask",
        body=json.dumps({"question": "Which albums are longest?", "database": "chinook"}),
        headers={"Accept": "text/event-stream", **headers},
    )
    response = other.getresponse()
    assert [name for name, _ in read_events(response, until="running")] == ["queued", "running"]
    try:
        field = element(page, "question")
        field.clear()
        field.send_keys("How many customers are there?", Keys.ENTER)
        wait_for(page, lambda d: element(d, "status").text == "Waiting in the queue: position 1.", 30)
        assert guarded.request("GET", "/health", headers=headers)[2]["queue"]["waiting"] == 1
        element(page, "stop").click()
        wait_for(page, lambda d: element(d, "status").text.startswith("Stopped"), 30)
        deadline = time.monotonic() + 30
        while guarded.request("GET", "/health", headers=headers)[2]["queue"]["waiting"] != 0:
            assert time.monotonic() < deadline, "the stopped question is still waiting"
            time.sleep(0.05)
        queue = guarded.request("GET", "/health", headers=headers)[2]["queue"]
        assert queue["running"] and queue["cancelled"] == before["cancelled"] + 1
    finally:
        other.close()  # the other client goes away: its episode stops too
    deadline = time.monotonic() + 60
    while (queue := guarded.request("GET", "/health", headers=headers)[2]["queue"])["running"]:
        assert time.monotonic() < deadline, queue
        time.sleep(0.1)
    assert queue["cancelled"] == before["cancelled"] + 2 and queue["completed"] == before["completed"]


def test_a_value_not_in_its_column_is_marked_with_the_values_found(server, page, chinook):
    """The answer's checks on the page (checks.js): a literal its column does not hold is marked,
    with the values found instead, and the confidence line gives the reason."""
    open_page(page, server)
    ask(page, "How many tracks has each genre?")
    run_sql(
        page,
        "SELECT g.Name, COUNT(*) FROM Track t JOIN Genre g USING (GenreId) "
        "WHERE g.Name IN ('rock', 'Jazz') GROUP BY g.Name",
    )
    assert element(page, "status").text == "The edited SQL ran."
    missing = page.find_elements(By.CSS_SELECTOR, "#sql-code .sql-missing")
    assert [m.text for m in missing] == ["'rock'"]
    assert missing[0].get_attribute("title") == 'not in Genre.Name; closest: "Rock"'
    assert page.find_element(By.CSS_SELECTOR, "#sql-code .sql-found").text == '[not in Genre.Name; found: "Rock"]'
    assert element(page, "checks-line").text == (
        "Checks: doubtful; Genre.Name IN 'rock' matches no row; closest: 'Rock' (in another case)"
    )
    assert "doubtful" in element(page, "checks-line").get_attribute("class").split()
    assert element(page, "sql-code").text.startswith("SELECT g.Name, COUNT(*) FROM Track t JOIN Genre g")


def test_each_name_of_the_answer_links_to_the_call_that_showed_it(server, page):
    """Every call on the page has an id its sightings link to; a name shown by a call becomes a
    link to it, a name never shown is marked (crafted checks on the page's own rounds)."""
    open_page(page, server)
    ask(page, "How many albums are there?")
    ids = [c.get_attribute("id") for c in page.find_elements(By.CSS_SELECTOR, "#rounds .call")]
    assert ids and all(re.fullmatch(r"call-\d+-\d+", i) for i in ids)
    first = re.fullmatch(r"call-(\d+)-(\d+)", ids[0])
    shown = {"tool": "describe_table", "round": int(first[1]), "call": int(first[2])}
    checks = {
        "confidence": "doubtful",
        "reasons": ["column Album.Title was never shown to the model"],
        "names": [
            {"kind": "table", "name": "Album", "table": "Album", "column": None, "seen": [shown]},
            {"kind": "column", "name": "Album.Title", "table": "Album", "column": "Title", "seen": []},
        ],
        "values": [],
    }
    result = page.execute_async_script(
        """
        const [checks, done] = arguments;
        Promise.all([import("/static/sqltext.js"), import("/static/checks.js")]).then(([sqltext, marks]) => {
          const code = document.createElement("code");
          code.append(sqltext.highlightSql('SELECT "title" FROM [album] a'));
          const line = document.createElement("p");
          marks.showChecks(code, line, checks);
          const link = code.querySelector("a.sql-link");
          done([link.textContent, link.getAttribute("href"), link.title,
                code.querySelector(".sql-unseen").textContent, code.textContent, line.textContent]);
        });
    """,
        checks,
    )
    assert result == [
        "[album]",
        f"#{ids[0]}",
        f"table Album: shown by round {first[1]}, describe_table",
        '"title"',
        'SELECT "title" FROM [album] a',
        "Checks: doubtful; column Album.Title was never shown to the model",
    ]
    assert page.find_element(By.ID, ids[0]).is_displayed()
