"""Everything known about one run as ``wf inspect --json`` prints it, and its ``why`` line.

The data comes from ``wf.admin.Admin.run_detail`` (the store here or a ``wf serve``: the same
shape) and the reasons from ``wf.admin.explain``; this module only puts them into JSON and
words. The shape is documented in ``docs/cli.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from wf.admin._words import why_line

if TYPE_CHECKING:
    from wf.admin import RunDetail


def detail_json(detail: RunDetail) -> dict[str, Any]:
    """A run's detail as ``wf inspect --json`` prints it."""
    from wf.admin import explain

    data = detail.to_json()
    why = why_line(explain(detail), detail.now)
    if detail.cancel_requested and not detail.run.status.is_terminal:
        why += "; cancellation requested"
    return {"run": data.pop("run"), "why": why, **data}
