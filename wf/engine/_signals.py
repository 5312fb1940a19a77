"""A look at the process's stop signals after each step: a step may have taken them.

Some libraries install their own SIGTERM / SIGINT handlers when first used (``signal.signal``),
which only code on the main thread can do: an async step, on the event loop. Left in place, such
a handler keeps a ``wf worker`` from ever stopping gracefully. Whoever holds the stop signals for
the process (``wf._interrupts.StopSignals``, outside the kernel) registers a callback here; the
kernel calls it, with the step's name, each time a step attempt ends. Without one registered
this costs a list's truth test per step.
"""

from __future__ import annotations

from collections.abc import Callable

watchers: list[Callable[[str], None]] = []
"""Called with a step's name after each of its attempts, on the event loop's thread."""


def watch(callback: Callable[[str], None]) -> Callable[[], None]:
    """Register ``callback``; returns what unregisters it."""
    watchers.append(callback)

    def unwatch() -> None:
        if callback in watchers:
            watchers.remove(callback)

    return unwatch


def step_ended(name: str) -> None:
    """Tell the watchers that an attempt of step ``name`` ended (they never raise here)."""
    for callback in list(watchers):
        try:
            callback(name)
        except Exception:  # a watcher's fault is never a step's
            continue
