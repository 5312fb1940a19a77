"""Opening the store and an engine on it, for one command."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wf.engine._engine import Engine
    from wf.store import RunRecord, Store


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
        eng.on_crossing(say_crossing(eng.deployment))
        with use_engine(eng):
            yield eng
    finally:
        await store.close()


def say_crossing(here: str | None) -> Callable[[RunRecord], None]:
    """A note on stderr when a command drives a run pinned to another deployment."""

    def say(record: RunRecord) -> None:
        code = f"deployment {here}'s code" if here is not None else "the code here"
        sys.stderr.write(
            f"note: run {record.id} is pinned to deployment {record.deployment}; driving it "
            f"on {code}\n"
        )

    return say
