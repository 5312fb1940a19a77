"""Child runs: a parent starts one run per part and waits for them all.

Run it from the repository root::

    wf run examples/parent_child.py:assemble --input '{"parts": ["wheel", "frame", "seat"]}'
    wf runs                        # the parent and its children (ids <parent>.<op>)
    wf inspect <parent id>         # "child runs" lists them; each has its own journal

``await wf.start(child, ...)`` inside a workflow starts a child run: its own journal, retries
and status, visible in ``wf runs``. ``await run.result()`` is a durable wait — a parent waiting
on a slow child suspends and is woken when the child ends, in whatever process drives it.
``wf cancel <parent id> --children`` cancels the whole tree.
"""

from __future__ import annotations

import asyncio

import wf


@wf.step
def build(part: str) -> str:
    return f"{part} built"


@wf.workflow
async def make_part(part: str) -> str:
    return await build(part)


@wf.workflow
async def assemble(parts: list[str]) -> list[str]:
    # Started in order: each child's id is the parent's id and the operation (<parent>.<op>).
    children: list[wf.Run[str]] = [await wf.start(make_part, part) for part in parts]
    # The children run concurrently; the parent collects their results in order.
    return list(await asyncio.gather(*(child.result() for child in children)))
