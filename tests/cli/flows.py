"""Workflows the CLI tests run, in-process and in subprocesses (``tests.cli.flows:NAME``).

Steps that matter to crash tests leave traces in the directory named by ``WF_TEST_LOG``: one line
per event appended to a file, so that what ran survives a SIGKILL of the process running it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import wf


def log_dir() -> Path:
    return Path(os.environ["WF_TEST_LOG"])


def append(name: str, line: str) -> None:
    with open(log_dir() / name, "a", encoding="utf-8") as f:
        f.write(line + "\n")


@wf.step
def add(a: int, b: int) -> int:
    return a + b


@wf.workflow
async def adder(a: int, b: int = 1) -> int:
    return await add(a, b)


@wf.step
def explode(message: str) -> None:
    raise wf.FatalError(message)


@wf.workflow
async def failing(message: str = "boom") -> None:
    await explode(message)


@wf.workflow
async def wrong_output() -> int:
    return "nope"  # type: ignore[return-value]


@wf.workflow
async def sleeper(seconds: float) -> str:
    await wf.sleep(seconds)
    return "awake"


@wf.step
def work(i: int) -> int:
    """Record start and end; hold while the file ``hold_<i>`` exists (tests kill us there)."""
    append("steps", f"start {i} {os.getpid()}")
    marker = log_dir() / f"hold_{i}"
    deadline = time.monotonic() + 60
    while marker.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    append("steps", f"end {i} {os.getpid()}")
    return i * 10


@wf.workflow
async def chain(n: int, pause: float = 0.0) -> list[int]:
    out = []
    for i in range(n):
        out.append(await work(i))
        if pause:
            await wf.sleep(pause)
    return out


@wf.step
def stamped(tag: str) -> str:
    """Record which process ran this step of which run, and when (start and end)."""
    start = time.time()
    time.sleep(0.01)
    end = time.time()
    append("stamps", f"{tag} {os.getpid()} {start!r} {end!r}")
    return tag


@wf.workflow
async def stamps(key: str, steps: int = 3) -> list[str]:
    return [await stamped(f"{key}/{i}") for i in range(steps)]


@wf.workflow
async def approval() -> str:
    hook: wf.Hook[str] = wf.create_hook(str, token="approve-me")
    answer: str = await hook.next()
    return answer


@wf.step
def shout(text: str) -> str:
    with wf.stream_writer() as out:
        out.write(text.encode())
    return text.upper()


@wf.workflow
async def parent(text: str) -> str:
    child: wf.Run[str] = await wf.start(child_flow, text)
    result: str = await child.result()
    return result


@wf.workflow
async def child_flow(text: str) -> str:
    return await shout(text)


@wf.step
def undecodable_name() -> str:
    return os.fsdecode(b"report-\xff.csv")  # lone surrogates, as a listing of odd names gives


@wf.step
def open_undecodable() -> None:
    # An OSError whose message holds lone surrogates.
    Path(os.fsdecode(b"missing-\xff.csv")).read_bytes()


@wf.workflow
async def odd_names() -> list[str]:
    name = await undecodable_name()
    return [name, name.encode("utf-8", "surrogateescape").hex()]


@wf.workflow
async def odd_failure() -> None:
    await open_undecodable()


@wf.workflow
async def echo(text: str) -> str:
    return text


@wf.workflow
async def defiant() -> str:
    """Catches its cancellation and completes: ``wf cancel`` must not call that a success."""
    try:
        await wf.sleep(3600)
    except wf.Cancelled:
        return "ignored the cancellation"
    return "slept"


@wf.workflow(queue="mail")
async def mailer(text: str) -> str:
    return text


@wf.workflow(concurrency=1)
async def capped(i: int) -> int:
    """One run at a time, store-wide; ``work`` holds while ``hold_<i>`` exists."""
    return await work(i)


@wf.step
def collector_state() -> dict[str, object]:
    """How the process driving the run has its garbage collector set up."""
    import gc

    return {"frozen": gc.get_freeze_count(), "threshold": list(gc.get_threshold())}


@wf.workflow
async def collector() -> dict[str, object]:
    return await collector_state()


@wf.step
async def deaf() -> str:
    """An async step that ignores cancellation while ``deaf`` exists in the log directory."""
    import asyncio

    append("steps", "start deaf")
    while (log_dir() / "deaf").exists():
        try:
            await asyncio.sleep(0.02)
        except asyncio.CancelledError:
            append("steps", "ignored a cancellation")
    return "heard"


@wf.workflow
async def deaf_flow() -> str:
    return await deaf()


@wf.step
async def interrupts() -> int:
    """An async step whose own code raises KeyboardInterrupt (on the worker's main thread)."""
    append("steps", "start interrupts")
    raise KeyboardInterrupt


@wf.workflow
async def interrupting() -> int:
    return await interrupts()


@wf.step
async def spin() -> str:
    """An async step that blocks the event loop (no await) while ``spin`` exists in the log
    directory."""
    append("steps", "start spin")
    while (log_dir() / "spin").exists():
        pass
    return "spun"


@wf.workflow
async def spinning() -> str:
    return await spin()


@wf.step(max_retries=0)
def loud_until_allowed() -> str:
    print("said by the step")
    if not (log_dir() / "allowed").exists():
        raise RuntimeError("not yet")
    return "done"


@wf.workflow
async def loud() -> str:
    # Prints on stdout on every attempt; fails until the test allows it.
    return await loud_until_allowed()


@wf.step
def begin(key: str) -> str:
    return f"began {key}"


@wf.step
def finish(text: str) -> str:
    return f"finished {text}"


@wf.workflow
async def halves(key: str) -> str:
    """A step, a hook (token ``half:KEY``), another step: a run that is half done."""
    first = await begin(key)
    hook: wf.Hook[str] = wf.create_hook(str, token=f"half:{key}")
    return f"{first}, {await finish(await hook.next())}"
