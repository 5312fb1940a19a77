"""``@wf.workflow``: declaring workflows, and the registry that finds them again by name."""

from __future__ import annotations

import copy
import datetime as dt
import enum
import functools
import inspect
import math
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, ClassVar, Generic, ParamSpec, TypeVar, overload

from wf._exceptions import UsageError, WorkflowNotFound
from wf.engine._durations import parse_retention
from wf.engine._queueing import Backoff, QueueOptions, RunOptions
from wf.engine._suggest import refuse_unknown_keywords
from wf.store._limits import check_name

P = ParamSpec("P")
R = TypeVar("R")

_registry: dict[str, Workflow[Any, Any]] = {}


class _StoreWide(enum.Enum):
    """The default of ``retention=``: not given, so the store-wide setting decides (an explicit
    ``None`` keeps the workflow's runs forever)."""

    STORE_WIDE = "store-wide"

    def __repr__(self) -> str:
        return "<the store-wide retention>"


STORE_WIDE = _StoreWide.STORE_WIDE

Retention = float | dt.timedelta | str | None | _StoreWide
"""What ``retention=`` takes: a duration, None (kept forever) or ``STORE_WIDE`` (not given)."""


class Workflow(Generic[P, R]):
    """A declared workflow. Calling it runs the function: inside a run its steps join that run.

    Start a durable run with ``await wf.start(flow, ...)``; ``flow.with_options(...)`` gives a
    handle whose runs override some queue options.
    """

    is_wf_workflow: ClassVar[bool] = True
    """Lets the loader (below the kernel) recognise a workflow without importing this class."""

    def __init__(
        self,
        fn: Callable[P, Awaitable[R]],
        *,
        name: str | None = None,
        options: QueueOptions | None = None,
        retention: Retention = STORE_WIDE,
    ) -> None:
        if not inspect.iscoroutinefunction(fn):
            raise UsageError(_not_a_coroutine(fn))
        self.fn = fn
        if name is not None:
            check_name("a workflow name", name)  # journal text, a key in every store
        self.module = _importable_module(fn)
        """The module other processes import it from: its own, or for a script run as
        ``python3 jobs/x.py`` (``__main__``) the script's module name (``jobs.x``) when it
        has one, else ``__main__`` (which no other process imports: ``target`` is None)."""
        self.name = name or f"{self.module}:{fn.__qualname__}"
        self.signature = inspect.signature(fn)
        self.options = options or QueueOptions()
        self.run_options: RunOptions | None = None
        self.retention: float | None = _seconds_kept(retention)
        """Seconds a finished run of this workflow is kept, then deleted: ``math.inf`` keeps
        them forever (``retention=None``); None lets the store-wide setting decide."""
        self.declared_in = threading.get_ident()
        self.execution = _execution(fn)
        """Which execution of its module declared it (the module's ``__spec__``, which
        ``importlib.reload`` and a re-import find anew; the module itself if it has none):
        a module executed again replaces what its earlier execution declared."""
        """The thread that declared it: while its module is still importing, that thread
        (which Python hands the partial module) may use it; another waits for the import."""
        functools.update_wrapper(self, fn)

    def with_options(self, **options: Any) -> Workflow[P, R]:
        """A handle on this workflow whose runs use these options: ``priority``, ``group``,
        ``max_attempts``, ``max_recoveries``, ``delay`` (seconds or timedelta), ``at`` (an
        aware datetime),
        ``unique`` (an id that exists already is an error). ``wf.start`` accepts it."""
        handle = copy.copy(self)
        handle.run_options = RunOptions.build(self.run_options, options)
        return handle

    @property
    def target(self) -> str | None:
        """How another process imports this workflow (``module:qualname``), if it can."""
        module, qualname = self.module, self.fn.__qualname__
        if module == "__main__" or "<locals>" in qualname:
            return None
        return f"{module}:{qualname}"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, R]:
        return self.fn(*args, **kwargs)

    def __await__(self) -> Generator[Any, None, R]:
        short = self.fn.__name__
        raise UsageError(
            f"workflow {short!r} is awaited without being called: write await {short}(...)"
        )

    def __repr__(self) -> str:
        return f"<wf.workflow {self.name}>"


def _importable_module(fn: Callable[..., Any]) -> str:
    """``fn``'s module, or for a function of the script being run, the name that script is
    imported by elsewhere (``wf._loader.script_module``) when it has one."""
    module = str(getattr(fn, "__module__", None) or "__main__")
    if module != "__main__":
        return module
    from wf._loader import script_module

    return script_module(fn) or module


def _seconds_kept(retention: Retention) -> float | None:
    if retention is STORE_WIDE:
        return None
    if retention is None:
        return math.inf
    return parse_retention(retention, what="retention")


@overload
def workflow(fn: Callable[P, Awaitable[R]], /) -> Workflow[P, R]: ...


@overload
def workflow(
    *,
    name: str | None = None,
    max_attempts: int = 1,
    backoff: Backoff | None = None,
    priority: int = 0,
    group: str | Callable[..., str | None] | None = None,
    group_concurrency: int = 1,
    concurrency: int | None = None,
    rate_limit: tuple[int, float] | None = None,
    queue: str | None = None,
    progress: Any = None,
    retention: Retention = STORE_WIDE,
    max_recoveries: int | None = None,
) -> Callable[[Callable[P, Awaitable[R]]], Workflow[P, R]]: ...


def workflow(
    fn: Callable[P, Awaitable[R]] | None = None,
    /,
    *,
    name: str | None = None,
    max_attempts: int = 1,
    backoff: Backoff | None = None,
    priority: int = 0,
    group: str | Callable[..., str | None] | None = None,
    group_concurrency: int = 1,
    concurrency: int | None = None,
    rate_limit: tuple[int, float] | None = None,
    queue: str | None = None,
    progress: Any = None,
    retention: Retention = STORE_WIDE,
    max_recoveries: int | None = None,
    **unknown: Any,
) -> Workflow[P, R] | Callable[[Callable[P, Awaitable[R]]], Workflow[P, R]]:
    """Declare a workflow (an ``async def``); bare or with options.

    ``name`` defaults to ``module:qualname`` and is what the store records, so renaming the
    function of a workflow with runs in flight needs ``name=`` to keep the old name. (In a
    script run as ``python3 jobs/x.py`` the module is the one other processes import it by,
    ``jobs.x``, when the file has one.) A name is one function's: declaring another function
    under a name declared already raises ``wf.UsageError`` naming both; the same function
    declared again (its module imported again) replaces the old declaration.

    Queue options (``docs/queues.md``): ``max_attempts`` run-level attempts, ``backoff``
    (attempt -> seconds, default ``wf.exp_backoff()``), ``priority`` (0 .. 2**21-1, higher
    first), ``group`` (a FIFO lane: a string, or a function of the run's arguments),
    ``group_concurrency``, ``concurrency`` (runs of this workflow at once, store-wide),
    ``rate_limit`` ((n, seconds): starts per window, store-wide), ``queue`` (a name
    ``wf worker --queue`` serves), ``progress`` (the type ``wf.progress`` data must fit),
    ``max_recoveries`` (deaths of the driving process in a row, without progress, before the
    run fails with ``wf.RunStalled``; default ``[tool.wf] max_recoveries``, 10).

    ``retention`` (seconds, a ``timedelta`` or text like ``"30d"``): finished runs are deleted
    that long after they end, by ``wf gc`` and by workers; each run keeps the retention it
    was started with. Not given, the store-wide retention applies; ``retention=None`` keeps
    the runs forever whatever the store-wide setting; 0 is refused (``wf.UsageError``: it
    would delete results before anyone read them).

    An unknown keyword (``attempts=3``) is a ``wf.UsageError`` that names the closest one.
    """
    refuse_unknown_keywords("wf.workflow()", unknown, _WORKFLOW_KEYWORDS)
    options = QueueOptions(
        max_attempts=max_attempts,
        backoff=backoff,
        priority=priority,
        group=group,
        group_concurrency=group_concurrency,
        concurrency=concurrency,
        rate_limit=rate_limit,
        queue=queue,
        progress=progress,
        max_recoveries=max_recoveries,
    )

    def declare(f: Callable[P, Awaitable[R]]) -> Workflow[P, R]:
        declared = Workflow(f, name=name, options=options, retention=retention)
        earlier = _registry.get(declared.name)
        if earlier is not None and not _same_definition(earlier, declared):
            raise UsageError(_declared_twice(declared.name, earlier.fn, f))
        # The same definition declared again (its module re-imported: ``wf dev``'s reload,
        # ``importlib.reload``, a script imported by its module name too) replaces the old.
        _registry[declared.name] = declared
        return declared

    return declare(fn) if fn is not None else declare


_WORKFLOW_KEYWORDS = (
    "name",
    "max_attempts",
    "backoff",
    "priority",
    "group",
    "group_concurrency",
    "concurrency",
    "rate_limit",
    "queue",
    "progress",
    "retention",
    "max_recoveries",
)


def retained_workflows() -> list[str]:
    """Names of the workflows declared in this process with a retention of their own that
    deletes (their runs carry it)."""
    return sorted(
        declared.name
        for declared in _registry.values()
        if declared.retention is not None and math.isfinite(declared.retention)
    )


def declared_workflows() -> list[Workflow[Any, Any]]:
    """Every workflow declared in this process so far."""
    return list(_registry.values())


def registered(name: str) -> Workflow[Any, Any] | None:
    """The workflow declared under ``name`` in this process, if any."""
    return _lookup(name)


_MAIN = "__main__:"


def _lookup(name: str) -> Workflow[Any, Any] | None:
    """The workflow declared under ``name``; for ``__main__:qualname`` (what a wf before
    scripts were recorded by their module names recorded), the workflow of that qualname the
    script running as ``__main__`` declares under its default name now (``jobs.x:qualname``)."""
    found = _registry.get(name)
    if found is not None or not name.startswith(_MAIN):
        return found
    qualname = name[len(_MAIN) :]
    for declared in _registry.values():
        if _main_default(declared) and declared.fn.__qualname__ == qualname:
            return declared
    return None


def _main_default(declared: Workflow[Any, Any]) -> bool:
    """Whether ``declared`` is a function of the script running as ``__main__`` declared under
    its default name (``module:qualname``, ``module`` the script's module name)."""
    fn = declared.fn
    qualname = getattr(fn, "__qualname__", None)
    return (
        getattr(fn, "__module__", None) == "__main__"
        and declared.name == f"{declared.module}:{qualname}"
    )


def same_workflow(recorded: str, workflow: Any) -> bool:
    """Whether a run recorded under the workflow name ``recorded`` is one of ``workflow``:
    its name, or ``__main__:qualname`` for the script's workflow of that qualname declared
    under its default name (an older wf recorded a script's workflows so)."""
    if recorded == workflow.name:
        return True
    return (
        isinstance(workflow, Workflow)
        and recorded == f"{_MAIN}{workflow.fn.__qualname__}"
        and _main_default(workflow)
    )


async def resolve_workflow_off_loop(name: str, target: str | None) -> Workflow[Any, Any]:
    """``resolve_workflow``, with the import it may need run in a thread of its own
    (``wf._loader.load_off_loop``): a module that takes seconds to import stalls no other run
    of the process meanwhile. Its failures are the same ``LoadError`` / ``WorkflowNotFound``,
    the resolving run's, not the caller's loop's. A declared workflow is found at once."""
    if target and not imported(_lookup(name)):
        from wf._loader import load_off_loop

        return await load_off_loop(resolve_workflow, name, target)
    return resolve_workflow(name, target)


def imported(declared: Workflow[Any, Any] | None) -> bool:
    """Whether ``declared`` comes from a module whose import finished: not one that failed
    (Python drops such a module from ``sys.modules``) nor one another thread is still
    importing, which may yet fail below the declaration. The thread importing it may use it
    (a module that starts a run of its own workflow and waits for it as it is imported):
    Python hands that thread the partial module too."""
    if declared is None:
        return False
    module = sys.modules.get(getattr(declared.fn, "__module__", ""))
    if module is None:
        return False
    if not getattr(getattr(module, "__spec__", None), "_initializing", False):
        return True
    return declared.declared_in == threading.get_ident()


def _forget_failed_imports(before: dict[str, Workflow[Any, Any]]) -> None:
    """Undo what a failed import declared: a workflow its module declared before failing must
    not be found by the next start by name, which would run the half-imported module's code.
    Only what the import added or replaced is looked at."""
    for name, declared in list(_registry.items()):
        earlier = before.get(name)
        if earlier is declared or getattr(declared.fn, "__module__", None) in sys.modules:
            continue
        if earlier is not None and imported(earlier):
            _registry[name] = earlier
        else:
            del _registry[name]


def resolve_workflow(name: str, target: str | None) -> Workflow[Any, Any]:
    """Find the workflow named ``name``, importing ``target`` first if it is not yet declared."""
    found = _lookup(name)
    if target and not imported(found):
        # Not declared, or by a module whose import failed or is still under way: the import
        # (which waits for another thread's) says which.
        from wf._loader import load_target

        before = dict(_registry)
        try:
            loaded = load_target(target)
        except BaseException:
            _forget_failed_imports(before)
            raise
        found = _lookup(name) or (loaded if isinstance(loaded, Workflow) else None)
    if found is None:
        hint = f" (tried importing {target!r})" if target else ""
        raise WorkflowNotFound(f"no workflow named {name!r} is declared in this process{hint}")
    return found


def _same_definition(earlier: Workflow[Any, Any], later: Workflow[Any, Any]) -> bool:
    """Whether ``later`` declares again what ``earlier`` declared: any function of the same
    module executed again (``importlib.reload``, a re-import after a purge: a rename that keeps
    ``name=`` included), the same code declared again in one execution, or the same code of
    the same file (one file executed under two module names, ``__main__`` and its own). A
    module whose import failed or was purged declares nothing any more: what it declared may
    be taken over. Code is compared, with what a wrapper closes over (two functions under one
    decorator that lacks ``functools.wraps`` share the wrapper's name and code)."""
    first, second = earlier.fn, later.fn
    module = getattr(first, "__module__", None)
    if module == getattr(second, "__module__", None):
        if earlier.execution is not None and earlier.execution is not later.execution:
            return True  # the module executed again: its new declarations replace the old
        if first is second or _code_of(first) == _code_of(second):
            return True
        return _gone(first)
    if getattr(first, "__qualname__", None) != getattr(second, "__qualname__", None):
        return _gone(first)
    file = _source(first)[0]
    same = file is not None and _code_of(first) == _code_of(second)
    return same or _gone(first)


def _execution(fn: Callable[..., Any]) -> object | None:
    """The module execution ``fn`` is declared in (``Workflow.execution``)."""
    module = sys.modules.get(getattr(fn, "__module__", ""))
    if module is None:
        return None
    spec = getattr(module, "__spec__", None)
    return spec if spec is not None else module


def _code_of(fn: Any, depth: int = 0) -> tuple[Any, ...]:
    """Where ``fn``'s code is (file, first line, name), with that of the functions its
    closure holds (a wrapper's wrapped function), a few levels deep."""
    fn = inspect.unwrap(fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return (getattr(fn, "__qualname__", None),)
    held: list[tuple[Any, ...]] = []
    if depth < 4:
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if inspect.isfunction(value) or inspect.ismethod(value):
                held.append(_code_of(value, depth + 1))
    return (code.co_filename, code.co_firstlineno, code.co_qualname, tuple(held))


def _gone(fn: Callable[..., Any]) -> bool:
    """Whether the module that declared ``fn`` is no longer imported (its import failed, or
    it was purged): nothing runs its declarations any more."""
    return sys.modules.get(getattr(fn, "__module__", "")) is None


def _source(fn: Callable[..., Any]) -> tuple[str | None, int | None]:
    """The file and first line of ``fn``'s code (an ``async def``'s), if it has them."""
    code = getattr(inspect.unwrap(fn), "__code__", None)
    if code is None:
        return None, None
    return code.co_filename, code.co_firstlineno


def _declared_twice(name: str, earlier: Callable[..., Any], later: Callable[..., Any]) -> str:
    """The ``wf.UsageError`` of a name declared by two different functions."""
    return (
        f"workflow name {name!r} is declared twice: by {_described(earlier)} and by "
        f"{_described(later)}; a run records only its name, so give one of them another "
        "@wf.workflow(name=...)"
    )


def _described(fn: Callable[..., Any], depth: int = 0) -> str:
    """``module:qualname (file.py:3)``."""
    import os

    where = f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"
    file, line = _source(fn)
    if file is not None:
        where = f"{where} ({os.path.basename(file)}:{line})"
    inner = _wrapped(fn) if depth < 3 else None
    if inner is not None and inner is not fn:  # a decorator without functools.wraps
        where = f"{where} wrapping {_described(inner, depth + 1)}"
    return where


def _wrapped(fn: Callable[..., Any]) -> Callable[..., Any] | None:
    """The function a wrapper's closure holds, if it holds one (only one)."""
    held = []
    for cell in getattr(inspect.unwrap(fn), "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if inspect.isfunction(value):
            held.append(value)
    return held[0] if len(held) == 1 else None


def _not_a_coroutine(fn: Callable[..., Any]) -> str:
    """Why ``@wf.workflow`` refuses ``fn``, naming what it is."""
    name = getattr(fn, "__qualname__", repr(fn))
    if inspect.isasyncgenfunction(fn):
        return (
            f"@wf.workflow needs an async def that returns its result; {name!r} is an async "
            "generator (it yields): return the result (to send values as it runs, write them "
            "from a step with wf.stream_writer())"
        )
    if inspect.isgeneratorfunction(fn):
        return f"@wf.workflow needs an async def; {name!r} is a generator function"
    return f"@wf.workflow needs an async def; {name!r} is a plain function"
