"""A module that declares a workflow and then fails to import (a missing setting, a bad
line below the declaration)."""

from __future__ import annotations

import wf


@wf.workflow
async def flow() -> str:
    return "ran the half-imported module"


raise RuntimeError("the module fails below its workflow")
