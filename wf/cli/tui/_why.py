"""Why a run is where it is, in words for the run screen's header.

The reasons come from ``wf.admin.explain`` (the one explainer), the words from ``wf.admin._words``
(shared with the web UI); this adds the screen's keys where one helps (``r`` to send a hook a
payload, enter to open a child).
"""

from __future__ import annotations

import dataclasses

from wf.admin import Explanation
from wf.admin._words import sentence
from wf.cli.tui._text import at


@dataclasses.dataclass(frozen=True)
class Reason:
    """One line of the explanation. ``tone``: ``info``, ``wait``, ``ok``, ``warn``, ``error``."""

    tone: str
    text: str


_HINTS = {"hook": "press r to send it a payload", "child": "press enter on it below"}


def lines(explanation: Explanation, now: float) -> list[Reason]:
    """The lines of the run screen's header below the run's name."""
    out = []
    for fact in explanation.reasons:
        text = sentence(fact, now, at=at, hints=_HINTS)
        if text is not None:
            out.append(Reason(fact.tone, text))
    return out
