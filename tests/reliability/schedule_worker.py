"""A worker process for the multi-process schedule test (``-m tests.reliability.schedule_worker``).

Processes cannot share a ``MockClock``, so they share a *scaled* clock instead: fake time is
``BASE + (time.time() - ORIGIN) * SPEED``, the same function of the one real clock in every
process. Twenty fake minutes pass in twenty real seconds at ``SPEED=60``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time

import wf
from wf import Engine, Worker
from wf.engine._current import use_engine


class ScaledClock:
    """Fake time running ``speed`` times faster than the real clock, shared across processes."""

    def __init__(self, base: float, origin: float, speed: float) -> None:
        self.base, self.origin, self.speed = base, origin, speed

    def now(self) -> float:
        return self.base + (time.time() - self.origin) * self.speed

    async def sleep_until(self, deadline: float) -> None:
        delay = (deadline - self.now()) / self.speed
        await asyncio.sleep(max(0.0, delay))


@wf.workflow
async def ping(n: int) -> int:
    return n


def store() -> wf.store.Store:  # type: ignore[name-defined]
    dsn = os.environ.get("SCHED_DSN")
    if dsn:
        from wf.store.postgres import PostgresStore

        return PostgresStore(dsn, schema=os.environ["SCHED_SCHEMA"])
    from wf.store.local import LocalStore

    return LocalStore(os.environ["SCHED_DIR"])


def clock() -> ScaledClock:
    return ScaledClock(
        float(os.environ["SCHED_BASE"]),
        float(os.environ["SCHED_ORIGIN"]),
        float(os.environ["SCHED_SPEED"]),
    )


async def main(until: float) -> None:
    engine = Engine(store(), clock())
    worker = Worker(engine, retention=False, poll=0.5)
    with use_engine(engine):
        task = asyncio.ensure_future(worker.run())
        await engine.clock.sleep_until(until)
        worker.stop()
        await task
    await engine.store.close()
    print(worker.driven)


if __name__ == "__main__":
    asyncio.run(main(float(sys.argv[1])))
