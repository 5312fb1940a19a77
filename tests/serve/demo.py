"""Workflows that make the web UI screenshots look like a real shop (see screenshots.py)."""

from __future__ import annotations

import asyncio
import dataclasses

import wf

_attempts: dict[str, int] = {}


@dataclasses.dataclass
class Approval:
    approved: bool
    by: str


@wf.step
async def reserve_stock(order: int) -> dict[str, int]:
    await asyncio.sleep(0.35)
    return {"order": order, "items": 3}


@wf.step(max_retries=4, backoff=0.4)
async def charge_card(order: int) -> str:
    key = wf.step_id()
    _attempts[key] = _attempts.get(key, 0) + 1
    await asyncio.sleep(0.25)
    if _attempts[key] < 3:
        raise ConnectionError("payment gateway timed out")
    return f"ch_{order}7f3a"


@wf.step
async def render_invoice(order: int) -> int:
    async with wf.stream_writer() as out:
        for line in (
            f"INVOICE #{order}\n",
            "2 x  Espresso beans 1kg      38.00\n",
            "1 x  Burr grinder            129.00\n",
            "     shipping                  4.90\n",
            "     total                   171.90 EUR\n",
        ):
            await out.write(line.encode())
            await asyncio.sleep(0.15)
    return 5


@wf.step
async def send_email(order: int, kind: str) -> None:
    await asyncio.sleep(0.2)


@wf.workflow
async def notify(order: int) -> str:
    await send_email(order, "confirmation")
    return "sent"


@wf.workflow
async def checkout(order: int) -> str:
    await reserve_stock(order)
    await charge_card(order)
    await render_invoice(order)
    child = await wf.start(notify, order)
    await child.result()
    await wf.sleep(0.5)
    hook = wf.create_hook(Approval, token=f"ship:{order}")
    decision = await hook.next()
    return "shipped" if decision.approved else "held"


@wf.workflow
async def quick_order(order: int) -> str:
    await reserve_stock(order)
    await send_email(order, "receipt")
    return "done"


@wf.step(max_retries=1, backoff=0.2)
async def refund_card(order: int) -> None:
    await asyncio.sleep(0.1)
    raise ValueError(f"charge for order {order} was already refunded")


@wf.workflow
async def refund(order: int) -> None:
    await refund_card(order)


@wf.workflow
async def nightly_report(day: str) -> None:
    await wf.sleep(6 * 3600)
