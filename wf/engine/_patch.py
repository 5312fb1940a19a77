"""Evolving workflow code while runs are in flight: ``wf.patched`` and ``wf.deprecate_patch``.

    if wf.patched("send-sms"):
        await send_sms(order)        # new runs (and old runs past this point) take the new path
    else:
        await send_email(order)      # runs recorded before the change keep replaying this one

The first ``patched`` call of a run decides: a live run records a ``patch_recorded`` marker (an
operation) and takes the new path; a replaying run whose journal has no marker at this point
takes the old path without consuming an operation id, so its history still lines up. Once no run
from before the change is left (``wf check --replay`` tells), replace the call with
``wf.deprecate_patch("send-sms")`` and delete the old branch: it consumes a recorded marker if
there is one and otherwise does nothing, so runs from either side of the change keep replaying.
It can go in turn once no unfinished run holds the marker (``wf check --replay --unfinished``
on the code without it passes).
"""

from __future__ import annotations

from wf._exceptions import UsageError
from wf.engine._context import RunContext, require_run


class _Patches(dict[str, bool]):
    """Change id -> whether this run takes the new path (``RunContext.state``)."""


def _decided(ctx: RunContext) -> dict[str, bool]:
    return ctx.state(_Patches)


def _marker_next(ctx: RunContext, change_id: str) -> bool:
    found = ctx.history.get(ctx.next_op)
    return found is not None and found.kind == "patch" and found.name == change_id


def patched(change_id: str) -> bool:
    """Whether this run takes the code path introduced by the change ``change_id``."""
    if not isinstance(change_id, str) or not change_id:
        raise UsageError("wf.patched() needs a non-empty change id")
    ctx = require_run("wf.patched()")
    decided = _decided(ctx).get(change_id)
    if decided is not None:
        return decided
    if _marker_next(ctx, change_id):
        ctx.begin_op("patch", change_id)
        decided = True
    elif ctx.replaying:
        decided = False  # recorded before the change: keep the old path, consume nothing
    else:
        op, _ = ctx.begin_op("patch", change_id)
        ctx.write_soon({"type": "patch_recorded", "op": op, "name": change_id})
        decided = True
    _decided(ctx)[change_id] = decided
    return decided


def deprecate_patch(change_id: str) -> None:
    """Mark ``change_id`` as the only path now: consume its marker if the journal has one here."""
    ctx = require_run("wf.deprecate_patch()")
    if change_id not in _decided(ctx) and _marker_next(ctx, change_id):
        ctx.begin_op("patch", change_id)
    _decided(ctx)[change_id] = True
