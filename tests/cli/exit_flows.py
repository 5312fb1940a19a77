"""Workflows whose code outlives its run or reaches for the worker's exit
(``tests/cli/test_worker_exit.py``)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import sys
import threading
import time

import wf


@wf.step
def spawn() -> str:
    # A library's non-daemon thread (a client's pool): the interpreter joins it at exit.
    threading.Thread(target=lambda: time.sleep(3600), name="lib-pool").start()
    return "spawned"


@wf.workflow
async def spawner() -> str:
    return await spawn()


@wf.step
async def exits_in_a_callback() -> str:
    asyncio.get_running_loop().call_soon(sys.exit, 4)
    await asyncio.sleep(0.2)
    return "after"


@wf.workflow
async def callback_exit() -> str:
    return await exits_in_a_callback()


async def _interrupts() -> None:
    await asyncio.sleep(0.05)
    raise KeyboardInterrupt


@wf.step
async def interrupts_in_a_task() -> str:
    task = asyncio.get_running_loop().create_task(_interrupts())  # fire and forget
    await asyncio.sleep(0.3)
    return "after" if task.done() else "still running"


@wf.workflow
async def task_interrupt() -> str:
    return await interrupts_in_a_task()


@wf.step
def slow(i: int) -> int:
    time.sleep(0.5)
    return i


@wf.workflow
async def beside(i: int) -> int:
    return await slow(i)


@wf.step
async def exits_from_nowhere() -> str:
    # A callback with a context of its own: nothing says which run's code scheduled it.
    asyncio.get_running_loop().call_soon(sys.exit, 5, context=contextvars.Context())
    await asyncio.sleep(0.2)
    return "after"


@wf.workflow
async def anonymous_exit() -> str:
    return await exits_from_nowhere()


@wf.step
async def spawns_then_exits() -> str:
    # A library's thread left running, then an exit no run owns: the worker ends with 1, and
    # must not wait for the thread forever.
    threading.Thread(target=lambda: time.sleep(3600), name="lib-pool").start()
    asyncio.get_running_loop().call_soon(sys.exit, 5, context=contextvars.Context())
    await asyncio.sleep(0.2)
    return "after"


@wf.workflow
async def thread_then_exit() -> str:
    return await spawns_then_exits()


_POOL = concurrent.futures.ThreadPoolExecutor(1)  # a library's module-level pool
_BUSY_POOL = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="busy-pool")


@wf.step
def uses_a_pool() -> int:
    return _POOL.submit(lambda: 42).result()  # its thread then waits, idle, for more


@wf.workflow
async def pooled() -> int:
    return await uses_a_pool()


@wf.step
def leaves_a_pool_busy() -> str:
    _BUSY_POOL.submit(time.sleep, 3600)
    return "left"


@wf.workflow
async def busy_pool() -> str:
    return await leaves_a_pool_busy()
