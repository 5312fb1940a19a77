"""The default engine: which store a program uses when it has not called ``wf.configure``.

``WF_POSTGRES_DSN`` set: the PostgreSQL store at that DSN. Otherwise the local store in
``WF_DIR`` (default ``./.workflows``). Kept outside the kernel so that the engine never depends
on a concrete store.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wf.engine._engine import Engine
    from wf.store import Store


def default_store() -> Store:
    """The store named by the environment (see the module docstring)."""
    dsn = os.environ.get("WF_POSTGRES_DSN")
    if dsn:
        import importlib

        # Optional dependency (psycopg): imported by name so type checks pass without it.
        postgres: Any = importlib.import_module("wf.store.postgres")
        store: Store = postgres.PostgresStore(dsn)
        return store
    from wf.store.local import LocalStore, default_store_path

    return LocalStore(default_store_path())


def default_engine() -> Engine:
    """An engine on ``default_store()`` with the system clock."""
    from wf.engine._engine import Engine

    return Engine(default_store())
