"""Opening the store and an engine on it, for one command."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wf.engine._engine import Engine
    from wf.store import Store


def store_path() -> str:
    """The store directory commands use: ``$WF_DIR``, else ``.workflows`` (for messages)."""
    from wf.store.local import default_store_path

    return str(default_store_path())


def open_store() -> Store:
    """The store of this directory (``$WF_DIR`` or ``.workflows``)."""
    from wf.store.local import LocalStore, default_store_path

    return LocalStore(default_store_path())


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
