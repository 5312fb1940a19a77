"""Workflows of the torture suite, imported by ``wf worker`` subprocesses as
``tests.reliability.flows``.

Every step execution leaves its trace in ``$WF_TORTURE_LOG/<key>.log`` *outside* the store:
``start <index> <pid> <exec> <t0>`` when it begins and ``end <index> <pid> <exec> <t0> <t1>``
when it returns (``time.monotonic``, one clock for every process of the machine). Each line is one
``write`` to an ``O_APPEND`` file, so a SIGKILL never tears it. The step returns its ``exec`` id,
so the journal says *which* execution's completion was recorded.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid
from pathlib import Path

import wf


def log_path(key: str) -> Path:
    return Path(os.environ["WF_TORTURE_LOG"]) / f"{key}.log"


def _log(key: str, line: str) -> None:
    fd = os.open(log_path(key), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


@wf.step(max_retries=0)
async def work(key: str, index: int, pause: float) -> dict[str, object]:
    exec_id = uuid.uuid4().hex[:12]
    start = time.monotonic()
    _log(key, f"start {index} {os.getpid()} {exec_id} {start:.9f}")
    if pause:
        await asyncio.sleep(random.uniform(0, pause))  # so that kills land inside steps too
    end = time.monotonic()
    _log(key, f"end {index} {os.getpid()} {exec_id} {start:.9f} {end:.9f}")
    return {"index": index, "pid": os.getpid(), "exec": exec_id}


@wf.workflow(name="torture:counted")
async def counted(key: str, steps: int, pause: float = 0.0, nap: float = 0.0) -> int:
    """``steps`` steps; with ``nap`` a durable sleep after every third one, which suspends the run
    (``WF_SUSPEND_AFTER=0``) so that it may be resumed by another process."""
    total = 0
    for i in range(steps):
        result = await work(key, i, pause)
        total += int(result["index"])  # type: ignore[call-overload]
        if nap and i % 3 == 2 and i != steps - 1:
            await wf.sleep(nap)
    return total


def expected_total(steps: int) -> int:
    return steps * (steps - 1) // 2


# -- wake-up patterns (issue #12): select with timers, children, cross-run hooks ----------------


@wf.step(max_retries=1000, backoff=0.05, backoff_factor=1.5, max_backoff=0.5)
async def resume_other(key: str, index: int, token: str) -> dict[str, object]:
    """Resume another run's hook, traced like ``work``; retried while the hook does not exist
    yet (its run has not reached it). The payload names this execution."""
    exec_id = uuid.uuid4().hex[:12]
    _log(f"{key}.sent", exec_id)  # before: a kill may come between the delivery and the trace
    await wf.resume_hook(token, f"{key}:{exec_id}")  # HookError: not yet there, retried
    start = time.monotonic()
    _log(key, f"start {index} {os.getpid()} {exec_id} {start:.9f}")
    _log(key, f"end {index} {os.getpid()} {exec_id} {start:.9f} {time.monotonic():.9f}")
    return {"index": index, "pid": os.getpid(), "exec": exec_id}


async def _lead(key: str, lead: int, pause: float) -> None:
    """``lead`` traced steps (indices from 0), a durable nap after every third: the run takes
    a while, and suspends, before the pattern under test begins."""
    for i in range(lead):
        await work(key, i, pause)
        if i % 3 == 2:
            await wf.sleep(0.2)


@wf.workflow(name="torture:waiter")
async def waiter(key: str, token: str, pause: float = 0.0, lead: int = 0) -> str:
    """Steps, a hook resumed by another run's step, a step: returns the payload."""
    await _lead(key, lead, pause)
    value = await wf.create_hook(str, token=token).next()
    await work(key, lead, pause)
    return value


@wf.workflow(name="torture:resumer")
async def resumer(key: str, token: str, pause: float = 0.0, lead: int = 0) -> str:
    """Steps, then a step that resumes ``token`` (a hook of another run), then a step."""
    await _lead(key, lead, pause)
    sent = await resume_other(key, lead, token)
    await work(key, lead + 1, pause)
    return f"{key}:{sent['exec']}"


@wf.workflow(name="torture:approval")
async def approval(
    key: str, token: str, timer: float, pause: float = 0.0, lead: int = 0
) -> list[object]:
    """``select(hook.next(), sleep(timer))`` after steps: the approval with a timeout."""
    await _lead(key, lead, pause)
    hook = wf.create_hook(str, token=token)
    index, value = await wf.select(hook.next(), wf.sleep(timer))
    await work(key, lead, pause)
    return [index, value]


@wf.workflow(name="torture:gated")
async def gated(key: str, token: str) -> str:
    """A child that ends when its hook is resumed."""
    await work(key, 0, 0.0)
    return await wf.create_hook(str, token=token).next()


@wf.workflow(name="torture:child_or_timer")
async def child_or_timer(
    key: str, child_wins: bool, pause: float = 0.0, lead: int = 0
) -> list[object]:
    """``select(child.result(), sleep(...))`` after steps. With ``child_wins`` the child is a
    few steps against an hour; else it waits on a hook nobody resumes before a 1 s timer has
    fired, after which a step of this run resumes it and the run waits for its result too."""
    await _lead(key, lead, pause)
    if child_wins:
        child = await wf.start(counted, f"{key}.c", 3, pause, run_id=f"{key}.c")
        index, value = await wf.select(child.result(), wf.sleep(3600))
        await work(key, lead, pause)
        return [index, value]
    gate = await wf.start(gated, f"{key}.c", f"{key}.gate", run_id=f"{key}.c")
    index, value = await wf.select(gate.result(), wf.sleep(1.0))
    await resume_other(key, lead, f"{key}.gate")
    late = await gate.result()
    return [index, value, late]


@wf.workflow(name="torture:gather")
async def gather_children(
    key: str, children: int, steps: int, pause: float = 0.0, lead: int = 0
) -> list[int]:
    """Steps, then a parent starting ``children`` runs of ``counted`` (with naps) and
    gathering them."""
    await _lead(key, lead, pause)
    started = [
        await wf.start(counted, f"{key}.c{i}", steps, pause, 0.2, run_id=f"{key}.c{i}")
        for i in range(children)
    ]
    return list(await asyncio.gather(*(c.result() for c in started)))


@wf.step
def fork_helper(seconds: float) -> int:
    """Start a helper process that sleeps, as a step may (``multiprocessing`` with the
    ``fork`` start method): it inherits every descriptor of the worker."""
    import multiprocessing

    helper = multiprocessing.get_context("fork").Process(target=time.sleep, args=(seconds,))
    helper.start()
    return helper.pid or 0


@wf.step
def stall_once(key: str) -> int:
    """Blocks for a minute in its first execution (logged ``start``), returns in the next."""
    marker = log_path(key).with_suffix(".ran")
    if not marker.exists():
        marker.touch()
        _log(key, f"start {os.getpid()}")
        time.sleep(60)
    return os.getpid()


@wf.workflow(name="torture:forks")
async def forks(key: str, seconds: float) -> list[int]:
    """A step forks a helper that outlives the worker; the next step stalls the run there."""
    helper = await fork_helper(seconds)
    _log(key, f"helper {helper}")
    return [helper, await stall_once(key)]
