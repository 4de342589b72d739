"""Take the README's screenshots of the web page: asking, streaming, answered.

Starts `edge-sql serve` on a free port with the given model and database, opens the page in
headless Chromium (Debian's `chromium` and `chromium-driver`, as the tests use), asks one
question and saves PNG files here: asking, streaming and answered (whatever the model gave),
then the answer's SQL replaced by `EDITED_SQL` and run from the page (its chart: bars).

    python docs/images/screenshots.py --model SmolLM2-135M-Instruct.Q8_0.gguf \
        --db chinook=edge_sql/data/chinook/chinook.sqlite -- --threads 2 --think-tokens 48 --max-rounds 3
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

HERE = Path(__file__).resolve().parent
QUESTION = "How many rows does the Album table have?"
EDITED_SQL = (
    "SELECT g.Name AS genre, COUNT(*) AS tracks FROM Track t JOIN Genre g USING (GenreId) "
    "GROUP BY g.Name ORDER BY tracks DESC LIMIT 12"
)


def start_server(model: str, db: str, extra: list[str], log: Path) -> tuple[subprocess.Popen, int]:
    command = [
        sys.executable,
        "-c",
        "from edge_sql.cli import main; main()",
        "serve",
        "--model",
        model,
        "--db",
        db,
        "--port",
        "0",
        *extra,
    ]
    process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log.open("w"))
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:
        match = re.search(r"listening on http://\S+?:(\d+) ", log.read_text())
        if match:
            return process, int(match.group(1))
        time.sleep(0.2)
    process.terminate()
    raise SystemExit(f"the server did not start:\n{log.read_text()}")


def browser() -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1000,900",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
    ):
        options.add_argument(argument)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver") or "chromedriver"), options=options)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--db", required=True, help="NAME=PATH")
    parser.add_argument("extra", nargs="*", help="more `edge-sql serve` options (after --)")
    args = parser.parse_args()
    name = args.db.partition("=")[0]
    with tempfile.TemporaryDirectory() as folder:
        process, port = start_server(args.model, args.db, args.extra, Path(folder) / "server.log")
        driver = browser()
        try:
            driver.get(f"http://127.0.0.1:{port}/?db={name}&q={QUESTION.replace(' ', '+')}")
            wait = WebDriverWait(driver, 600, poll_frequency=0.1)
            wait.until(lambda d: d.find_element(By.ID, "ask-form").is_displayed())
            driver.find_element(By.ID, "question").click()
            driver.save_screenshot(str(HERE / "page-asking.png"))
            driver.find_element(By.ID, "ask").click()
            wait.until(
                lambda d: (
                    len(d.find_elements(By.CSS_SELECTOR, "#rounds .call")) >= 3
                    or d.find_element(By.ID, "answer").is_displayed()
                    or "error" in d.find_element(By.ID, "status").get_attribute("class")
                )
            )
            print("streaming:", driver.find_element(By.ID, "status").text, file=sys.stderr)
            driver.set_window_size(1000, 1250)  # the Stop button and the rounds so far
            driver.save_screenshot(str(HERE / "page-streaming.png"))
            wait.until(lambda d: d.find_element(By.ID, "answer").is_displayed())
            driver.set_window_size(1000, 1000)
            driver.execute_script("document.getElementById('answer').scrollIntoView()")
            driver.save_screenshot(str(HERE / "page-answered.png"))
            driver.find_element(By.ID, "edit-sql").click()
            box = driver.find_element(By.ID, "sql-input")
            box.clear()
            box.send_keys(EDITED_SQL)
            driver.find_element(By.ID, "run-sql").click()
            wait.until(lambda d: d.find_element(By.ID, "status").text == "The edited SQL ran.")
            wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#chart svg"))  # Vega draws it
            driver.set_window_size(1000, 1300)
            driver.execute_script("document.getElementById('answer').scrollIntoView()")
            driver.save_screenshot(str(HERE / "page-edited.png"))
        finally:
            driver.quit()
            process.terminate()
            process.wait(timeout=60)


if __name__ == "__main__":
    main()
