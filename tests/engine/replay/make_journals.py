"""Regenerate the checked-in journals from the OLD versions of the workflows below.

    python -m tests.engine.replay.make_journals

Each journal is a run driven until it suspends (or completes) by the code as it was before a
change; the tests replay them against ``flows.py``, the code as it is now.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
from typing import Any

import wf
from tests.engine.replay import flows
from tests.engine.replay.flows import charge, notify, reserve
from wf.engine._workflow import _registry
from wf.testing import MemoryStore, engine

HERE = pathlib.Path(__file__).parent / "journals"


def _old(name: str, body: Any) -> wf.Workflow[..., Any]:
    # The old code under the name flows.py declares now: a process declares one function a
    # name, so the current declaration is forgotten first.
    _registry.pop(name, None)
    return wf.workflow(name=name)(body)


async def v1_reorder(item: str) -> list[str]:
    done = [await reserve(item)]
    await wf.sleep(86400)
    done.append(await charge(10))
    return done


async def v1_notify(item: str) -> list[str]:
    done = [await reserve(item)]
    done.append(await notify("email"))
    await wf.sleep(86400)
    return done


async def dump(name: str, flow: Any, *, suspend_only: bool, step_takes: float = 0.0) -> None:
    store = MemoryStore()
    async with engine(store) as eng:
        original = flows.in_block.fn
        if step_takes:  # the block's step takes that long by the fake clock

            def slow(what: str) -> str:
                eng.mock_clock.jump(step_takes)
                return what

            flows.in_block.fn = slow  # type: ignore[assignment]
        run = await wf.start(flow, "book", run_id=f"wrun_{name.replace('-', '_')}")
        await eng.wait_driven(run)
        if not suspend_only:
            await run.result()
        record = await store.get_run(run.id)
        journal = await store.read_journal(run.id)
        flows.in_block.fn = original  # type: ignore[method-assign]
    data = {"record": {**record.to_json(), "target": None}, "journal": journal}
    (HERE / f"{name}.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")


async def main() -> None:
    HERE.mkdir(exist_ok=True)
    await dump("unchanged-suspended", _old("replay:unchanged", v1_reorder), suspend_only=True)
    await dump("unchanged-completed", _old("replay:unchanged", v1_reorder), suspend_only=False)
    await dump("reordered-suspended", _old("replay:reordered", v1_reorder), suspend_only=True)
    await dump("patched-old-suspended", _old("replay:patched", v1_notify), suspend_only=True)
    await dump("patched-old-completed", _old("replay:patched", v1_notify), suspend_only=False)
    # Journals of the wf before ``timeout_ended``: a block's end in time was not journaled.
    await dump("timeout-in-time-suspended", flows.timeout_in_time, suspend_only=True)
    await dump("timeout-late-suspended", flows.timeout_late, suspend_only=True, step_takes=120.0)


if __name__ == "__main__":
    asyncio.run(main())
