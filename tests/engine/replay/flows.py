"""The *current* code of the workflows whose older journals are checked in under journals/."""

from __future__ import annotations

import asyncio

import wf


@wf.step
def reserve(item: str) -> str:
    return f"reserved {item}"


@wf.step
def charge(amount: int) -> str:
    return f"charged {amount}"


@wf.step
def notify(channel: str) -> str:
    return f"sent via {channel}"


@wf.workflow(name="replay:unchanged")
async def unchanged(item: str) -> list[str]:
    done = [await reserve(item)]
    await wf.sleep(86400)
    done.append(await charge(10))
    return done


@wf.workflow(name="replay:reordered")
async def reordered(item: str) -> list[str]:
    # v1 reserved first, then charged; this version charges first: old runs must not replay.
    done = [await charge(10)]
    await wf.sleep(86400)
    done.append(await reserve(item))
    return done


@wf.workflow(name="replay:patched")
async def patched_flow(item: str) -> list[str]:
    done = [await reserve(item)]
    if wf.patched("sms-instead-of-email"):
        done.append(await notify("sms"))
    else:
        done.append(await notify("email"))
    await wf.sleep(86400)
    return done


@wf.workflow(name="replay:patch-gone")
async def patch_gone(item: str) -> list[str]:
    # Was patched_flow; then wf.deprecate_patch("sms-instead-of-email"); now that is gone too.
    done = [await reserve(item), await notify("sms")]
    await wf.sleep(86400)
    return done


@wf.step
def tagged(item: int, phase: str) -> str:
    return f"item{item}-{phase}"


async def _two_steps(item: int) -> list[str]:
    return [await tagged(item, "first"), await tagged(item, "second")]


@wf.workflow(name="replay:gathered")
async def gathered() -> list[list[str]]:
    # Each branch calls a second step once its first one ended: live, those calls take their
    # ids in the order the first steps ended, which replay does not reproduce.
    results = list(await asyncio.gather(*(_two_steps(i) for i in range(3))))
    await wf.sleep(86400)
    return results


@wf.step
def in_block(what: str) -> str:
    return what


async def _timed_block(item: str) -> str:
    sleeper = asyncio.ensure_future(wf.sleep(86400))  # begun before the block, awaited after
    try:
        async with wf.timeout(60):
            await in_block(item)
        seen = "in time"
    except TimeoutError:
        seen = "timed out"
    await sleeper  # suspends: the resume, a day later, reaches the block's end unrecorded
    return await in_block(seen)


@wf.workflow(name="replay:timeout-in-time")
async def timeout_in_time(item: str) -> str:
    # Journaled by a wf that did not journal a block's end in time: the block's step ended
    # long before its deadline, and its resume comes a day later.
    return await _timed_block(item)


@wf.workflow(name="replay:timeout-late")
async def timeout_late(item: str) -> str:
    # Journaled by the same wf: the block's step took two minutes (of the fake clock), past
    # the deadline, and the block ended in a ``cancel_delivered`` at ``exit``.
    return await _timed_block(item)
