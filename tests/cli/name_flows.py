"""Workflows whose hook token or stream name comes from their input (``tests.cli.name_flows``)."""

from __future__ import annotations

import wf


@wf.workflow(max_attempts=3)
async def hook_token(token: str) -> str:
    hook = wf.create_hook(dict, token=token)
    await hook.next()
    return "resumed"


@wf.step
def write(name: str) -> None:
    with wf.stream_writer(name) as out:
        out.write(b"chunk")


@wf.workflow(max_attempts=3)
async def stream_name(name: str) -> str:
    await write(name)
    return "written"


@wf.workflow
async def hello() -> str:
    return "hello"
