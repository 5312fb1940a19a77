"""Workflows that tests start by name: a test module never imports this one itself, so a
producer's start cannot lean on the declaration (the worker imports it by its target)."""

from __future__ import annotations

import dataclasses

import wf


@dataclasses.dataclass
class Order:
    id: str
    cents: int


@wf.step
def charge_card(order: Order) -> str:
    return f"receipt-{order.id}-{order.cents}"


@wf.workflow(concurrency=2, max_attempts=3)
async def charge(order: Order) -> str:
    return await charge_card(order)


@wf.workflow(queue="billing")
async def queued(n: int) -> int:
    return n + 1


@wf.workflow(group=lambda user, n: user)
async def per_user(user: str, n: int) -> str:
    return f"{user}:{n}"


@wf.workflow(group=lambda user, n: user or None)
async def maybe_per_user(user: str, n: int) -> str:
    return f"{user or 'nobody'}:{n}"


@wf.workflow(name="custom-name")
async def renamed() -> str:
    return "renamed"


class CardDeclined(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


@wf.workflow
async def declined(code: int) -> None:
    raise CardDeclined("card declined", code)
