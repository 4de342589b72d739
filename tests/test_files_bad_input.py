"""Every bad input the files issue lists: one clear `Error:` line, exit status 1, nothing left in
the store, and the file itself unchanged."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from edge_sql.cli import main
from edge_sql.errors import FileLoadError
from edge_sql.files import files_root
from edge_sql.files.extras import require


@pytest.fixture(autouse=True)
def own_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EDGE_SQL_HOME", str(tmp_path / "home"))


def workbook(path: Path) -> Path:
    import xlsxwriter

    book = xlsxwriter.Workbook(str(path))
    sheet = book.add_worksheet("data")
    sheet.write_row(0, 0, ["a", "b"])
    sheet.write_row(1, 0, [1, 2])
    book.close()
    return path


def encrypted_workbook(path: Path) -> Path:
    from msoffcrypto.format.ooxml import OOXMLFile

    plain = workbook(path.with_name("plain.xlsx"))
    with open(plain, "rb") as source, open(path, "wb") as out:
        OOXMLFile(source).encrypt("secret", out)
    plain.unlink()
    return path


def zip_bomb(path: Path) -> Path:
    """300 MB of zeros in one entry: about 300 KB on disk, a ratio no workbook has."""
    with (
        zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as archive,
        archive.open("xl/worksheets/sheet1.xml", "w", force_zip64=True) as entry,
    ):
        block = bytes(16 * 1024 * 1024)
        for _ in range(300 // 16):
            entry.write(block)
    return path


def corrupt_workbook(path: Path) -> Path:
    data = workbook(path.with_name("whole.xlsx")).read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path


def write(name: str, data: bytes | str) -> Callable[[Path], Path]:
    def make(folder: Path) -> Path:
        path = folder / name
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        return path

    return make


def folder_of(files: dict[str, str]) -> Callable[[Path], Path]:
    def make(folder: Path) -> Path:
        target = folder / "export"
        target.mkdir()
        for name, text in files.items():
            (target / name).write_text(text)
        return target

    return make


CASES = {
    "unbalanced quotes": (write("q.csv", 'a,b\n1,"two\n3,4\n'), r"q\.csv line 3: a quoted field is never closed"),
    "text after a quote": (write("q.csv", 'a,b\n1,"two"x\n'), r"q\.csv line 2: text follows a closing quote"),
    "empty file": (write("e.csv", ""), r"e\.csv is empty"),
    "blank file": (write("e.csv", "\n\n  \n"), r"e\.csv is empty"),
    "only a header": (write("h.csv", "id,name\n"), r"h\.csv has a header line but no rows"),
    "binary named .csv": (write("b.csv", bytes(range(256)) * 8), r"b\.csv is not a text file \(it holds NUL bytes\)"),
    "UTF-16 text": (write("u.csv", "a,b\n1,2\n".encode("utf-16")), r"u\.csv is UTF-16 text"),
    "bad JSON line": (write("j.jsonl", '{"a": 1}\n{"a": \n'), r"j\.jsonl line 2 is not valid JSON"),
    "JSON line not an object": (write("j.jsonl", '{"a": 1}\n[1, 2]\n'), r"j\.jsonl line 2 is not a JSON object"),
    "encrypted workbook": (lambda d: encrypted_workbook(d / "secret.xlsx"), r"secret\.xlsx is password-protected"),
    "corrupt workbook": (lambda d: corrupt_workbook(d / "broken.xlsx"), r"broken\.xlsx is a corrupt workbook"),
    "not a workbook": (write("w.xlsx", "a,b\n1,2\n"), r"w\.xlsx is not an Excel workbook"),
    "zip bomb named .xlsx": (lambda d: zip_bomb(d / "bomb.xlsx"), r"bomb\.xlsx would unpack to 302 MB .*zip bomb"),
    "not a Parquet file": (write("p.parquet", "PAR1 but nothing else"), r"cannot read the Parquet file .*p\.parquet"),
    "no PAR1 header": (write("p.parquet", "a,b\n"), r"p\.parquet is not a Parquet file"),
    "two files, one table": (
        folder_of({"sales.csv": "a\n1\n", "sales.jsonl": '{"a": 1}\n'}),
        r"sales\.csv and .*sales\.jsonl would both be table 'sales'",
    ),
    "folder with no data file": (folder_of({"notes.txt": "hi"}), r"export is a folder with no file edge-sql can load"),
    "unsupported file": (write("notes.txt", "hi"), r"notes\.txt is not a file edge-sql can load"),
    "missing file": (lambda d: d / "absent.csv", r"file not found: .*absent\.csv"),
}


def _digests(path: Path) -> dict[str, str]:
    files = [path] if path.is_file() else sorted(path.rglob("*")) if path.is_dir() else []
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files if p.is_file()}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_exit_1_nothing_left(tmp_path: Path, case: str) -> None:
    make, message = CASES[case]
    data = tmp_path / "data"
    data.mkdir()
    path = make(data)
    before = _digests(path)
    result = CliRunner().invoke(main, ["files", "load", str(path)])
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert re.search(message, lines[0]), lines[0]
    assert result.stdout == ""
    root = files_root()
    assert not root.exists() or {p.name for p in root.iterdir()} <= {".lock", "index.json"}
    assert _digests(path) == before


def test_two_paths_one_table_name(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "x.csv").write_text("n\n1\n")
    (tmp_path / "b" / "x.csv").write_text("n\n2\n")
    result = CliRunner().invoke(main, ["files", "load", str(tmp_path / "a" / "x.csv"), str(tmp_path / "b" / "x.csv")])
    assert result.exit_code == 1 and "would both be table 'x'" in result.stderr


def test_fifo_is_refused_without_opening_it(tmp_path: Path) -> None:
    """A FIFO named .csv: opening it would block until a writer came, so the command runs in a
    child process under a deadline; it must answer at once."""
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    env = {**os.environ, "EDGE_SQL_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [sys.executable, "-m", "edge_sql", "files", "load", str(fifo)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"Error: {fifo} is a named pipe (FIFO): edge-sql loads regular files only"
    ]
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "edge_sql",
            "run",
            "--db",
            str(fifo),
            "--question",
            "x",
            "--model",
            str(tmp_path / "absent.gguf"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 1 and "named pipe (FIFO)" in run.stderr and "absent.gguf" not in run.stderr


def test_run_reports_a_bad_file_before_loading_the_model(tmp_path: Path) -> None:
    path = tmp_path / "h.csv"
    path.write_text("id\n")
    result = CliRunner().invoke(
        main, ["run", "--db", str(path), "--question", "x", "--model", str(tmp_path / "no.gguf")]
    )
    assert result.exit_code == 1 and "has a header line but no rows" in result.stderr and "no.gguf" not in result.output


def test_a_missing_extra_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if not installed
    with pytest.raises(
        FileLoadError, match=r"^reading Parquet files needs the `files` extra: pip install 'edge-sql\[files\]'$"
    ):
        require("pyarrow", "Parquet files")
