"""The local store: runs as JSON files under ``.workflows``, guarded by file locks.

The default store. Safe for many processes on one machine; see ``docs/store.md`` for the
on-disk layout, the write ordering that makes it crash-safe, and its group commit.
"""

from wf.store.local._format import default_store_path
from wf.store.local._store import LocalStore

__all__ = ["LocalStore", "default_store_path"]
