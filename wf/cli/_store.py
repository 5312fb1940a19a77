"""Opening the store and an engine on it, for one command."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wf.engine._engine import Engine
    from wf.store import Store


def store_path() -> str:
    """Where the commands' store is, for messages (see ``wf._config.describe_store``)."""
    from wf._config import describe_store

    return describe_store()


def open_store() -> Store:
    """The store every command uses: the same choice as the library's (``wf._config``)."""
    from wf._config import default_store

    return default_store()


@contextlib.asynccontextmanager
async def engine() -> AsyncIterator[Engine]:
    """An engine on the local store, current within the block; the store is closed after."""
    from wf._config import deployment_setting, max_recoveries_setting, store_wide_concurrency
    from wf.engine._current import use_engine
    from wf.engine._engine import Engine

    store = open_store()
    try:
        eng = Engine(
            store,
            concurrency=store_wide_concurrency(),
            max_recoveries=max_recoveries_setting(),
            deployment=deployment_setting(),
        )
        with use_engine(eng):
            yield eng
    finally:
        await store.close()
