"""Durable timers: a workflow that sleeps between two steps.

Run it from the repository root::

    wf run examples/sleepy.py:nap                    # sleeps 2 s, done in ~2 s
    wf run examples/sleepy.py:nap --input '{"seconds": 3600}'
                                # suspends in its sleep and says so: press Ctrl-C,
                                # the run stays safe in the store
    wf runs                                          # ... suspended: sleep until ...
    wf wake <run id>                                 # ends the sleep now and finishes the run

A sleep longer than ``WF_SUSPEND_AFTER`` seconds (default 30) suspends the run: the process holds
nothing while it waits, and whichever process is around when the timer is due resumes it. Only the
remainder is waited after a restart.
"""

from __future__ import annotations

import time

import wf


@wf.step
def note(label: str) -> str:
    # A step may read the clock: its result is recorded, so a replay sees the same text.
    return f"{label} at {time.strftime('%H:%M:%S')}"


@wf.workflow
async def nap(seconds: float = 2.0) -> list[str]:
    before = await note("fell asleep")
    await wf.sleep(seconds)
    after = await note("woke up")
    return [before, after]
