"""A module that declares its workflow and then waits (at most 5 s) until a test opens ``GATE``:
the workflow of a schedule whose module is slow to import (declared before its import is
over). Never imported by a test module."""

from __future__ import annotations

import wf
from tests.serve._gate import GATE, TIMED_OUT


@wf.workflow
async def slow_scheduled() -> str:
    return "loaded"


TIMED_OUT.append(not GATE.wait(5))
