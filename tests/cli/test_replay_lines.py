"""``wf check --replay``'s line for a run that replays: it counts the operations compared (replayed
and matched), not those recorded, and says when a run in flight stopped at its journal's end."""

from __future__ import annotations

import asyncio
import dataclasses

import wf
from wf.cli._replay import render_text
from wf.engine._replay_check import check_run
from wf.store import RunStatus
from wf.testing import TestEngine


@wf.step
async def echo(i: int) -> int:
    return i


@wf.workflow
async def fan_out() -> list[int]:
    await echo(0)
    return list(await asyncio.gather(echo(1), echo(2), echo(3)))


async def test_the_ok_line_counts_what_was_compared(wf_engine: TestEngine) -> None:
    """A run in flight whose first gathered step is still running: its replay stops there, at
    the journal's end, before its siblings' two recorded steps. Was: ``(4 operation(s)
    replayed)``, as for the finished run."""
    store = wf_engine.store
    run = await wf.start(fan_out)
    assert await run.result() == [1, 2, 3]
    journal = await store.read_journal(run.id)
    in_step = [
        e
        for e in journal
        if e["type"] != "run_completed" and (e["type"], e.get("op")) != ("step_completed", 1)
    ]
    record = await store.get_run(run.id)
    flight = dataclasses.replace(record, id="flight", status=RunStatus.RUNNING, output=None)
    assert await store.create_run(flight, in_step)

    done, running = await check_run(store, run.id), await check_run(store, "flight")
    assert (done.status, running.status) == ("ok", "ok"), running.message
    assert (running.ops_recorded, running.ops_replayed) == (4, 2)
    name = fan_out.name
    assert render_text([done, running]).splitlines() == [
        f"ok        {run.id}  {name}  (4 operation(s) compared)",
        f"ok        flight  {name}  (2 of 4 recorded operation(s) compared; in flight: "
        "stopped at the journal's end, where its next drive goes on)",
        "2 runs replayed: 2 ok, 0 diverged, 0 error(s)",
    ]
    assert running.to_json()["in_flight"] is True and done.to_json()["in_flight"] is False
