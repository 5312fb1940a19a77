"""Opening the store and an engine on it, for one command."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wf.engine._engine import Engine
    from wf.store import Store


def store_path() -> str:
    """Where the commands' store is, for messages: the Postgres DSN's host and database when
    ``WF_POSTGRES_DSN`` is set, else the directory (``$WF_DIR`` or ``.workflows``)."""
    import os

    dsn = os.environ.get("WF_POSTGRES_DSN")
    if dsn:
        from psycopg.conninfo import conninfo_to_dict

        info = conninfo_to_dict(dsn)
        return f"postgresql://{info.get('host', 'localhost')}/{info.get('dbname', '')}"
    from wf.store.local import default_store_path

    return str(default_store_path())


def open_store() -> Store:
    """The store every command uses: the same choice as the library's (``wf._config``)."""
    from wf._config import default_store

    return default_store()


@contextlib.asynccontextmanager
async def engine() -> AsyncIterator[Engine]:
    """An engine on the local store, current within the block; the store is closed after."""
    from wf.engine._engine import Engine, use_engine

    store = open_store()
    try:
        eng = Engine(store)
        with use_engine(eng):
            yield eng
    finally:
        await store.close()
