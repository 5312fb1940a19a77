"""A plain multi-step workflow.

Run it from the repository root::

    wf run examples/hello.py:hello --input '{"name": "world"}'

Each step's result is recorded as it completes: run it with ``--detach``, kill a worker half-way,
and the next ``wf worker`` finishes it without repeating the steps that were done.
"""

from __future__ import annotations

import wf


@wf.step
def greet(name: str) -> str:
    return f"Hello, {name}!"


@wf.step
async def shout(text: str) -> str:
    return text.upper()


@wf.workflow
async def hello(name: str = "world") -> dict[str, str]:
    greeting = await greet(name)
    loud = await shout(greeting)
    return {"greeting": greeting, "loud": loud}
