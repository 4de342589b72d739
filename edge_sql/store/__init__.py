"""The local model store: known models, GGUF files on disk and their index, hub download, `pull`.

Its names are imported on first use (PEP 562): `edge_sql.store.home` (where the store is, which
every command that reads settings asks) loads neither the index nor the hub client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edge_sql.lazy import lazy_exports

_EXPORTS = {
    "Catalog": "edge_sql.store.catalog",
    "CatalogEntry": "edge_sql.store.catalog",
    "load_catalog": "edge_sql.store.catalog",
    "store_root": "edge_sql.store.home",
    "HubError": "edge_sql.store.hub",
    "HubUnreachableError": "edge_sql.store.hub",
    "RepoNotFoundError": "edge_sql.store.hub",
    "Snapshot": "edge_sql.store.hub",
    "download_checkpoint": "edge_sql.store.hub",
    "ModelStore": "edge_sql.store.index",
    "StoredModel": "edge_sql.store.index",
    "PullResult": "edge_sql.store.pull",
    "pull_model": "edge_sql.store.pull",
    "ModelNotPulledError": "edge_sql.store.resolve",
    "ensure_model": "edge_sql.store.resolve",
    "resolve_model": "edge_sql.store.resolve",
    "ModelSpec": "edge_sql.store.spec",
}
__all__ = sorted([*_EXPORTS, "list_models"])

if TYPE_CHECKING:
    from edge_sql.store.catalog import Catalog, CatalogEntry, load_catalog
    from edge_sql.store.home import store_root
    from edge_sql.store.hub import HubError, HubUnreachableError, RepoNotFoundError, Snapshot, download_checkpoint
    from edge_sql.store.index import ModelStore, StoredModel
    from edge_sql.store.pull import PullResult, pull_model
    from edge_sql.store.resolve import ModelNotPulledError, ensure_model, resolve_model
    from edge_sql.store.spec import ModelSpec


def list_models() -> list[StoredModel]:
    """Every model in the default store (`EDGE_SQL_HOME` or the user data folder)."""
    from edge_sql.store.index import ModelStore

    return ModelStore().list()


__getattr__ = lazy_exports(__name__, _EXPORTS)
