"""How durable operations present themselves to asyncio.

A call such as ``step(x)`` takes its operation id at once and returns an ``OpCall``: a coroutine
object (so ``await``, ``asyncio.gather`` and ``TaskGroup.create_task`` all accept it) that starts
the operation when it is first awaited or scheduled. An operation that is never started never
runs, which is what lets ``wf.select`` drop the losers of a replayed race. A step started by a
task that exists for it alone runs in that task, in a copy of its context (``OpCall`` ``inline``).

``asyncio.wait(..., FIRST_COMPLETED)``, ``as_completed`` and ``wait_for`` decide by which
operation finishes first in wall-clock time; on replay every recorded operation finishes at once,
so the decision would differ. Tasks created inside a run (through the loop's task factory) refuse
those helpers with an error naming the deterministic replacement. ``gather`` and ``TaskGroup``
are fine: they do not decide anything by timing.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
import types
import warnings
from collections.abc import Callable, Coroutine, Generator
from typing import Any, TypeVar

from wf._exceptions import UsageError
from wf.engine._context import RunContext, SelectBranch, current_run, ends_into, user_site
from wf.engine._scopes import current_scope

T = TypeVar("T")

# The frames of asyncio.tasks that decide by completion order, by code qualname, across the
# Python versions wf supports: 3.11 schedules through ``wait_for`` and ``as_completed``; 3.12
# rewrote ``wait_for`` to await its argument inline under ``asyncio.timeout``; 3.13 moved
# ``as_completed`` into an iterator class.
_REFUSED = {
    "_wait": "asyncio.wait()",
    "as_completed": "asyncio.as_completed()",
    "_AsCompletedIterator.__init__": "asyncio.as_completed()",
    "wait_for": "asyncio.wait_for()",
}
_ASYNCIO_TASKS = "asyncio.tasks"
_INLINE_WAIT_FOR = sys.version_info >= (3, 12)

in_run: contextvars.ContextVar[bool] = contextvars.ContextVar("wf_in_run", default=False)
"""True in the context of workflow code (set by the driver), used by the task factory."""


def _refusal(helper: str) -> UsageError:
    return UsageError(
        f"{helper} over wf operations does not replay deterministically: "
        "use wf.select() / wf.first() to race them, or wf.timeout() for a deadline"
    )


def _refuse_racing_helpers() -> None:
    """Refuse a done-callback added by a racing helper of asyncio (3.11's ``wait_for``; every
    version's ``wait`` and ``as_completed``)."""
    caller = sys._getframe(2)
    name = _REFUSED.get(caller.f_code.co_qualname)
    if name is not None and caller.f_globals.get("__name__") == _ASYNCIO_TASKS:
        raise _refusal(name)


def _refuse_inline_wait_for(call: OpCall[Any]) -> None:
    """Refuse ``call``, an operation awaited under ``asyncio.wait_for`` on Python 3.12+, where
    wait_for awaits its argument inline (no task, so no done-callback to catch).

    Walks the coroutine frames above the operation up to the task's own step function; that is
    the workflow's await nesting depth, a handful of frames.
    """
    frame = sys._getframe(3)
    while frame is not None:
        if frame.f_globals.get("__name__") == _ASYNCIO_TASKS:
            if frame.f_code.co_name == "wait_for":
                # Refused, so it never runs: reported by the refusal, not again as "never
                # awaited" (a warning naming the user's step, when it is collected).
                call._start = call._inline = None
                raise _refusal(_REFUSED["wait_for"])
            return  # the task's step function: the top of this task's awaits
        frame = frame.f_back  # type: ignore[assignment]


class OpTask(asyncio.Task[T]):
    """A task created by workflow code (or executing an operation)."""

    wf_branch: SelectBranch | None = None
    """The select branch (helper coroutine) whose code made it, if one did: the ends of its
    operations are that branch's (``ends_into``), so when it ended is known there."""

    def add_done_callback(self, fn: Callable[[Any], object], *, context: Any = None) -> None:
        _refuse_racing_helpers()
        super().add_done_callback(fn, context=context)

    def __await__(self) -> Generator[Any, None, T]:
        note_awaited(self)
        return super().__await__()


def note_awaited(future: asyncio.Future[Any]) -> None:
    """``future`` is awaited (done already or not) in the awaiting code's context: the timeout
    blocks around that await ended no sooner than it did (``timeout._durable_end``); in a
    select's helper coroutine, once it has won (``SelectBranch.awaited``)."""
    branch = ends_into.get()
    scope = current_scope()
    while scope is not None and (branch is None or scope is not branch.scope):
        if scope.awaited is not None:
            scope.awaited.append(future)
        scope = scope.parent
    if branch is None or branch.run is not current_run():  # a child run's code: its own
        return
    # Kept for the blocks around the select (once the branch has won: ``_select``), and, for
    # when the branch ended, a task made outside it (``_compose._ended_at``): none else, or a
    # helper looping on its operations kept each one's outcome until the select decided.
    if branch.scope is not None or getattr(future, "wf_branch", None) is not branch:
        branch.awaited.append(future)


def task_ended_at(ctx: RunContext, task: asyncio.Future[Any]) -> float | None:
    """When ``task`` ended by the durable clock (the last operation it awaited inline, or the
    operation it was made of), None if it did not end or wf does not know."""
    if not task.done() or task.cancelled():
        return None
    at = ctx.done_at.get(task)
    if at is None and isinstance(task, asyncio.Task):
        call = task.get_coro()
        if isinstance(call, OpCall):  # made of an operation that ran in a task of its own
            inner = call._future
            at = call.wf_ended_at if inner is None else ctx.done_at.get(inner, call.wf_ended_at)
    return at


def _task_factory(
    loop: asyncio.AbstractEventLoop,
    coro: Any,
    *,
    context: contextvars.Context | None = None,
    **kwargs: Any,
) -> asyncio.Task[Any]:
    inside = context.get(in_run, False) if context is not None else in_run.get()
    if not inside:
        return asyncio.Task(coro, loop=loop, context=context, **kwargs)
    if isinstance(coro, types.CoroutineType):  # not an OpCall: it runs inline in its task
        coro = _Contained(coro)
    task = OpTask(coro, loop=loop, context=context, **kwargs)
    branch = context.get(ends_into) if context is not None else ends_into.get()
    if branch is not None:
        task.wf_branch = branch
    return task


def workflow_task(
    loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T], context: contextvars.Context
) -> asyncio.Task[T]:
    """The task of a run's workflow coroutine, ``coro`` (``_driver._no_exit``, the guard
    ``_Contained`` would add, of its own): an ``OpTask`` as the task factory makes one, without
    a second guard handing on its every send and throw (a Python call per wake-up). Under a
    foreign task factory, that factory's task, as for any task."""
    if loop.get_task_factory() is not _task_factory:
        return loop.create_task(coro, context=context)
    return OpTask(coro, loop=loop, context=context)


class _Contained(Coroutine[Any, Any, T]):
    """A coroutine workflow code made a task of, with a ``sys.exit`` or a ``KeyboardInterrupt``
    of its code made an error that fails the run (``_errors.uncaught``): asyncio re-raises
    either out of a task's step, which ends the event loop, the worker and every run in it.
    (Steps and the workflow's body have their own guard; this is for ``asyncio.gather`` of
    plain coroutines, ``asyncio.create_task`` and the like.)

    It hands each send and throw on to the coroutine rather than awaiting it from an ``async
    def``: a task cancelled before its first step throws the cancellation into its coroutine
    without running it, and a wrapper that never ran would drop the coroutine it holds never
    awaited (a ``RuntimeWarning`` naming the user's code, for a run that was only cancelled,
    suspended or crashed). Handed on, the cancellation ends the coroutine as in a plain task.
    """

    __slots__ = ("_coro",)

    def __init__(self, coro: Coroutine[Any, Any, T]) -> None:
        self._coro = coro

    def send(self, value: Any) -> Any:
        try:
            return self._coro.send(value)
        except (SystemExit, KeyboardInterrupt) as exc:
            error = _fatal_of_the_code(exc)
            if error is None:
                raise  # a real Ctrl-C where one may raise
            raise error from exc

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        try:
            if val is None and tb is None:
                return self._coro.throw(typ)  # the one-argument form (3.12 deprecates the others)
            return self._coro.throw(typ, val, tb)
        except (SystemExit, KeyboardInterrupt) as exc:
            error = _fatal_of_the_code(exc)
            if error is None:
                raise  # a real Ctrl-C where one may raise
            raise error from exc
        finally:
            # This frame is in the traceback of what goes out of it: holding the exception
            # thrown in, it would keep it and the code's frames alive until a collection.
            del typ, val, tb

    def close(self) -> None:
        try:
            self._coro.close()  # runs the code's ``finally`` blocks: guarded like a send
        except (SystemExit, KeyboardInterrupt) as exc:
            error = _fatal_of_the_code(exc)
            if error is None:
                raise
            raise error from exc

    def __await__(self) -> Generator[Any, None, T]:
        return self  # type: ignore[return-value]  # an iterator, driven by send and throw

    def __next__(self) -> Any:
        return self.send(None)

    # What asyncio reads of a task's coroutine for its repr and ``get_stack``: the code's.
    @property
    def __name__(self) -> str:
        return str(getattr(self._coro, "__qualname__", type(self._coro).__name__))

    @property
    def cr_code(self) -> Any:
        return getattr(self._coro, "cr_code", None)

    @property
    def cr_frame(self) -> Any:
        return getattr(self._coro, "cr_frame", None)

    @property
    def cr_running(self) -> bool:
        return bool(getattr(self._coro, "cr_running", False))

    # And what ``inspect.getcoroutinestate`` and debuggers read.
    @property
    def cr_await(self) -> Any:
        return getattr(self._coro, "cr_await", None)

    @property
    def cr_suspended(self) -> bool:
        return bool(getattr(self._coro, "cr_suspended", False))

    @property
    def cr_origin(self) -> Any:
        return getattr(self._coro, "cr_origin", None)


def _fatal_of_the_code(exc: SystemExit | KeyboardInterrupt) -> BaseException | None:
    """The error a ``sys.exit`` or a ``KeyboardInterrupt`` out of a task's code becomes; None
    for a real Ctrl-C where one may raise."""
    from wf.engine._errors import uncaught

    return uncaught("a task of the workflow", exc)


def install_task_factory(loop: asyncio.AbstractEventLoop) -> None:
    """Guard the tasks that workflow code creates on ``loop`` (idempotent; keeps a foreign
    factory in place, in which case only wf's own operation tasks are guarded)."""
    if loop.get_task_factory() is None:
        loop.set_task_factory(_task_factory)


def op_task(
    coro: Coroutine[Any, Any, T], loop: asyncio.AbstractEventLoop | None = None
) -> OpTask[T]:
    """Start ``coro`` as an operation task on ``loop``, the running loop (looked up if not
    given: asyncio checks the process id on every lookup, a system call)."""
    return OpTask(coro, loop=loop or asyncio.get_running_loop())


def op_done(value: Any = None, error: BaseException | None = None) -> asyncio.Future[Any]:
    """A finished operation future (its recorded result or error)."""
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
    return future


def _forgot_await(call: OpCall[Any], use: str) -> TypeError:
    return TypeError(_forgot_await_message(call, use))


def _forgot_await_message(call: OpCall[Any], use: str) -> str:
    call._start = None  # reported now; no second "never awaited" warning when it is collected
    return (
        f"{use} an un-awaited {call.wf_label}: did you forget `await`? "
        f"(write `await {call.wf_hint}`; wf help await)"
    )


class OpCall(Coroutine[Any, Any, T]):
    """A started-on-demand durable operation. Await it once, like a coroutine.

    ``inline``, when given, makes the operation's coroutine: started by a task that exists for
    it alone (``_awaited_by_its_task``), the operation runs in that task instead of a task of its
    own from ``start`` (one task, loop turn and wake-up fewer).

    Used as a value instead (added to, compared, formatted, iterated, tested for truth, asked
    for an attribute) it raises a ``TypeError`` asking "did you forget `await`?", and one that is
    dropped without ever being awaited warns (``RuntimeWarning``), as a plain coroutine does,
    unless ``run``'s drive was ended by wf meanwhile (``RunContext.drive_dropped``) or the run
    diverged (a ``NondeterminismError`` unwinding the code drops what it held). The
    warning names the line that let the call go (the line itself for a call dropped as a
    statement, the usual slip) or, while coroutine origins are tracked (Python's development
    mode, asyncio's debug mode), the line that made it: looking that up for every call cost a
    tenth of a replayed step.
    """

    __slots__ = (
        "_awaited",
        "_future",
        "_inline",
        "_iter",
        "_made_at",
        "_run",
        "_start",
        "wf_ended_at",
        "wf_hint",
        "wf_label",
    )

    def __init__(
        self,
        start: Callable[[], asyncio.Future[T]],
        label: str = "wf operation",
        hint: str = "...",
        *,
        inline: Callable[[], Coroutine[Any, Any, T]] | None = None,
        ended_at: float | None = None,
        run: RunContext | None = None,
    ) -> None:
        self._start: Callable[[], asyncio.Future[T]] | None = start
        self._run = run
        self._inline = inline
        self._future: asyncio.Future[T] | None = None
        self._awaited = False  # ``__await__`` was called: a second await is refused
        self._iter: Generator[Any, None, T] | None = None
        self.wf_label = label
        """What was called, in words: ``step 'charge' call``."""
        self.wf_hint = hint
        """The call as the user wrote it, for the message: ``charge(...)``."""
        self.wf_ended_at = ended_at
        """When a recorded outcome happened by the durable clock: ``wf.select`` reads it."""
        # Past this frame and its maker's (wf's own, as are the frames that call a maker).
        self._made_at = user_site(2) if sys.get_coroutine_origin_tracking_depth() else None

    def _iterator(self, *, own_future: bool = False) -> Generator[Any, None, T]:
        """What awaiting the operation iterates, started on first use; ``own_future``: started
        with a future of its own (``future``)."""
        if self._iter is None:
            if self._start is None:
                raise RuntimeError("cannot reuse an already awaited wf operation")
            if _INLINE_WAIT_FOR:
                _refuse_inline_wait_for(self)
            start, inline = self._start, self._inline
            # Awaited from here on, whether starting it works or not: a start that raises (a
            # recorded result that no longer decodes) is the await's error, not a call
            # dropped un-awaited (``__del__``).
            self._start = self._inline = None
            # Not while its caller handles an exception: the step's code would see it as its
            # own (``sys.exception()``, a bare ``raise``, the context of what it raises).
            if inline is not None and sys.exception() is None and _awaited_by_its_task(self):
                self._iter = _in_context(inline(), contextvars.copy_context())
            else:
                self._future = start()
                # Not the task's own ``__await__``: started for ``wf.select`` (``future``), the
                # operation is not awaited by the code here (``note_awaited``).
                self._iter = asyncio.Future.__await__(self._future)
        return self._iter

    def __await__(self) -> Generator[Any, None, T]:
        if self._awaited:  # its iterator is spent or running: a coroutine's own refusal
            raise RuntimeError("cannot reuse an already awaited wf operation")
        self._awaited = True
        awaited = self._iterator()
        if self._future is not None:
            note_awaited(self._future)
        return awaited

    def future(self) -> asyncio.Future[T]:
        """Start the operation (if not yet) and return its own future, not a task around it:
        ``wf.select`` reads when the operation ended from it."""
        if self._iter is None:
            self._inline = None  # its end time is read from its own future: a task of its own
        elif self._future is None:  # awaited already, without a future of its own
            raise RuntimeError("cannot reuse an already awaited wf operation")
        self._iterator(own_future=True)
        assert self._future is not None
        return self._future

    def send(self, value: Any) -> Any:
        return self._iterator().send(value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        if self._iter is None:
            # Never started (e.g. a cancelled loser of a race): the operation never runs.
            self._start = self._inline = None
            raise typ if val is None else val
        if val is None and tb is None:
            return self._iter.throw(typ)  # the one-argument form (3.12 deprecates the others)
        return self._iter.throw(typ, val, tb)

    def close(self) -> None:
        self._start = self._inline = None
        if self._future is not None:
            if not self._future.done():
                self._future.cancel()
        elif self._iter is not None:
            self._iter.close()

    def __repr__(self) -> str:
        return f"<un-awaited {self.wf_label}>" if self._iter is None else f"<{self.wf_label}>"

    # -- used as a value: the operation was almost certainly meant to be awaited -----------

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        # An AttributeError still (hasattr() and getattr() defaults keep working), worded
        # like the other misuses.
        raise AttributeError(_forgot_await_message(self, f"reading `.{name}` of"))

    def __bool__(self) -> bool:
        raise _forgot_await(self, "testing the truth of")

    def __iter__(self) -> Any:
        raise _forgot_await(self, "iterating over")

    def __len__(self) -> int:
        raise _forgot_await(self, "taking the length of")

    def __getitem__(self, key: Any) -> Any:
        raise _forgot_await(self, "indexing")

    def __str__(self) -> str:
        raise _forgot_await(self, "formatting")

    def __format__(self, spec: str) -> str:
        raise _forgot_await(self, "formatting")

    def __del__(self) -> None:
        if self._start is not None:
            self._start = None
            if self._run is not None and self._run.drive_dropped():
                return  # let go of by wf ending the drive, not by the code: a replay awaits it
            if self._run is not None and self._run.divergence is not None:
                # Let go of as the run's divergence unwinds the code: in `gather(a(n), a(n))`
                # the second call diverging as it is made drops the first before `gather`
                # awaits it. The divergence is the news, not a forgotten `await`.
                return
            # Made, or let go of, here; nowhere if the interpreter itself lets go of it.
            filename, lineno = self._made_at or user_site(1) or ("<interpreter>", 0)
            warnings.warn_explicit(
                f"{self.wf_label} was never awaited: did you forget `await`? "
                f"(`await {self.wf_hint}`; wf help await)",
                RuntimeWarning,
                filename,
                lineno,
            )


class RecordedCall(OpCall[T]):
    """A call of an operation whose outcome the journal holds (``data``, which ``decode``
    rebuilds when the call is awaited): the calls a replay makes.

    Awaited outside any timeout block, it gives the value with no future around it: making,
    settling and awaiting a finished future was 6% of a replayed step. A block needs the
    future, timed by the step's recorded end (``note_awaited``, ``timeout._durable_end``), and so
    does ``future()`` (``wf.select``); both get one.
    """

    __slots__ = ("_data", "_decode")

    def __init__(
        self,
        decode: Callable[[Any], T],
        data: Any,
        label: str,
        hint: str,
        *,
        ended_at: float | None,
        run: RunContext,
    ) -> None:
        super().__init__(_recorded_start, label, hint, ended_at=ended_at, run=run)
        self._decode = decode
        self._data = data

    def _iterator(self, *, own_future: bool = False) -> Generator[Any, None, T]:
        if self._iter is None:
            if self._start is None:
                raise RuntimeError("cannot reuse an already awaited wf operation")
            if _INLINE_WAIT_FOR:
                _refuse_inline_wait_for(self)
            self._start = None  # awaited from here on, even if the value no longer decodes
            value = self._decode(self._data)
            branch = ends_into.get()
            if branch is not None and self.wf_ended_at is not None and branch.run is self._run:
                branch.note_end(self.wf_ended_at)  # a select's branch ended no sooner
            if own_future or current_scope() is not None:
                # Timed: a block decided by this drive ends no sooner than the step did.
                self._future = op_done(value)
                if self.wf_ended_at is not None and self._run is not None:
                    self._run.timed(self._future, self.wf_ended_at)
                self._iter = asyncio.Future.__await__(self._future)
            else:
                self._iter = _at_once(value)
        return self._iter


def _recorded_start() -> asyncio.Future[Any]:
    """The start a ``RecordedCall`` holds until it is awaited (its own ``_iterator`` makes its
    outcome): never called."""
    raise AssertionError("a recorded call is started by its own _iterator")


def _at_once(value: T) -> Generator[Any, None, T]:
    """Awaited, gives ``value`` without suspending (a generator that returns at once)."""
    if False:
        yield  # a generator function: ``await`` drives it
    return value


def _awaited_by_its_task(call: OpCall[Any]) -> bool:
    """Whether ``call`` is being started by a task that does nothing else meanwhile and ends
    no sooner than it: its run's workflow task awaiting it, or a task made of the call itself
    (``gather``, ``create_task``). Not a task of the user's own coroutine, which the run's end
    would otherwise have to wait for (``RunContext.end_steps``)."""
    ctx = current_run()
    if ctx is None:
        return False
    task = asyncio.current_task(ctx.loop)  # given the loop: no getpid() to find it
    return task is not None and (task is ctx.task or task.get_coro() is call)


def _in_context(
    coro: Coroutine[Any, Any, T], context: contextvars.Context
) -> Generator[Any, Any, T]:
    """Await ``coro`` with every step of it run in ``context``, as a task of its own would."""
    send, throw = coro.send, coro.throw
    try:
        value = context.run(send, None)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    while True:
        thrown: BaseException | None = None
        try:
            sent = yield value
        except GeneratorExit:
            context.run(coro.close)  # its ``finally`` blocks reset what they set in ``context``
            raise
        except BaseException as exc:
            thrown = exc
        # Thrown in from outside this ``except``: where the step's code handles the exception
        # and goes on, it no longer sees one being handled, as in a task of its own.
        try:
            value = context.run(send, sent) if thrown is None else context.run(throw, thrown)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
        finally:
            thrown = None  # no cycle through this frame's locals


def _binary(symbol: str) -> Callable[..., Any]:
    def refuse(self: OpCall[Any], other: Any) -> Any:
        raise _forgot_await(self, f"using `{symbol}` on")

    return refuse


for _name, _symbol in {
    "add": "+", "sub": "-", "mul": "*", "truediv": "/", "floordiv": "//", "mod": "%",
    "pow": "**", "matmul": "@", "and": "&", "or": "|", "xor": "^", "lshift": "<<",
    "rshift": ">>",
}.items():  # fmt: skip
    setattr(OpCall, f"__{_name}__", _binary(_symbol))
    setattr(OpCall, f"__r{_name}__", _binary(_symbol))
for _name, _symbol in {"lt": "<", "le": "<=", "gt": ">", "ge": ">="}.items():
    setattr(OpCall, f"__{_name}__", _binary(_symbol))
