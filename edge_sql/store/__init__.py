"""The local model store: known models, GGUF files on disk and their index, hub download, `pull`."""

from edge_sql.store.catalog import Catalog, CatalogEntry, load_catalog
from edge_sql.store.home import store_root
from edge_sql.store.hub import HubError, HubUnreachableError, RepoNotFoundError, Snapshot, download_checkpoint
from edge_sql.store.index import ModelStore, StoredModel
from edge_sql.store.pull import PullResult, pull_model
from edge_sql.store.resolve import ModelNotPulledError, ensure_model, resolve_model
from edge_sql.store.spec import ModelSpec


def list_models() -> list[StoredModel]:
    """Every model in the default store (`EDGE_SQL_HOME` or the user data folder)."""
    return ModelStore().list()


__all__ = [
    "Catalog",
    "CatalogEntry",
    "HubError",
    "HubUnreachableError",
    "ModelNotPulledError",
    "ModelSpec",
    "ModelStore",
    "PullResult",
    "RepoNotFoundError",
    "Snapshot",
    "StoredModel",
    "download_checkpoint",
    "ensure_model",
    "list_models",
    "load_catalog",
    "pull_model",
    "resolve_model",
    "store_root",
]
