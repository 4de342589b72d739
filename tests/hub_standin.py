"""A local stand-in for the Hugging Face hub: serves folders as model repositories over HTTP.

It implements the endpoints that `huggingface_hub.snapshot_download` (2.x) calls, with the
hub's headers and error codes, so tests run the real download code offline:

- `GET /api/models/{repo}[/revision/{rev}]`: repo info with the commit `sha` and `siblings`;
- `GET /api/models/{repo}/tree/{rev}[/{path}]?recursive=`: file listing (git blob `oid`, `size`,
  `lfs` with sha256 for LFS files; no `xetHash`, so the client takes the plain HTTP path);
- `HEAD|GET /{repo}/resolve/{rev}/{path}`: small files answered directly (`ETag` = git blob id,
  `X-Repo-Commit`); LFS files redirected with 302 to a second server on another port (a "CDN":
  a different origin, as on the real hub) with `X-Linked-Etag` (sha256) and `X-Linked-Size`;
- byte ranges (`Range: bytes=N-` -> 206 + `Content-Range`), 416 for a range past the end;
- errors as the hub sends them: unknown repo 401 `X-Error-Code: RepoNotFound`, unknown revision
  404 `RevisionNotFound`, unknown file 404 `EntryNotFound`.

Faults for tests: `drop_after(path, nbytes, times)` sends the full headers, then `nbytes` of the
body, then closes the connection (the next `times` downloads of that file); `fail_with(path,
status, times)` answers a download with an HTTP error. Every request is logged in `requests`.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt")
LFS_NAMES = ("tokenizer.json",)
_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


@dataclass(frozen=True)
class RepoFile:
    """One file of a served repository, with the ids the hub reports for it."""

    path: str
    data: bytes
    lfs: bool

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def lfs_pointer(self) -> bytes:
        spec = "version https://git-lfs.github.com/spec/v1"
        return f"{spec}\noid sha256:{self.sha256}\nsize {self.size}\n".encode()

    @property
    def blob_id(self) -> str:
        """The git blob id: of the content, or of the LFS pointer for LFS files."""
        stored = self.lfs_pointer if self.lfs else self.data
        return hashlib.sha1(b"blob %d\0" % len(stored) + stored).hexdigest()


@dataclass
class Repo:
    """A served repository: its files at one commit, and branch names pointing to it."""

    repo_id: str
    files: dict[str, RepoFile]
    commit: str
    refs: dict[str, str] = field(default_factory=dict)

    def resolve(self, revision: str) -> str | None:
        """The commit for a branch name or the full commit id; None when unknown."""
        if revision == self.commit:
            return self.commit
        return self.refs.get(revision)


@dataclass(frozen=True)
class LoggedRequest:
    method: str
    path: str
    range: str | None
    server: str  # "hub" or "cdn"


def load_repo_files(folder: Path) -> dict[str, RepoFile]:
    """Every file under `folder`, keyed by its repository path (`/`-separated)."""
    files = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        rel = path.relative_to(folder).as_posix()
        files[rel] = RepoFile(rel, path.read_bytes(), lfs=rel.endswith(LFS_SUFFIXES) or rel in LFS_NAMES)
    return files


def commit_id(files: dict[str, RepoFile]) -> str:
    """A deterministic 40-hex commit id for a set of files."""
    digest = hashlib.sha1()
    for rel, f in sorted(files.items()):
        digest.update(f"{rel}\0{f.blob_id}\n".encode())
    return digest.hexdigest()


class HubStandin:
    """The stand-in hub: `with HubStandin() as hub: hub.add_repo(...); HF_ENDPOINT=hub.endpoint`."""

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.requests: list[LoggedRequest] = []
        self._drops: dict[str, list[int]] = {}
        self._failures: dict[str, list[int]] = {}
        self._lock = threading.Lock()
        self._hub = _Server(self, "hub")
        self._cdn = _Server(self, "cdn")
        self._threads: list[threading.Thread] = []

    # setup -------------------------------------------------------------------------------
    def add_repo(self, repo_id: str, folder: Path, *, branch: str = "main") -> Repo:
        """Serves the files of `folder` as `repo_id` at one commit, reachable as `branch`."""
        files = load_repo_files(Path(folder))
        commit = commit_id(files)
        repo = Repo(repo_id, files, commit, {branch: commit})
        self.repos[repo_id] = repo
        return repo

    def drop_after(self, path: str, nbytes: int, *, times: int = 1) -> None:
        """The next `times` downloads of `path` stop after `nbytes` bytes of the body (connection closed)."""
        self._drops[path] = [nbytes] * times

    def fail_with(self, path: str, status: int, *, times: int = 1) -> None:
        """The next `times` downloads (GET) of `path` answer HTTP `status`."""
        self._failures[path] = [status] * times

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._hub.server_port}"

    @property
    def cdn_endpoint(self) -> str:
        return f"http://127.0.0.1:{self._cdn.server_port}"

    def downloads_of(self, path: str) -> list[LoggedRequest]:
        """Every GET that fetched (or started to fetch) the bytes of repository file `path`."""
        matches = []
        for r in self.requests:
            if r.method != "GET":
                continue
            if r.server == "hub" and "/resolve/" in r.path:
                served = unquote(r.path.split("/resolve/", 1)[1].split("/", 1)[1])
            elif r.server == "cdn":
                cdn_file = self._cdn_file(r.path)
                served = cdn_file.path if cdn_file is not None else None
            else:
                continue
            if served == path:
                matches.append(r)
        return matches

    # life cycle --------------------------------------------------------------------------
    def start(self) -> HubStandin:
        for server in (self._hub, self._cdn):
            thread = threading.Thread(target=server.serve_forever, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        for server in (self._hub, self._cdn):
            server.shutdown()
            server.server_close()

    def __enter__(self) -> HubStandin:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # used by the handler -----------------------------------------------------------------
    def _log(self, request: LoggedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def _take(self, faults: dict[str, list[int]], path: str) -> int | None:
        with self._lock:
            pending = faults.get(path)
            return pending.pop(0) if pending else None

    def _cdn_file(self, url_path: str) -> RepoFile | None:
        match = re.fullmatch(r"/lfs/([0-9a-f]{64})", urlsplit(url_path).path)
        if match is None:
            return None
        for repo in self.repos.values():
            for f in repo.files.values():
                if f.lfs and f.sha256 == match.group(1):
                    return f
        return None


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, hub: HubStandin, role: str) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.hub = hub
        self.role = role


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:  # `format`: the stdlib's signature
        pass

    def do_HEAD(self) -> None:  # the stdlib's naming
        self._dispatch(send_body=False)

    def do_GET(self) -> None:  # the stdlib's naming
        self._dispatch(send_body=True)

    # routing -----------------------------------------------------------------------------
    def _dispatch(self, *, send_body: bool) -> None:
        hub = self.server.hub
        hub._log(LoggedRequest(self.command, self.path, self.headers.get("Range"), self.server.role))
        url = urlsplit(self.path)
        if self.server.role == "cdn":
            f = hub._cdn_file(self.path)
            if f is None:
                return self._error(404, "EntryNotFound", "no such object")
            return self._send_file(f, etag=f.sha256, commit=None, send_body=send_body)
        if url.path.startswith("/api/models/"):
            if self.command != "GET":
                return self._error(405, None, "method not allowed")
            return self._api(url.path[len("/api/models/") :], parse_qs(url.query))
        return self._resolve(url.path.lstrip("/"), send_body=send_body)

    def _find_repo(self, path: str) -> tuple[Repo, str] | None:
        for repo_id, repo in self.server.hub.repos.items():
            if path == repo_id or path.startswith(repo_id + "/"):
                return repo, path[len(repo_id) :]
        return None

    def _api(self, path: str, query: dict[str, list[str]]) -> None:
        found = self._find_repo(path)
        if found is None:
            return self._error(401, "RepoNotFound", "Repository not found")
        repo, rest = found
        if rest in ("", "/"):
            return self._repo_info(repo, repo.commit)
        match = re.fullmatch(r"/revision/([^/]+)", rest)
        if match:
            commit = repo.resolve(unquote(match.group(1)))
            if commit is None:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {unquote(match.group(1))}")
            return self._repo_info(repo, commit)
        match = re.fullmatch(r"/tree/([^/]+)(/.*)?", rest)
        if match:
            commit = repo.resolve(unquote(match.group(1)))
            if commit is None:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {unquote(match.group(1))}")
            recursive = query.get("recursive", ["false"])[0].lower() == "true"
            return self._tree(repo, unquote(match.group(2) or "").strip("/"), recursive)
        return self._error(404, None, "Not Found")

    def _repo_info(self, repo: Repo, commit: str) -> None:
        info = {
            "_id": hashlib.md5(repo.repo_id.encode()).hexdigest()[:24],
            "id": repo.repo_id,
            "modelId": repo.repo_id,
            "author": repo.repo_id.split("/")[0],
            "sha": commit,
            "private": False,
            "gated": False,
            "disabled": False,
            "tags": [],
            "siblings": [{"rfilename": p} for p in sorted(repo.files)],
        }
        self._json(info)

    def _tree(self, repo: Repo, folder: str, recursive: bool) -> None:
        prefix = folder + "/" if folder else ""
        if folder and not any(p.startswith(prefix) for p in repo.files):
            return self._error(404, "EntryNotFound", f"{folder} does not exist on this revision")
        entries: list[dict] = []
        seen_dirs: set[str] = set()
        for rel, f in sorted(repo.files.items()):
            if not rel.startswith(prefix):
                continue
            parts = rel[len(prefix) :].split("/")
            for depth in range(1, len(parts)):
                directory = prefix + "/".join(parts[:depth])
                if directory not in seen_dirs and (recursive or depth == 1):
                    seen_dirs.add(directory)
                    entries.append(
                        {
                            "type": "directory",
                            "oid": hashlib.sha1(directory.encode()).hexdigest(),
                            "size": 0,
                            "path": directory,
                        }
                    )
            if len(parts) > 1 and not recursive:
                continue
            entry = {"type": "file", "oid": f.blob_id, "size": f.size, "path": rel}
            if f.lfs:
                entry["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": len(f.lfs_pointer)}
            entries.append(entry)
        self._json(entries)

    def _resolve(self, path: str, *, send_body: bool) -> None:
        found = self._find_repo(path)
        if found is None:
            return self._error(401, "RepoNotFound", "Repository not found")
        repo, rest = found
        match = re.fullmatch(r"/resolve/([^/]+)/(.+)", rest)
        if match is None:
            return self._error(404, None, "Not Found")
        revision, filename = unquote(match.group(1)), unquote(match.group(2))
        commit = repo.resolve(revision)
        if commit is None:
            return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        f = repo.files.get(filename)
        if f is None:
            return self._error(404, "EntryNotFound", "Entry not found", commit=commit)
        if f.lfs:
            self.send_response(302)
            self.send_header("Location", f"{self.server.hub.cdn_endpoint}/lfs/{f.sha256}")
            self.send_header("ETag", f'"{f.blob_id}"')
            self.send_header("X-Linked-Etag", f'"{f.sha256}"')
            self.send_header("X-Linked-Size", str(f.size))
            self.send_header("X-Repo-Commit", commit)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        return self._send_file(f, etag=f.blob_id, commit=commit, send_body=send_body)

    # responses ---------------------------------------------------------------------------
    def _send_file(self, f: RepoFile, *, etag: str, commit: str | None, send_body: bool) -> None:
        hub = self.server.hub
        if send_body:
            status = hub._take(hub._failures, f.path)
            if status is not None:
                return self._error(status, None, "injected failure")
        start, end = 0, f.size - 1
        range_header = self.headers.get("Range")
        if range_header:
            match = _RANGE.match(range_header.strip())
            if match is None or int(match.group(1)) >= f.size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{f.size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            start = int(match.group(1))
            end = min(int(match.group(2)), f.size - 1) if match.group(2) else f.size - 1
        body = f.data[start : end + 1]
        self.send_response(206 if range_header else 200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{etag}"')
        if commit is not None:
            self.send_header("X-Repo-Commit", commit)
        if range_header:
            self.send_header("Content-Range", f"bytes {start}-{end}/{f.size}")
        self.end_headers()
        if not send_body:
            return None
        drop_at = hub._take(hub._drops, f.path)
        if drop_at is not None:
            self.wfile.write(body[:drop_at])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return None
        self.wfile.write(body)
        return None

    def _json(self, data: object) -> None:
        payload = json.dumps(data).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    def _error(self, status: int, code: str | None, message: str, *, commit: str | None = None) -> None:
        payload = json.dumps({"error": message}).encode()
        self.send_response(status)
        if code is not None:
            self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        if commit is not None:
            self.send_header("X-Repo-Commit", commit)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)
