"""`edge-sql pull` and `edge-sql models` end to end: the fixture checkpoint served by the stand-in
hub, downloaded by the real huggingface_hub client, converted, quantized and recorded.

The CLI runs in a fresh process so HF_ENDPOINT, HF_HOME and HF_HUB_OFFLINE are read the way
huggingface_hub reads them (once, at import). The tests in this module build on each other's
store (one module-scoped download) and run in file order.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from huggingface_hub import constants

from edge_sql.convert.gguf_file import validate_gguf
from edge_sql.store import ModelNotPulledError, ModelStore, ensure_model, resolve_model
from edge_sql.store.hub import CHECKPOINT_PATTERNS
from edge_sql.store.index import file_sha256
from hub_standin import HubStandin

REPO_ROOT = Path(__file__).resolve().parents[1]
PRIMARY = "cwolff/qwen3.5-2b-grpo-synsql"  # not on the stand-in: pull must fall back to the mirror
MIRROR = "trl-lab/qwen3.5-2b-grpo-synsql"
FILE_TYPE_Q8_0 = 7  # llama.cpp's LLAMA_FTYPE_MOSTLY_Q8_0
FILE_TYPE_Q4_0 = 2  # LLAMA_FTYPE_MOSTLY_Q4_0
FILE_TYPE_BF16 = 32  # LLAMA_FTYPE_MOSTLY_BF16


@dataclass
class Setup:
    hub: HubStandin
    hf_home: Path
    store: ModelStore
    checkpoint: Path
    first_pull: subprocess.CompletedProcess
    biggest: str
    dropped_at: int


def edge_sql(
    args: list[str], *, hf_home: Path, store_home: Path, endpoint: str, offline: bool = False
) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "HF_HOME": str(hf_home),
        "EDGE_SQL_HOME": str(store_home),
        "HF_ENDPOINT": endpoint,
        "HF_HUB_OFFLINE": "1" if offline else "0",
        "PYTHONPATH": str(REPO_ROOT),
    }
    env.pop("HF_HUB_CACHE", None)
    return subprocess.run(
        [sys.executable, "-c", "from edge_sql.cli import main; main()", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO_ROOT,
    )


@pytest.fixture(scope="module")
def setup(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("pull-e2e")
    with HubStandin() as hub:
        hub.add_repo(MIRROR, tiny_checkpoint)
        sizes = {p.name: p.stat().st_size for p in tiny_checkpoint.glob("*.safetensors")}
        biggest = max(sizes, key=sizes.get)
        hub.drop_after(biggest, sizes[biggest] // 2)  # the first transfer of the weights breaks halfway
        run = edge_sql(
            ["pull", "--quant", "Q8_0"], hf_home=root / "hf", store_home=root / "store", endpoint=hub.endpoint
        )
        yield Setup(hub, root / "hf", ModelStore(root / "store"), tiny_checkpoint, run, biggest, sizes[biggest] // 2)


@pytest.fixture(autouse=True)
def _online(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process downloads talk to the stand-in even when the caller's shell sets HF_HUB_OFFLINE."""
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


def _run(setup: Setup, args: list[str], **kwargs) -> subprocess.CompletedProcess:
    return edge_sql(
        args,
        hf_home=setup.hf_home,
        store_home=kwargs.pop("store_home", setup.store.root),
        endpoint=kwargs.pop("endpoint", setup.hub.endpoint),
        **kwargs,
    )


def _metadata(path: Path) -> dict:
    """The GGUF header's metadata, read by the runtime's own check (fast: header only)."""
    info = validate_gguf(path)
    return {"general.architecture": info.architecture, **info.metadata}


def test_pull_downloads_converts_quantizes_and_records(setup: Setup) -> None:
    run = setup.first_pull
    assert run.returncode == 0, run.stderr
    assert f"has no public repository {PRIMARY}; trying the mirror {MIRROR}" in run.stderr
    commit = setup.hub.repos[MIRROR].commit

    # the download: the standard cache layout, resumed with a byte range after the broken transfer
    snapshot = setup.hf_home / "hub" / "models--trl-lab--qwen3.5-2b-grpo-synsql" / "snapshots" / commit
    served = sorted(setup.hub.repos[MIRROR].files)
    wanted = [p for p in served if any(Path(p).match(pattern) for pattern in CHECKPOINT_PATTERNS)]
    assert "config.json" in wanted and setup.biggest in wanted
    assert sorted(p.name for p in snapshot.iterdir()) == sorted(wanted)
    for name in wanted:
        assert (snapshot / name).read_bytes() == (setup.checkpoint / name).read_bytes(), name
    # the client resumes from the last whole chunk it had written (or from the start if none)
    resumed_at = (setup.dropped_at // constants.DOWNLOAD_CHUNK_SIZE) * constants.DOWNLOAD_CHUNK_SIZE
    ranges = [r.range for r in setup.hub.downloads_of(setup.biggest)]
    assert ranges == [None, f"bytes={resumed_at}-" if resumed_at else None]

    # the store: BF16 (kept) and Q8_0, both recorded with where they came from
    bf16, q8 = setup.store.get("synsql", "BF16"), setup.store.get("synsql", "Q8_0")
    assert [m.ref for m in setup.store.list()] == ["synsql:BF16", "synsql:Q8_0"]
    for entry in (bf16, q8):
        assert entry.repo == MIRROR and entry.revision == commit and entry.source is None
        assert entry.path.parent == setup.store.root / "models" / "synsql"
        assert entry.size == entry.path.stat().st_size and entry.sha256 == file_sha256(entry.path)
    assert q8.path.name == "qwen3.5-2b-grpo-synsql-Q8_0.gguf"
    bf16_meta, q8_meta = _metadata(bf16.path), _metadata(q8.path)
    assert bf16_meta["general.file_type"] == FILE_TYPE_BF16 and q8_meta["general.file_type"] == FILE_TYPE_Q8_0
    assert q8_meta["general.architecture"] == "qwen35"
    assert bf16_meta["general.source.huggingface.repository"] == MIRROR
    assert bf16_meta["general.license"] == "apache-2.0"  # from the catalogue
    assert q8.size < bf16.size * 0.7
    assert run.stdout.splitlines()[0] == f"synsql:Q8_0 ready: {q8.path} ({q8.size / 1e9:.2f} GB)"
    assert resolve_model("synsql:Q8_0", store=setup.store) == q8.path


def test_models_lists_what_was_pulled(setup: Setup) -> None:
    table = _run(setup, ["models"])
    assert table.returncode == 0, table.stderr
    rows = [line.split() for line in table.stdout.splitlines()[1:3]]
    assert [row[:2] for row in rows] == [["synsql", "BF16"], ["synsql", "Q8_0"]]
    assert rows[1][-1] == str(setup.store.get("synsql", "Q8_0").path)
    assert f"store: {setup.store.root}" in table.stdout
    listed = json.loads(_run(setup, ["models", "--json"]).stdout)["models"]
    assert [(m["variant"], m["size"], m["default"]) for m in listed] == [
        (m.variant, m.path.stat().st_size, False) for m in setup.store.list()
    ]


def test_pulling_again_does_nothing(setup: Setup) -> None:
    q8 = setup.store.get("synsql", "Q8_0")
    mtime = q8.path.stat().st_mtime_ns
    before = len(setup.hub.requests)
    again = _run(setup, ["pull", "synsql:q8_0"])
    assert again.returncode == 0, again.stderr
    assert "synsql:Q8_0 is already in the store" in again.stderr and "use --force" in again.stderr
    assert again.stdout.startswith(f"synsql:Q8_0 already in the store: {q8.path}")
    assert len(setup.hub.requests) == before  # not even a request to the hub
    assert q8.path.stat().st_mtime_ns == mtime and setup.store.get("synsql", "Q8_0") == q8


def test_a_wrong_revision_is_a_one_line_error(setup: Setup) -> None:
    bad = _run(setup, ["pull", "synsql", "--quant", "Q8_0", "--revision", "v9"])
    assert bad.returncode == 1
    assert bad.stderr.splitlines()[-1] == f"Error: {MIRROR} has no revision 'v9' on {setup.hub.endpoint}"


def test_another_variant_is_quantized_from_the_stored_bf16(setup: Setup) -> None:
    before = len(setup.hub.requests)
    logs: list[str] = []
    path = ensure_model(
        "synsql:Q4_0",
        store=setup.store,
        log=logs.append,
        endpoint=setup.hub.endpoint,
        cache_dir=setup.hf_home / "hub",
    )
    assert path == setup.store.get("synsql", "Q4_0").path and path.is_file()
    assert "quantizing from the stored synsql:BF16" in "\n".join(logs)
    new_requests = setup.hub.requests[before:]
    assert all("/api/" in r.path for r in new_requests)  # which commit is main? - no file was downloaded
    assert _metadata(path)["general.file_type"] == FILE_TYPE_Q4_0


def test_a_deleted_file_is_reported_and_pull_makes_it_again(setup: Setup) -> None:
    q8 = setup.store.get("synsql", "Q8_0")
    q8.path.unlink()
    with pytest.raises(ModelNotPulledError, match="that file is gone"):
        resolve_model("synsql:Q8_0", store=setup.store)
    again = _run(setup, ["pull", "synsql", "--quant", "Q8_0"])
    assert again.returncode == 0, again.stderr
    assert "quantizing from the stored synsql:BF16" in again.stderr
    assert file_sha256(q8.path) == q8.sha256  # quantization is deterministic: the same bytes again


def test_offline_pull_uses_the_cached_checkpoint(setup: Setup, tmp_path: Path) -> None:
    before = len(setup.hub.requests)
    offline = _run(setup, ["pull", "--quant", "Q8_0"], store_home=tmp_path / "fresh-store", offline=True)
    assert offline.returncode == 0, offline.stderr
    assert len(setup.hub.requests) == before  # offline: not one request
    fresh = ModelStore(tmp_path / "fresh-store").get("synsql", "Q8_0")
    assert fresh.repo == MIRROR and fresh.revision == setup.hub.repos[MIRROR].commit
    assert fresh.sha256 == setup.store.get("synsql", "Q8_0").sha256  # conversion is deterministic too


def test_pull_converts_a_local_folder_without_network(setup: Setup, tmp_path: Path) -> None:
    with HubStandin() as gone:
        dead_endpoint = gone.endpoint
    local = _run(
        setup,
        ["pull", str(setup.checkpoint), "--quant", "Q8_0", "--name", "tiny", "--no-keep-bf16"],
        store_home=tmp_path / "local-store",
        endpoint=dead_endpoint,
    )
    assert local.returncode == 0, local.stderr
    store = ModelStore(tmp_path / "local-store")
    [entry] = store.list()  # --no-keep-bf16: only the quantized file stays
    assert (entry.name, entry.variant, entry.repo, entry.source) == (
        "tiny",
        "Q8_0",
        None,
        str(setup.checkpoint.resolve()),
    )
    assert sorted(p.name for p in entry.path.parent.iterdir()) == ["tiny-Q8_0.gguf"]
    assert _metadata(entry.path)["general.file_type"] == FILE_TYPE_Q8_0
    assert resolve_model("tiny:Q8_0", store=store) == entry.path
