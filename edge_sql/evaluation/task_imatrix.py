"""Make an importance matrix file for a model: over the task calibration or a text file.

`make_imatrix` is what `edge-sql imatrix` runs; `task_imatrix_for` keeps one task imatrix per
model file beside it (`<stem>.task.imatrix.gguf`), made once and reused while it is newer than
the model and was made from the current calibration: `quantize --imatrix auto`, `pull` and the
bench's `*-imatrix` variants share it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from edge_sql.agent.transcript import Transcript
from edge_sql.convert.imatrix_file import read_imatrix, write_imatrix
from edge_sql.errors import EdgeSqlError, ImatrixError
from edge_sql.evaluation.imatrix_text import task_calibration
from edge_sql.runtime import Session
from edge_sql.runtime.probes.imatrix import DEFAULT_CHUNK, CollectReport, collect_imatrix, unquantized_file_type

AUTO = "auto"
TASK_SUFFIX = ".task.imatrix.gguf"


@dataclass(frozen=True)
class ImatrixReport:
    """What `make_imatrix` wrote and what it ran over."""

    output: Path
    dataset: str
    entries: int
    collected: CollectReport

    def summary(self) -> str:
        c = self.collected
        return (
            f"wrote {self.output}: {self.entries} weights, {c.tokens:,} tokens in {c.sequences} sequences "
            f"({self.dataset}) in {c.seconds:.1f} s"
        )


def make_imatrix(
    model: Path,
    out: Path,
    *,
    calibration: str | Path = AUTO,
    chunk_size: int = DEFAULT_CHUNK,
    n_threads: int | None = None,
    force: bool = False,
    log: Callable[[str], None] = lambda _msg: None,
) -> ImatrixReport:
    """Collect the importance matrix of the GGUF `model` over `calibration` ("auto": the task
    calibration; otherwise a UTF-8 text file, tokenized as text) and write it to `out`."""
    from edge_sql.runtime import Session

    model, out = Path(model), Path(out)
    if out.exists() and not force:
        raise ImatrixError(f"{out} already exists; use --force to overwrite it", path=out)
    if not out.parent.is_dir():
        raise ImatrixError(f"the output folder {out.parent} does not exist", path=out)
    unquantized_file_type(model)  # before any text is prepared
    with Session(model, n_ctx=256, n_threads=n_threads) as session:
        dataset, sequences = _calibration_tokens(session, calibration)
        log(f"collecting over {sum(map(len, sequences)):,} tokens in {len(sequences)} sequences ({dataset})")
        last = [0]

        def progress(done: int, total: int) -> None:
            if done * 10 // total > last[0]:
                last[0] = done * 10 // total
                log(f"  {done:,}/{total:,} tokens")

        imatrix, collected = collect_imatrix(
            session, sequences, datasets=[dataset], chunk_size=chunk_size, progress=progress
        )
    write_imatrix(imatrix, out)
    return ImatrixReport(out, dataset, len(imatrix.entries), collected)


def _calibration_tokens(session: Session, calibration: str | Path) -> tuple[str, list[list[int]]]:
    if str(calibration) == AUTO:
        task = task_calibration()
        transcript = Transcript(session)
        return task.name, task.cut([transcript.tokenize(pieces) for pieces in task.transcripts])
    path = Path(calibration)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EdgeSqlError(
            f"cannot read the calibration text {path}: {getattr(exc, 'strerror', None) or exc}"
        ) from None
    return path.name, [session.tokenize(text, special=False)]


def task_imatrix_path(model: Path, folder: Path | None = None) -> Path:
    """Where the task imatrix of `model` is kept: `<stem>.task.imatrix.gguf` in `folder` (default:
    beside the model)."""
    return (Path(folder) if folder is not None else Path(model).parent) / (Path(model).stem + TASK_SUFFIX)


def task_imatrix_for(
    model: Path,
    *,
    folder: Path | None = None,
    n_threads: int | None = None,
    log: Callable[[str], None] = lambda _msg: None,
) -> Path:
    """The task imatrix of `model` (in `folder`, default beside it), made now unless a current
    one is there: newer than the model and made from the current calibration."""
    path = task_imatrix_path(model, folder)
    if path.is_file() and path.stat().st_mtime_ns >= Path(model).stat().st_mtime_ns:
        try:
            if read_imatrix(path).datasets == [task_calibration().name]:
                return path
        except ImatrixError:
            pass
    log(f"making the task imatrix of {Path(model).name} -> {path}")
    log(make_imatrix(model, path, n_threads=n_threads, force=True, log=log).summary())
    return path
