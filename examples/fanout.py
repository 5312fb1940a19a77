"""Fan-out: run many steps at once and collect their results in order.

Run it from the repository root::

    wf run examples/fanout.py:fanout --input '{"words": ["durable", "fan", "out"]}'

``wf.map(step, items)`` runs the step once per item concurrently; ``asyncio.gather`` does the same
for different steps. Each call gets its operation id when it is made, in program order, so the
journal (and every replay) is the same whichever call finishes first. Kill the process half-way
and ``wf worker`` re-runs only the calls that had not completed.
"""

from __future__ import annotations

import asyncio

import wf


@wf.step
async def measure(word: str) -> int:
    await asyncio.sleep(0.05)  # stands for I/O: the calls overlap, so the fan-out takes ~50 ms
    return len(word)


@wf.step
async def shout(word: str) -> str:
    return word.upper()


@wf.workflow
async def fanout(words: list[str]) -> dict[str, object]:
    lengths = await wf.map(measure, words)  # one step call per word, concurrently
    loudest, first = await asyncio.gather(shout(max(words, key=len)), shout(words[0]))
    return {"lengths": lengths, "total": sum(lengths), "loudest": loudest, "first": first}
