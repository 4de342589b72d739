"""`pull`: get a checkpoint (hub or local folder), convert it to BF16 GGUF, quantize, and record."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from edge_sql.errors import EdgeSqlError
from edge_sql.store.catalog import CatalogEntry, load_catalog
from edge_sql.store.hub import HubError, HubUnreachableError, RepoNotFoundError, Snapshot, download_checkpoint
from edge_sql.store.index import ModelStore, StoredModel, safe_name
from edge_sql.store.lock import model_lock
from edge_sql.store.spec import ModelSpec
from edge_sql.store.variants import BASE_VARIANT, CONVERTED_VARIANTS, is_converted, normalize_variant

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
ImatrixMaker = Callable[[Path], Path]  # a BF16 GGUF -> the importance matrix file to quantize it with


class PullOptions(TypedDict, total=False):
    """The `pull_model` keywords a caller that pulls on demand may pass through
    (`resolve.ensure_model`): typed, so a misspelt one is mypy's finding."""

    revision: str | None
    keep_bf16: bool
    cache_dir: Path | None
    endpoint: str | None
    imatrix: ImatrixMaker | None


@dataclass(frozen=True)
class PullSource:
    """What to pull: hub repositories to try in order, or a local checkpoint folder."""

    name: str
    repos: tuple[str, ...] = ()
    folder: Path | None = None
    default_variant: str | None = None
    license: str | None = None

    @property
    def basename(self) -> str:
        """The stem of the GGUF file names (the repository's name, or the store name)."""
        return self.repos[0].split("/")[-1] if self.repos else self.name


@dataclass
class PullResult:
    """What a pull did: the entry asked for, whether it already existed, and every file it recorded."""

    model: StoredModel
    already_present: bool
    recorded: list[StoredModel] = field(default_factory=list)
    snapshot: Snapshot | None = None


def pull_source(spec: str | None, *, name: str | None = None) -> tuple[PullSource, str | None]:
    """Turns a pull argument into a source and the variant it names (if any).

    `spec` is None (the default model), a short name or repository id from the catalogue (optionally
    `:VARIANT`), any other `owner/name` hub repository, or a local checkpoint folder.
    """
    catalog = load_catalog()
    if spec is None:
        return _catalog_source(catalog.default, name, catalog.default_variant), None
    folder = Path(spec).expanduser()
    if folder.is_dir():
        if not (folder / "config.json").is_file():
            raise EdgeSqlError(
                f"{folder} is a folder but has no config.json; point pull at a Hugging Face checkpoint folder"
            )
        return PullSource(name=safe_name(name or folder.resolve().name), folder=folder.resolve()), None
    parsed = ModelSpec.parse(spec)
    base, variant = parsed.base, parsed.variant
    entry = catalog.find(base)
    if entry is not None:
        return _catalog_source(entry, name, catalog.default_variant), variant
    if _REPO_ID.match(base):
        return PullSource(name=safe_name(name or base.split("/")[-1]), repos=(base,)), variant
    if base.endswith(("/", "\\")) or "/" in base or "\\" in base or base.startswith((".", "~")):
        raise EdgeSqlError(f"no such checkpoint folder: {spec}")
    known = ", ".join(e.name for e in catalog.entries)
    raise EdgeSqlError(
        f"unknown model {spec!r}; use one of {known}, a hub repository id owner/name, or a local checkpoint folder"
    )


def _catalog_source(entry: CatalogEntry, name: str | None, default_variant: str) -> PullSource:
    return PullSource(
        name=safe_name(name or entry.name),
        repos=entry.repos,
        default_variant=default_variant,
        license=entry.license,
    )


def pull_model(
    spec: str | None = None,
    *,
    quant: str | None = None,
    revision: str | None = None,
    force: bool = False,
    keep_bf16: bool = True,
    name: str | None = None,
    store: ModelStore | None = None,
    cache_dir: Path | None = None,
    endpoint: str | None = None,
    log: Callable[[str], None] = lambda _msg: None,
    imatrix: ImatrixMaker | None = None,
) -> PullResult:
    """Makes `spec`'s `quant` variant available in the store and returns its entry.

    Downloads (or reuses the cached download), converts to BF16 GGUF, quantizes, and records each
    file made. Does nothing when the variant is already there, unless `force`. The BF16 file stays
    in the store as variant `BF16` (other variants are made from it) unless `keep_bf16` is False.
    `imatrix(bf16_path)` returns the importance matrix file to quantize a K- or I-quant with
    (`edge-sql pull` hands in the task imatrix, kept beside the BF16 file); the entry records it.
    """
    store = store or ModelStore()
    source, spec_variant = pull_source(spec, name=name)
    if quant is not None and spec_variant is not None and normalize_variant(quant) != normalize_variant(spec_variant):
        raise EdgeSqlError(f"{spec} names variant {spec_variant} but --quant says {quant}; give only one")
    variant = normalize_variant(quant or spec_variant or source.default_variant or load_catalog().default_variant)

    with model_lock(store.root, source.name, log):  # a second pull of this model waits here
        return _pull_locked(
            store,
            source,
            variant,
            revision=revision,
            force=force,
            keep_bf16=keep_bf16,
            cache_dir=cache_dir,
            endpoint=endpoint,
            log=log,
            imatrix=imatrix,
        )


def _pull_locked(
    store: ModelStore,
    source: PullSource,
    variant: str,
    *,
    revision: str | None,
    force: bool,
    keep_bf16: bool,
    cache_dir: Path | None,
    endpoint: str | None,
    log: Callable[[str], None],
    imatrix: ImatrixMaker | None = None,
) -> PullResult:
    existing = store.get(source.name, variant)
    if existing is not None and existing.exists and not force and _same_revision(existing, revision):
        log(f"{existing.ref} is already in the store ({existing.path}); use --force to pull it again")
        return PullResult(model=existing, already_present=True)

    checkout = _checkout(source, revision, cache_dir, endpoint, log)
    recorded: list[StoredModel] = []

    used: list[Path] = []  # the importance matrix the variant was quantized with

    def record(variant_name: str, path: Path) -> StoredModel:
        entry = store.add(
            source.name,
            variant_name,
            path,
            repo=checkout.repo,
            revision=checkout.commit,
            source=checkout.origin,
            imatrix=used[0] if used and variant_name == variant else None,
        )
        recorded.append(entry)
        log(f"recorded {entry.ref}: {entry.path}")
        return entry

    def made_and_recorded(variant_name: str, path: Path, make: Callable[[], object]) -> StoredModel:
        """`make()` writes `path`, which is then recorded; interrupted or failed in between (a
        signal while the index is written), the new file goes too: nothing on disk unrecorded."""
        before = _file_identity(path)
        try:
            make()
            return record(variant_name, path)
        except BaseException:
            _remove_unrecorded(store, path, before)
            raise

    target = store.model_path(source.name, variant, basename=source.basename)
    if is_converted(variant):
        made = made_and_recorded(
            variant, target, lambda: _convert(checkout, target, CONVERTED_VARIANTS[variant], source.license, log)
        )
        return PullResult(made, False, recorded, checkout.snapshot)

    def quantize(src: Path) -> None:
        from edge_sql.convert.quantize import uses_imatrix

        if imatrix is not None and uses_imatrix(variant):
            used.append(imatrix(src))
        _quantize(src, target, variant, log, used[0] if used else None)

    base = store.get(source.name, BASE_VARIANT)
    if base is not None and base.exists and not force and checkout.made(base):
        log(f"quantizing from the stored {base.ref} ({base.path})")
        made = made_and_recorded(variant, target, lambda: quantize(base.path))
    elif keep_bf16:
        base_path = store.model_path(source.name, BASE_VARIANT, basename=source.basename)
        made_and_recorded(BASE_VARIANT, base_path, lambda: _convert(checkout, base_path, "bf16", source.license, log))
        made = made_and_recorded(variant, target, lambda: quantize(base_path))
    else:
        work_path = target.with_name(f".{target.stem}-work-{BASE_VARIANT}.gguf")

        def from_work_file() -> None:
            try:
                _convert(checkout, work_path, "bf16", source.license, log)
                quantize(work_path)
            finally:
                work_path.unlink(missing_ok=True)
            if used:  # made beside the work file: kept beside the variant it made
                used[0] = used[0].replace(target.with_name(target.stem + ".imatrix.gguf"))

        made = made_and_recorded(variant, target, from_work_file)
    return PullResult(made, False, recorded, checkout.snapshot)


def _file_identity(path: Path) -> tuple[int, int, int] | None:
    """What tells a file apart from the one that was there before (None: no file)."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


def _remove_unrecorded(store: ModelStore, path: Path, before: tuple[int, int, int] | None) -> None:
    """Remove `path` when this pull wrote it (it differs from `before`) and the index does not
    name it; a file that was there already, or one recorded, stays."""
    now = _file_identity(path)
    if now is None or now == before:
        return
    resolved = path.resolve()
    if any(m.path.resolve() == resolved for m in store.list()):
        return
    path.unlink(missing_ok=True)


@dataclass(frozen=True)
class _Checkout:
    """The checkpoint folder a pull converts, and its provenance for the store index."""

    folder: Path
    repo: str | None
    commit: str | None
    origin: str | None  # the local folder, for checkpoints not from the hub
    snapshot: Snapshot | None

    def made(self, entry: StoredModel) -> bool:
        """True when `entry` was made from this very checkpoint."""
        return (entry.repo, entry.revision, entry.source) == (self.repo, self.commit, self.origin)


def _checkout(
    source: PullSource,
    revision: str | None,
    cache_dir: Path | None,
    endpoint: str | None,
    log: Callable[[str], None],
) -> _Checkout:
    """The local folder itself, or the hub snapshot downloaded into the Hugging Face cache."""
    if source.folder is not None:
        if revision is not None:
            raise EdgeSqlError("--revision applies to hub models, not to a local folder")
        return _Checkout(source.folder, None, None, str(source.folder), None)
    snapshot = _download_first_available(source.repos, revision, cache_dir, endpoint, log)
    return _Checkout(snapshot.folder, snapshot.repo, snapshot.commit, None, snapshot)


def _same_revision(entry: StoredModel, revision: str | None) -> bool:
    """True when no revision is asked for, or the stored commit is (or starts with) the one asked for."""
    if revision is None or entry.repo is None:
        return True
    return entry.revision is not None and entry.revision.startswith(revision)


def _download_first_available(
    repos: tuple[str, ...],
    revision: str | None,
    cache_dir: Path | None,
    endpoint: str | None,
    log: Callable[[str], None],
) -> Snapshot:
    """Downloads from the first of `repos` the hub has, or the first one cached when the hub is out of
    reach (the catalogue lists a model's mirrors after its primary repository)."""
    failures: list[HubError] = []
    for repo in repos:
        log(f"downloading {repo}" + (f" at {revision}" if revision else ""))
        try:
            return download_checkpoint(repo, revision=revision, cache_dir=cache_dir, endpoint=endpoint)
        except (RepoNotFoundError, HubUnreachableError) as exc:
            failures.append(exc)
            if repo != repos[-1]:
                why = (
                    str(exc)
                    if isinstance(exc, RepoNotFoundError)
                    else f"{repo} cannot be fetched or found in the cache"
                )
                log(f"{why}; trying the mirror {repos[repos.index(repo) + 1]}")
    unreachable = [e for e in failures if isinstance(e, HubUnreachableError)]
    raise (unreachable or failures)[0]


def _convert(checkout: _Checkout, out: Path, outtype: str, license: str | None, log: Callable[[str], None]) -> None:
    from edge_sql.convert.hf_to_gguf import convert_checkpoint

    out.parent.mkdir(parents=True, exist_ok=True)
    log(f"converting {checkout.folder} to {outtype.upper()} GGUF")
    report = convert_checkpoint(
        checkout.folder,
        out,
        outtype=outtype,
        force=True,
        show_progress=True,
        source_repo=checkout.repo,
        license=license,
    )
    log(report.summary())


def _quantize(src: Path, out: Path, variant: str, log: Callable[[str], None], imatrix: Path | None = None) -> None:
    from edge_sql.convert.quantize import quantize_gguf

    out.parent.mkdir(parents=True, exist_ok=True)
    log(f"quantizing to {variant}" + (f" with the importance matrix {imatrix.name}" if imatrix else ""))
    log(quantize_gguf(src, out, variant, force=True, imatrix=imatrix).summary())
