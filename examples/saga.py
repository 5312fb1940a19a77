"""A booking saga: each step that succeeds registers how to undo it; a failure undoes them all.

Run it from the repository root::

    wf run examples/saga.py:book_trip --input '{"trip": "lisbon"}'                  # fails
    wf run examples/saga.py:book_trip --input '{"trip": "lisbon", "card": "ok"}'    # completes
    wf inspect <run id> --json     # "compensations": what was registered and what ran

``wf.rollback(step, *args)`` registers a compensation. If the run fails (or is cancelled), the
compensations run last-in-first-out, each as a durable step, before the failure is recorded — so
a crash while compensating resumes where it stopped and never releases a seat twice.
"""

from __future__ import annotations

import wf


class PaymentDeclined(Exception):
    """The card was refused: not worth retrying."""


@wf.step
def reserve_flight(trip: str) -> str:
    return f"flight:{trip}"


@wf.step
def cancel_flight(booking: str) -> str:
    return f"cancelled {booking}"


@wf.step
def reserve_hotel(trip: str) -> str:
    return f"hotel:{trip}"


@wf.step
def cancel_hotel(booking: str) -> str:
    return f"cancelled {booking}"


@wf.step
def charge(trip: str, card: str) -> str:
    if card != "ok":
        raise wf.FatalError(f"card {card!r} declined for {trip}")
    return f"paid:{trip}"


@wf.workflow
async def book_trip(trip: str, card: str = "declined") -> list[str]:
    flight = await reserve_flight(trip)
    wf.rollback(cancel_flight, flight)  # registered only once the flight is really booked
    hotel = await reserve_hotel(trip)
    wf.rollback(cancel_hotel, hotel)
    receipt = await charge(trip, card)  # fails: cancel_hotel, then cancel_flight, run
    return [flight, hotel, receipt]
