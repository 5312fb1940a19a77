"""Pausing and resuming a schedule (``wf schedule pause|resume``, ``wf.admin``'s
``pause_schedule`` / ``resume_schedule``).

A paused schedule is stored with ``paused`` set and no ``next_run``: workers fire nothing of it
and count nothing missed while it is paused (a wf that predates the field sees a schedule with
no next fire, and fires nothing of it either). Fires due when it is paused start no run and are
counted in ``skipped``, like every fire that started no run. Resuming computes the next fire
from now: fires the pause passed over are not caught up.
"""

from __future__ import annotations

import logging

from wf._exceptions import StoreCorrupted, UsageError
from wf.engine._cron import check_cron, check_tz, next_fire
from wf.engine._schedules import PAUSED, check_id, count_dropped
from wf.store import Schedule, Store

log = logging.getLogger("wf.schedules")


async def pause(store: Store, schedule_id: str, now: float) -> Schedule | None:
    """Pause schedule ``schedule_id``; the schedule after (None: there is none). Pausing a
    paused schedule changes nothing."""
    async with store.holding_schedule(check_id(schedule_id)):
        found = await store.get_schedule(schedule_id)
        if found is None or found.paused:
            return found
        count_dropped(found, found, now, PAUSED)
        found.paused, found.next_run, found.updated_at = True, None, now
        await store.save_schedule(found)
    log.info("schedule %s: paused", schedule_id)
    return found


async def resume(store: Store, schedule_id: str, now: float) -> Schedule | None:
    """Resume schedule ``schedule_id`` from ``now`` (its next fire is the first after now);
    the schedule after (None: there is none). Resuming a schedule that is not paused changes
    nothing; one whose series ended while it was paused is ended."""
    async with store.holding_schedule(check_id(schedule_id)):
        found = await store.get_schedule(schedule_id)
        if found is None or not found.paused:
            return found
        if not found.ended:
            try:
                check_cron(found.cron)
                check_tz(found.tz)
            except UsageError as error:  # damage: its times cannot be computed
                raise StoreCorrupted(
                    f"{store.schedule_location(schedule_id)}: schedule {schedule_id!r}: {error}"
                ) from None
            found.next_run = next_fire(found.cron, found.tz, now)
            found.ended = found.next_run is None
        found.paused, found.updated_at = False, now
        await store.save_schedule(found)
    log.info("schedule %s: resumed", schedule_id)
    return found
