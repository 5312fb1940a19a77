"""Taking leases, caps' places and schedules' locks whatever happens to the caller: what a
cancelled caller took is given back.

A caller cancelled while ``ACQUIRE`` or ``CLAIM`` is in flight (a drive crashed or stopped as it
began, a worker's claim as it stops, ``Run.retry`` under a timeout) must not leave held the
leases the script took: no lease object was made, so nothing renews or releases their keys, and
their holder is this process's connection, alive, so no claim takes them over as a dead
process's (``_holder``). The runs would wait out the lease's time to live, where PostgreSQL
hands back a lock granted after its caller left and the local store takes its locks without
waiting. So the script is not cancelled with its caller (cancelled, redis-py drops the
connection, and the script may have run all the same): the caller is cancelled at once, and the
leases in the script's answer are given back when it comes. The same holds for a cap's place
(``try_slot``) and a schedule's lock (``lock_schedule``): keys of a token no object holds,
which no keeper renews and nothing deletes, they kept a cap's place taken, or a schedule from
being fired, for their time to live. And a start a rate limit counted (``try_rate``) for a
caller cancelled before it heard is taken back: no run started with it, and it would have
held back a start of the limit's for its whole window.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from wf.store.redis import _scripts
from wf.store.redis._signals import RATES

if TYPE_CHECKING:
    from wf.store.redis._store import RedisStore

log = logging.getLogger("wf.store.redis")

T = TypeVar("T")

Taken = Callable[[Any], Iterable[tuple[str, str]]]
"""The leases (run id, token) a lease-taking script's answer says it took."""


async def taking(store: RedisStore, script: str, args: Sequence[Any], taken: Taken) -> Any:
    """The answer of ``script`` (idempotent: sent again when the connection fails), which takes
    leases; if the caller is cancelled first, what it took (``taken``) is given back."""
    return await holding(
        store._eval_now(script, args, True), lambda answer: give_back(store, taken(answer))
    )


async def holding(call: Coroutine[Any, Any, T], hand_back: Callable[[T], object]) -> T:
    """The answer of ``call``, a store call that takes keys (leases, a cap's place, a schedule's
    lock), run in a task of its own (a fresh context: see ``_store.detached``); if the caller
    is cancelled first, ``hand_back(answer)`` gives back what the answer says it took, once it
    comes (no answer: nothing is known taken, and a key taken unheard ends with its TTL)."""
    task = asyncio.get_running_loop().create_task(call, context=contextvars.Context())
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        # Also when the answer came but the caller's cancellation was delivered instead.
        task.add_done_callback(lambda done: _answered(done, hand_back))
        raise


def _answered(done: asyncio.Task[T], hand_back: Callable[[T], object]) -> None:
    if not done.cancelled() and done.exception() is None:
        hand_back(done.result())


def unlock(store: RedisStore, key: str, token: str, channel: str) -> None:
    """Delete the key (a cap's place, a schedule's lock) that ``token`` holds and no object
    does, announcing it on ``channel`` ('' for none); a failure is only logged (the key ends
    with its time to live)."""
    if store._client is None:
        return  # closed: nothing more is sent (it would open the store again)
    store._batcher.submit(_scripts.UNLOCK, [key, token, channel]).add_done_callback(_said)


def uncount(store: RedisStore, name: str, token: str) -> None:
    """Take back the start of rate limit ``name`` that ``token`` counted (``try_rate``) for a
    caller cancelled before it heard; a failure is only logged (the start then counts until
    it leaves the window)."""
    if store._client is None:
        return
    store._batcher.submit(_scripts.UNCOUNT_RATE, [name, token, RATES]).add_done_callback(_said)


def give_back(store: RedisStore, leases: Iterable[tuple[str, str]]) -> list[asyncio.Future[Any]]:
    """Release leases (run id, token) that no lease object holds; the releases' futures (their
    failures are only logged: a lease not given back ends with its time to live)."""
    if store._client is None:
        return []  # closed: its holder connection went with it, so its leases are free
    futures = []
    for run_id, token in leases:
        future = store._batcher.submit(_scripts.RELEASE, [run_id, token])
        future.add_done_callback(_said)
        futures.append(future)
    return futures


def _said(future: asyncio.Future[Any]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.debug("wf redis: undoing what a cancelled call took failed: %s", future.exception())
