"""Human approval with a hook: the run suspends until someone answers, for as long as it takes.

Run it from the repository root, in one terminal::

    wf run examples/approval.py:expense --input '{"expense_id": "e-42", "amount": 120}'

It returns once the run is suspended on ``hook.next()``, printing the run's id and the command
that finishes it: the run waits in the store, holding no process, memory or lock. Then::

    wf hooks                                    # approve:e-42 is waiting
    wf hook resume approve:e-42 --data '{"approved": true, "by": "ada"}'

delivers the payload and drives the run to its end (``run ...: completed``; ``wf runs`` shows
it). With ``wf run ... --wait`` the first terminal keeps waiting instead and prints ``"paid e-42
(120.0), approved by ada"`` when the payload arrives from another terminal
(``--data '{"approved": true}'`` works too: ``by`` has a default). A payload that does not
fit ``Decision`` (``--data '{"by": "ada"}'``: no decision) is refused with exit 2 and the run
keeps waiting. From Python, ``await wf.resume_hook("approve:e-42", {...})`` does the same.
"""

from __future__ import annotations

import dataclasses
import sys

import wf


@dataclasses.dataclass
class Decision:
    approved: bool
    by: str = "someone"


@wf.step
def notify_approver(expense_id: str, amount: float, token: str) -> None:
    # A real step would send an email or a chat message with a link that delivers the payload.
    message = f"expense {expense_id} ({amount}) needs approval: wf hook resume {token} --data ..."
    print(message, file=sys.stderr)  # stdout is where `wf run` prints the run's result


@wf.step
def pay(expense_id: str, amount: float) -> str:
    return f"paid {expense_id} ({amount})"


@wf.workflow
async def expense(expense_id: str, amount: float) -> str:
    # A token derived from the business key: whoever decides knows where to send the answer.
    hook: wf.Hook[Decision] = wf.create_hook(Decision, token=f"approve:{expense_id}")
    await notify_approver(expense_id, amount, hook.token)
    decision = await hook.next()  # the run suspends here until a payload arrives
    if not decision.approved:
        return f"rejected by {decision.by}"
    return f"{await pay(expense_id, amount)}, approved by {decision.by}"
