"""Small workflows that leave runs in every state, run for real through the engine.

``populate(engine)`` starts one run per state with fixed ids on the engine's MockClock, so that
screens built on them are the same on every machine (the snapshots and the docs' screenshots).
Steps that must stay "running" wait on ``GATES`` (asyncio events the tests open).
"""

from __future__ import annotations

import asyncio
import dataclasses

import wf
from wf import Engine

START = 1_800_000_000.0
"""MockClock's fixed start: 2027-01-15 08:00:00 UTC."""

GATES: dict[str, asyncio.Event] = {}
_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def fixed_id(at: float, n: int) -> str:
    """A run id as ``new_run_id`` would make it at ``at``, with ``n`` as its random part."""

    def b32(value: int, length: int) -> str:
        return "".join(_ALPHABET[(value >> (5 * i)) & 31] for i in reversed(range(length)))

    return "wrun_" + b32(int(at * 1000), 10) + b32(n, 16)


def gate(name: str) -> asyncio.Event:
    """The event a gated step waits on (made in the running loop)."""
    if name not in GATES:
        GATES[name] = asyncio.Event()
    return GATES[name]


@dataclasses.dataclass
class Approval:
    approved: bool
    by: str


class CardDeclined(Exception):
    """The payment provider said no."""


@wf.step
async def reserve(order: str) -> dict[str, object]:
    return {"order": order, "items": ["book", "lamp"], "total": "42.50"}


@wf.step
async def report(order: str) -> int:
    async with wf.stream_writer() as out:
        for line in (f"packing {order}\n", "label printed\n", "handed to carrier\n"):
            await out.write(line)
    async with wf.stream_writer("label.bin") as raw:
        await raw.write(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    return 3


@wf.workflow(name="orders.ship")
async def ship(order: str) -> dict[str, object]:
    reserved = await reserve(order)
    await report(order)
    return {"shipped": order, "reserved": reserved}


@wf.workflow(name="orders.remind")
async def remind(order: str) -> str:
    await reserve(order)
    await wf.sleep(86400)
    return "reminded"


@wf.workflow(name="orders.approve")
async def approve(order: str) -> str:
    hook: wf.Hook[Approval] = wf.create_hook(Approval, token=f"approve:{order}")
    await reserve(order)
    decision = await hook.next()
    return "approved" if decision.approved else "rejected"


@wf.workflow(name="orders.batch")
async def batch(orders: list[str]) -> list[str]:
    child: wf.Run[str] = await wf.start(remind, orders[0])
    return [await child.result()]


_quote_calls: dict[str, int] = {}


@wf.step(max_retries=4)
async def quote(order: str) -> float:
    _quote_calls[order] = _quote_calls.get(order, 0) + 1
    raise wf.RetryableError("rate limited by the quote service", after=600)


@wf.workflow(name="orders.price")
async def price(order: str) -> float:
    quoted: float = await quote(order)
    return quoted


@wf.step(max_retries=2, backoff=0.0)
async def charge(order: str) -> None:
    raise CardDeclined(f"card declined for {order}")


@wf.workflow(name="orders.pay")
async def pay(order: str) -> None:
    await reserve(order)
    await charge(order)


@wf.step
async def pack(order: str) -> str:
    await gate(f"pack:{order}").wait()
    return "packed"


@wf.workflow(name="orders.pack")
async def packing(order: str) -> str:
    await reserve(order)
    return await pack(order)


@wf.step
async def tail(order: str) -> int:
    """Write a line, wait for the gate, write another: the stream viewer follows it."""
    async with wf.stream_writer() as out:
        await out.write(f"first line of {order}\n")
        await gate(f"tail:{order}").wait()
        await out.write(f"second line of {order}\n")
    return 2


@wf.workflow(name="orders.tail")
async def tailing(order: str) -> int:
    return await tail(order)


@wf.step
async def write_big(count: int, size: int) -> int:
    """``count`` chunks of ``size`` bytes: lines of the chunk's letter, ending ``<end of N>``."""
    async with wf.stream_writer() as out:
        for index in range(count):
            tail = f"<end of {index}>\n".encode()
            line = bytes([65 + index]) * 99 + b"\n"
            body = line * ((size - len(tail)) // len(line))
            await out.write(body + b"." * (size - len(tail) - len(body)) + tail)
    return count


@wf.workflow(name="streams.big")
async def big_stream(count: int, size: int) -> int:
    return await write_big(count, size)


async def settle(engine: Engine, run_id: str) -> None:
    """Until the run's driver stops (it ended or suspended)."""
    task = engine.drivers.get(run_id)
    if task is not None:
        await asyncio.wait({task})
    for _ in range(200):  # child runs are driven by tasks of their own
        if not any(key.startswith(run_id) and not t.done() for key, t in engine.drivers.items()):
            return
        await asyncio.gather(*[t for k, t in engine.drivers.items() if k.startswith(run_id)])


async def wait_for(engine: Engine, run_id: str, status: str) -> None:
    """Until the run has ``status`` (for runs whose driver keeps going)."""
    for _ in range(5000):
        if (await engine.store.get_run(run_id)).status.value == status:
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"run {run_id} never became {status}")


async def populate(engine: Engine, *, live: bool = True) -> dict[str, str]:
    """One run per state, oldest first, a minute apart; returns their ids by state name.

    States: completed (with streams), sleeping, hook, child (its parent waits on it), retrying,
    failed, cancelled, pending, orphan (running, driver gone) and, with ``live``, running (a
    step blocked on a gate) — left running, for the caller to finish or abandon.
    """
    GATES.clear()
    _quote_calls.clear()
    clock = engine.clock
    ids: dict[str, str] = {}

    async def begin(state: str, flow: object, arg: object, detach: bool = False) -> wf.Run[object]:
        clock.jump(60)  # type: ignore[attr-defined]
        run_id = fixed_id(clock.now(), len(ids) + 1)
        ids[state] = run_id
        run: wf.Run[object] = await engine.start(
            flow,  # type: ignore[arg-type]
            (arg,),
            {},
            run_id=run_id,
            detach=detach,
        )
        return run

    await begin("completed", ship, "order-1")
    await settle(engine, ids["completed"])
    await begin("sleeping", remind, "order-2")
    await settle(engine, ids["sleeping"])
    await begin("hook", approve, "order-3")
    await settle(engine, ids["hook"])
    await begin("parent", batch, ["order-4"])
    await settle(engine, ids["parent"])
    ids["child"] = f"{ids['parent']}.0"
    await begin("retrying", price, "order-5")
    await settle(engine, ids["retrying"])
    await begin("failed", pay, "order-6")
    await settle(engine, ids["failed"])
    cancelled = await begin("cancelled", remind, "order-7")
    await settle(engine, ids["cancelled"])
    await cancelled.cancel(wait=True)
    await begin("pending", ship, "order-8", detach=True)
    await begin("orphan", packing, "order-9")
    await wait_for(engine, ids["orphan"], "running")
    await asyncio.sleep(0.01)
    driver = engine.drivers[ids["orphan"]]
    driver.cancel()  # its process "dies": the lock goes with it
    await asyncio.wait({driver})
    if live:
        await begin("running", packing, "order-10")
        await wait_for(engine, ids["running"], "running")
        await asyncio.sleep(0.01)
    return ids


@wf.step(max_retries=0)
async def cut_tail(order: str) -> int:
    """Write a line, then fail for good: the stream's writer is cut off."""
    async with wf.stream_writer() as out:
        await out.write(f"half a line of {order}")
        raise wf.FatalError("the carrier hung up")


@wf.workflow(name="orders.cut")
async def cut_tailing(order: str) -> int:
    return await cut_tail(order)
