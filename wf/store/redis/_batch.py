"""Lease writes of concurrent runs, sent together: one pipeline per round trip.

A worker drives many runs at once, and their steps end at about the same time. Each journal
write is a script call; sent one by one, each pays a connection from the pool, a system call
to send and one to read. The batcher queues the writes that arrive while a pipeline is in
flight and sends them all in the next one (Redis still runs each script alone: nothing is
shared but the round trip). Only idempotent scripts go through it (a lease's fenced write,
its release), so a pipeline that failed with its connection is sent once more whole.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from wf.store.redis._store import RedisStore


class Batcher:
    """Queues script calls and sends them in pipelines, one pipeline in flight at a time."""

    def __init__(self, store: RedisStore) -> None:
        self._store = store
        self._queue: list[tuple[str, Sequence[Any], asyncio.Future[Any]]] = []
        self._task: asyncio.Task[None] | None = None

    def submit(self, script: str, args: Sequence[Any]) -> asyncio.Future[Any]:
        """The future result of ``script(args)``; raises (``StoreError``) as ``_eval`` would."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._queue.append((script, args, future))
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._flush(), context=contextvars.Context())
        return future

    async def _flush(self) -> None:
        while self._queue:
            batch, self._queue = self._queue, []
            try:
                results = await self._store._send_scripts([(s, a) for s, a, _ in batch])
            except BaseException as error:
                for _, _, future in batch:
                    if not future.done():
                        future.set_exception(error)
                if isinstance(error, asyncio.CancelledError):
                    raise
                continue
            for (_, _, future), result in zip(batch, results, strict=True):
                if future.done():
                    continue
                if isinstance(result, BaseException):
                    future.set_exception(self._store._failure(result))
                else:
                    future.set_result(result)
