"""A module whose import waits (at most 5 s) until a test opens ``GATE``: a slow import that a
worker meets when it first drives a run started by name. Never imported by a test module."""

from __future__ import annotations

import wf
from tests.serve._gate import GATE, TIMED_OUT

TIMED_OUT.append(not GATE.wait(5))


@wf.workflow
async def slow_one() -> str:
    return "loaded"
