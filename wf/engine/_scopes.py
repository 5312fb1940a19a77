"""Cancel scopes: run cancellation (the root scope) and ``wf.timeout`` / ``wf.deadline``.

Firing a timeout's scope does not interrupt a running step (the run's own scope cancels its
async steps too: ``RunContext.fire``). The cancellation is *delivered* either to the waits
pending inside the scope (a timer, a hook, a child, a retry backoff) or, if none is pending, to
the next durable operation started inside it. Each delivery is recorded (``cancel_delivered``
with the op and whether it landed on the call or on the wait), so replay raises at exactly the
same place.
"""

from __future__ import annotations

import contextvars
import dataclasses
from typing import Any

from wf._exceptions import Cancelled

_current_scope: contextvars.ContextVar[CancelScope | None] = contextvars.ContextVar(
    "wf_scope", default=None
)


class ScopeTimedOut(Cancelled):
    """Raised inside a ``wf.timeout`` scope whose deadline passed; the scope turns it into
    ``TimeoutError`` at its exit."""

    def __init__(self, scope: CancelScope) -> None:
        super().__init__(f"timeout scope #{scope.op} expired")
        self.scope = scope


@dataclasses.dataclass(eq=False)
class CancelScope:
    """A region of workflow code that can be cancelled as a whole. ``op`` is None for the run."""

    op: int | None
    parent: CancelScope | None
    fired: bool = False
    ops: list[int] | None = None
    """A timeout's scope: the operations begun inside it, so its end is judged by what the
    journal recorded of them (``wf.engine._compose.timeout``); None for other scopes."""
    awaited: list[Any] | None = None
    """A timeout's scope: the operation tasks that code inside it awaited (``OpTask``), so
    its end counts those begun before it by when they ended; None for other scopes."""

    def contains(self, inner: CancelScope | None, root: CancelScope) -> bool:
        """Whether code running in ``inner`` (None: the run's top level) is inside this scope."""
        scope: CancelScope | None = inner or root
        while scope is not None:
            if scope is self:
                return True
            scope = scope.parent or (root if scope is not root else None)
        return False

    def exception(self) -> BaseException:
        """What code inside the scope sees when the cancellation reaches it."""
        return Cancelled() if self.op is None else ScopeTimedOut(self)


def current_scope() -> CancelScope | None:
    """The innermost timeout scope around the calling code (None: only the run's own)."""
    return _current_scope.get()
