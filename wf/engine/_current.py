"""Which engine is current, and where a program that configured none gets one.

The bottom of the kernel: every module may ask ``current_engine()``, and none of them needs to
know how a default engine is built. Building one means reading the project's configuration and
opening a concrete store, which is the business of the layer above the kernel: ``wf._setup``
installs the factories (``install_factories``) when the ``wf`` package is imported, so the
kernel imports neither ``wf._config`` nor a store.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wf.engine._enginelike import EngineLike

_engine_var: contextvars.ContextVar[EngineLike | None] = contextvars.ContextVar(
    "wf_engine", default=None
)
_process_engine: EngineLike | None = None
_engine_factory: Callable[[], EngineLike] | None = None


def install_factories(*, engine: Callable[[], EngineLike]) -> None:
    """Tell the kernel how to build the default engine (``wf._setup``)."""
    global _engine_factory
    _engine_factory = engine


def current_engine() -> EngineLike:
    """The engine in use here: the context's, else the process-wide one (built on first use)."""
    global _process_engine
    engine = _engine_var.get()
    if engine is not None:
        return engine
    if _process_engine is None:
        if _engine_factory is None:  # only if the wf package's own __init__ never ran
            from wf._exceptions import UsageError

            raise UsageError("no engine: call wf.configure() or use wf.testing.TestEngine")
        _process_engine = _engine_factory()
    return _process_engine


def set_process_engine(engine: EngineLike | None) -> EngineLike | None:
    """Make ``engine`` the process-wide engine; return the previous one (for restoring it)."""
    global _process_engine
    previous, _process_engine = _process_engine, engine
    return previous


@contextlib.contextmanager
def use_engine(engine: EngineLike) -> Iterator[EngineLike]:
    """Make ``engine`` current within the block (and the tasks it starts)."""
    token = _engine_var.set(engine)
    try:
        yield engine
    finally:
        _engine_var.reset(token)
