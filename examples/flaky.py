"""Retries: a step that fails twice with a transient error, then succeeds.

Run it from the repository root::

    wf run examples/flaky.py:fetch_quote

The live view shows the step retrying (attempt 2, attempt 3) with its backoff; each failure is
recorded in the journal (see ``wf inspect <run id>``). Raise ``wf.FatalError`` instead to fail a
step without retries, or ``wf.RetryableError(after=...)`` to choose the delay yourself.
"""

from __future__ import annotations

import wf


class Unavailable(Exception):
    """A transient error: the service is busy."""


# Attempts per idempotency key, so the step fails twice per run (even when several runs share a
# process). A real step would call a service; wf.step_id() is the key to send along with it.
_attempts: dict[str, int] = {}


@wf.step(max_retries=3, backoff=0.2)
def quote(symbol: str) -> float:
    key = wf.step_id()
    _attempts[key] = _attempts.get(key, 0) + 1
    if _attempts[key] <= 2:
        raise Unavailable(f"quote service busy (attempt {_attempts[key]})")
    return 42.0


@wf.workflow
async def fetch_quote(symbol: str = "WF") -> dict[str, float]:
    price = await quote(symbol)
    return {symbol: price}
