"""A workflow whose drivers' deaths count at once (``max_recoveries=1``), for the tests of drives
ended on purpose (``tests.cli.test_interrupted_drives``), and a program that drives it in its
own process and returns while its step runs (``python -m tests.cli.interrupt_flows ID``) or
waits for it (``... ID result`` or ``... ID drive``).

The step holds while the file ``hold`` exists in ``WF_TEST_LOG`` (an async wait: a thread would
keep a program's interpreter from exiting) and leaves ``start``/``end`` lines there.
"""

from __future__ import annotations

import asyncio
import time

import wf
from tests.cli.flows import append, log_dir, work


@wf.step
async def hold() -> str:
    append("steps", "start")
    deadline = time.monotonic() + 60
    while (log_dir() / "hold").exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    append("steps", "end")
    return "done"


@wf.workflow(max_recoveries=1)
async def fragile() -> str:
    """One death fails it with ``wf.RunStalled``: an interruption counted as one shows."""
    return await hold()


@wf.workflow(max_recoveries=1)
async def fragile_sync() -> int:
    """``fragile`` with a sync step (``flows.work``: holds while ``hold_0`` exists), whose
    thread a stop cannot end."""
    return await work(0)


@wf.step
async def stop_the_loop() -> str:
    """Stops its worker's event loop under it (its process then ends: a death of the run,
    though ``asyncio.run`` cancels the drive as it tears down)."""
    asyncio.get_running_loop().stop()
    await asyncio.sleep(5)
    return "done"


@wf.workflow(max_recoveries=1)
async def loop_stopper() -> str:
    """A poison pill: every worker that drives it ends in its step."""
    return await stop_the_loop()


async def _program(run_id: str) -> None:
    """Start the run (driven here) and return once its step runs: ``asyncio.run`` then cancels
    the drive, as any program that ends while its run is in a step does."""
    run = await wf.start(fragile, run_id=run_id)
    deadline = time.monotonic() + 30
    while "start" not in (log_dir() / "steps").read_text(encoding="utf-8").split():
        if time.monotonic() > deadline:
            raise TimeoutError("the step never started")
        await asyncio.sleep(0.02)
    print(run.id, flush=True)


async def _waiting(run_id: str, how: str) -> None:
    """Start the run (driven here) and wait for it (Ctrl-C meanwhile: ``tests.cli.
    test_interrupted_drives``): ``run.result()``, or (``how`` ``drive``) the run's drive task
    itself, which an await cancelled by Ctrl-C cancels too."""
    run = await wf.start(fragile, run_id=run_id)
    if how == "drive":
        await wf.current_engine().drive_soon(run.id)  # the drive ``wf.start`` began
    print(await run.result(), flush=True)


if __name__ == "__main__":
    import sys

    (log_dir() / "steps").touch()
    if len(sys.argv) > 2:
        asyncio.run(_waiting(sys.argv[1], sys.argv[2]))
    else:
        asyncio.run(_program(sys.argv[1]))
