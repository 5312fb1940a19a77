"""Workflows the OpenTelemetry tests trace, in this process and in subprocesses."""

from __future__ import annotations

import os
import pathlib

from opentelemetry import trace

import wf

attempts: dict[str, int] = {}


@wf.step
def annotate(x: int) -> int:
    # A sync step runs in a thread, inside its span.
    trace.get_current_span().set_attribute("app.x", x)
    print(f"annotated {x}")
    return x + 1


@wf.step
async def handled(fail: bool) -> str:
    # The step's code judges its own span (a failure it handled) and returns normally.
    if fail:
        trace.get_current_span().set_status(trace.StatusCode.ERROR, "quote stale, used cached")
    return "done"


@wf.workflow(name="otel_handled")
async def handles() -> str:
    await handled(False)
    return await handled(True)


@wf.step(max_retries=2, backoff=0.0)
async def flaky(key: str) -> str:
    attempts[key] = attempts.get(key, 0) + 1
    if attempts[key] == 1:
        raise ConnectionError("first attempt fails")
    return "ok"


@wf.step
async def leaf(x: int) -> int:
    return x * 10


@wf.workflow(name="otel_child")
async def child(x: int) -> int:
    return await leaf(x)


@wf.workflow(name="otel_parent")
async def parent(key: str) -> int:
    y = await annotate(1)
    await flaky(key)
    await wf.sleep(3600)  # beyond suspend_after: the run suspends, a second drive resumes it
    run = await wf.start(child, y)
    return await run.result()


@wf.step
def crash_if_asked() -> str:
    marker = pathlib.Path(os.environ["WF_TEST_LOG"]) / "crash"
    if marker.exists():
        marker.unlink()
        os._exit(9)  # the producer process dies mid-step
    return "survived"


@wf.workflow(name="otel_crashy")
async def crashy() -> str:
    await leaf(1)
    return await crash_if_asked()


@wf.step
def fail_hard() -> None:
    raise wf.FatalError("no")


@wf.workflow(name="otel_failing")
async def failing() -> None:
    await fail_hard()


@wf.step
def fail_loudly(size: int) -> None:
    raise ValueError("bad \udcff " + "x" * size)  # a lone surrogate, then a huge message


@wf.workflow(name="otel_loud")
async def loud(size: int) -> str:
    try:
        await fail_loudly(size)
    except ValueError:
        return "handled"
    return "not raised"


@wf.workflow(name="otel_waiting")
async def waiting() -> None:
    await wf.sleep(10_000)


@wf.workflow(name="otel_approval")
async def approval() -> str:
    hook = wf.create_hook(str, token="otel-approve")
    return await hook.next()
