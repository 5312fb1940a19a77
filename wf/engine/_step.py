"""``@wf.step``: durable, retried units of work.

Inside a run, calling a step returns an awaitable at once (its operation id is taken at the call)
and starts it; its completion is appended to the journal before the workflow sees the result,
and is durable before anything the run does next can be seen outside it (``RunContext.settle``).
Outside a run, or inside another step, a step is a plain call.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import math
import random as _random
import threading
import time
import types
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, Generic, NoReturn, ParamSpec, TypeVar, overload

import orjson

from wf._exceptions import (
    NondeterminismError,
    RetryableError,
    UsageError,
    ValueEncodingError,
    finite_seconds,
)
from wf.engine import _signals, _steplogs
from wf.engine._clock import thread_work
from wf.engine._codec import decode, encode
from wf.engine._context import (
    OpHistory,
    ReplayFrontier,
    RunContext,
    StepContext,
    _current_step,
    current_run,
    describe_op,
    user_location,
)
from wf.engine._durations import due_after
from wf.engine._errors import (
    describe_error,
    fails_at_once,
    made_up_cancel,
    rebuild_error,
    uncaught,
)
from wf.engine._futures import OpCall, RecordedCall, in_run, op_done, op_task
from wf.engine._instruments import step as _instrument_step
from wf.engine._instruments import step_ended
from wf.engine._suggest import refuse_unknown_keywords
from wf.store import Event
from wf.store._limits import check_name

P = ParamSpec("P")
R = TypeVar("R")


class Step(Generic[P, R]):
    """A declared step. See ``wf.step``."""

    def __init__(
        self,
        fn: Callable[P, Any],
        *,
        name: str | None = None,
        max_retries: int = 3,
        backoff: float = 0.5,
        backoff_factor: float = 2.0,
        max_backoff: float = 30.0,
    ) -> None:
        max_retries = _retries(max_retries)
        if name is None and getattr(fn, "__name__", None) == "<lambda>":
            # Every lambda is named '<lambda>', and a run's journal finds a step by its name:
            # two lambda steps would replay each other's results.
            raise UsageError(
                "a lambda cannot be a step without a name: every lambda is '<lambda>', and "
                "replay finds a step by its name; define it with def and @wf.step, or name "
                "it: wf.step(lambda ...: ..., name='...')"
            )
        self.fn = fn
        if name is not None:
            check_name("a step name", name)  # journal text
        self.name = name or fn.__qualname__
        self.max_retries = max_retries
        self.backoff, self.backoff_factor, self.max_backoff = _backoffs(
            backoff, backoff_factor, max_backoff
        )
        self.is_async = inspect.iscoroutinefunction(fn)
        functools.update_wrapper(self, fn)

    @functools.cached_property
    def labels(self) -> tuple[str, str]:
        """How a call of the step is named in messages: its label and its source hint."""
        short = self.name.rpartition(":")[2]
        return f"step {short!r} call", f"{short.rpartition('.')[2]}(...)"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Awaitable[R]:
        ctx = current_run()
        if ctx is None:
            return self.fn(*args, **kwargs)  # type: ignore[no-any-return]
        return ctx_call_step(ctx, self, args, kwargs)

    def __await__(self) -> Generator[Any, None, R]:
        short = self.name.rpartition(":")[2].rpartition(".")[2]
        raise UsageError(
            f"step {short!r} is awaited without being called: write await {short}(...)"
        )

    def retry_delay(self, attempt: int) -> float:
        """Backoff before attempt ``attempt + 1``: exponential with full jitter."""
        ceiling = min(self.max_backoff, self.backoff * self.backoff_factor ** (attempt - 1))
        return _random.uniform(0, ceiling)

    def __repr__(self) -> str:
        return f"<wf.step {self.name}>"


def _retries(value: Any) -> int:
    """A step's ``max_retries``: an integer, 0 or more, else a ``wf.UsageError`` naming it."""
    from wf.engine._queueing import positive_int

    return positive_int("wf.step() max_retries", value, minimum=0)


def _backoffs(backoff: Any, factor: Any, ceiling: Any) -> tuple[float, float, float]:
    """A step's ``backoff``, ``backoff_factor`` and ``max_backoff``: each finite and 0 or
    more, else a ``wf.UsageError`` at declaration (a NaN ceiling made every retry's wait NaN:
    a step that failed once never ended its run)."""
    found = []
    for what, value in (("backoff", backoff), ("backoff_factor", factor), ("max_backoff", ceiling)):
        if what != "backoff_factor":
            number = finite_seconds(f"wf.step() {what}", value)
        elif isinstance(value, bool) or not isinstance(value, int | float):
            raise UsageError(f"wf.step() {what}: expected a number, got {type(value).__name__}")
        elif not math.isfinite(number := float(value)):
            raise UsageError(f"wf.step() {what}: {value!r:.40} is not a finite number")
        if number < 0:
            raise UsageError(f"wf.step() {what}: {value!r:.40} is below 0")
        found.append(number)
    return found[0], found[1], found[2]


@overload
def step(fn: Callable[P, Awaitable[R]], /) -> Step[P, R]: ...


@overload
def step(fn: Callable[P, R], /) -> Step[P, R]: ...


@overload
def step(
    *,
    name: str | None = None,
    max_retries: int = 3,
    backoff: float = 0.5,
    backoff_factor: float = 2.0,
    max_backoff: float = 30.0,
) -> Callable[[Callable[P, Any]], Step[P, Any]]: ...


def step(
    fn: Callable[P, Any] | None = None,
    /,
    *,
    name: str | None = None,
    max_retries: int = 3,
    backoff: float = 0.5,
    backoff_factor: float = 2.0,
    max_backoff: float = 30.0,
    **unknown: Any,
) -> Any:
    """Declare a step: a sync function (run in a thread) or an async one (run on the loop).

    A failing step is retried up to ``max_retries`` times (an integer, 0 or more, else a
    ``wf.UsageError`` here) after the first attempt, waiting an
    exponential backoff with full jitter (``backoff`` seconds, times ``backoff_factor`` per
    attempt, at most ``max_backoff``; each a finite number, 0 or more, else a
    ``wf.UsageError`` here). ``wf.FatalError`` fails it at once, and so does a
    ``wf.UsageError`` (a name or value wf refuses is refused again), alone or in an exception
    group;
    ``wf.RetryableError(after=...)`` sets the next delay, as given (``max_backoff`` caps only
    the computed backoff). Waits are durable timers.

    A lambda needs ``name=`` (every lambda is ``<lambda>``, and replay finds steps by name);
    an unknown keyword (``retries=3``) is a ``wf.UsageError`` that names the closest one.
    """
    refuse_unknown_keywords(
        "wf.step()", unknown, ("name", "max_retries", "backoff", "backoff_factor", "max_backoff")
    )
    _retries(max_retries)  # refused here, not at the decorated def
    _backoffs(backoff, backoff_factor, max_backoff)

    def declare(f: Callable[P, Any]) -> Step[P, Any]:
        return Step(
            f,
            name=name,
            max_retries=max_retries,
            backoff=backoff,
            backoff_factor=backoff_factor,
            max_backoff=max_backoff,
        )

    return declare(fn) if fn is not None else declare


def ctx_call_step(
    ctx: RunContext, step_: Step[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> OpCall[Any]:
    """Take the step's op id now; return a future of its (recorded or live) result."""
    op, history = ctx.begin_op("step", step_.name)
    label, hint = step_.labels
    if history is not None:
        if ctx.step_arguments:
            _check_arguments(ctx, op, step_, args, kwargs)
        last = history.events[-1]
        if last["type"] == "step_completed":
            return RecordedCall(decode, last["result"], label, hint, ended_at=last["ts"], run=ctx)
        if last["type"] == "step_failed":
            return OpCall(lambda: op_done(error=rebuild_error(last["error"])), label, hint, run=ctx)
    if ctx.checking:
        raise ReplayFrontier()  # a step the journal has not finished: never run it in a check
    return OpCall(
        lambda: op_task(_execute(ctx, step_, op, history, args, kwargs, own_task=True), ctx.loop),
        label,
        hint,
        inline=lambda: _execute(ctx, step_, op, history, args, kwargs, own_task=False),
        run=ctx,
    )


def _check_arguments(
    ctx: RunContext, op: int, step_: Step[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    """On replay of a run whose steps ran together: ``NondeterminismError`` if the call's
    arguments are not those the journal recorded for its op id.

    Ids are handed out in call order, and replay resolves recorded steps at once, in id order:
    where a helper coroutine of a ``gather`` calls a second step after its first one ended, the
    replay can reach those calls in another order than the live run did, and a call would get
    another call's id, and its result. Same name, other arguments: this catches it, and the
    run fails instead of going on with another call's result."""
    recorded = ctx.step_arguments.get(op)
    if recorded is None:
        return
    current = recorded_arguments(args, kwargs)
    if "unrecorded" in current or orjson.dumps(current) == recorded:
        return
    ctx.divergence = NondeterminismError(
        op,
        f"{describe_op('step', step_.name)} with {_shown(orjson.loads(recorded))}",
        f"{describe_op('step', step_.name)} with {_shown(current)}",
        user_location(),
        reason=(
            "a call got another call's operation id: the run's steps ran together (gather, "
            "TaskGroup, wf.map) and a concurrent branch called a further step after one of its "
            "steps ended, which replay does not reproduce (wf help nondeterminism)"
        ),
    )
    raise ctx.divergence


def _shown(arguments: dict[str, Any]) -> str:
    """Recorded arguments in a message, bounded."""
    text = orjson.dumps(arguments).decode()
    return f"arguments {text if len(text) <= 200 else text[:200] + '…'}"


async def _invoke(
    ctx: RunContext, step_: Step[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    if step_.is_async:
        return await _noting_first_yield(step_.fn(*args, **kwargs), ctx.flush_deferred, step_)
    ctx.flush_deferred()  # a thread hop always suspends
    context = contextvars.copy_context()
    loop = ctx.loop
    # Who came first: the thread starting the step's code, or the call's cancellation. A
    # call cancelled while its work is still queued never starts the code; one cancelled
    # while the code runs is detached, and its thread tells the loop when it returns.
    gate = threading.Lock()
    state = ["queued"]  # then "started" ("dropped"), then "detached", then "ended"
    returned: asyncio.Future[None] | None = None

    def in_thread() -> Any:
        with gate:
            if state[0] == "dropped":
                return None  # the call was cancelled first: the step's code never runs
            state[0] = "started"
        try:
            return context.run(step_.fn, *args, **kwargs)
        except Exception:
            raise
        except BaseException as exc:
            _raise_uncaught(step_, exc)
        finally:
            with gate:
                detached = state[0] == "detached"
                state[0] = "ended"
            if detached and returned is not None:
                with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
                    loop.call_soon_threadsafe(_set_returned, returned)

    try:
        with thread_work(ctx.clock):
            # The engine's own pool, sized to what may run at once (``wf.engine._threads``):
            # queued there while every thread is busy, the call is said to wait.
            return await ctx.engine.step_pool().run(
                in_thread, f"step {step_.name!r} of run {ctx.run_id}"
            )
    except asyncio.CancelledError:
        with gate:
            if state[0] == "queued":
                state[0] = "dropped"
            elif state[0] == "started":
                # The call is cancelled, the thread runs on: the run's outcome waits for it,
                # holding no thread while it waits (``RunContext.end_steps``).
                returned = loop.create_future()
                state[0] = "detached"
                ctx.detached_threads.append(returned)
        raise


def _set_returned(returned: asyncio.Future[None]) -> None:
    if not returned.done():
        returned.set_result(None)


def _raise_uncaught(step_: Step[Any, Any], exc: BaseException) -> NoReturn:
    """Raise what ``exc``, a ``BaseException`` out of the step's own code, fails the step with
    (``uncaught``), or ``exc`` itself if it is not the code's (a cancellation, a real Ctrl-C).

    Called only where the code's own exceptions come out, never where the step's coroutine is
    closed from outside: that ``GeneratorExit`` is not the step's, and goes on."""
    error = uncaught(f"step {step_.name!r}", exc)
    if error is None:
        raise exc
    raise error from exc


@types.coroutine
def _noting_first_yield(
    coro: Coroutine[Any, Any, Any], on_first_yield: Callable[[], None], step_: Step[Any, Any]
) -> Generator[Any, Any, Any]:
    """Await ``coro`` (``step_``'s code), calling ``on_first_yield`` when it first suspends, if
    it ever does; a ``BaseException`` the code raises fails the step (``_raise_uncaught``)."""
    try:
        value = coro.send(None)
    except StopIteration as stop:
        return stop.value
    except Exception:
        raise
    except BaseException as exc:
        _raise_uncaught(step_, exc)
    on_first_yield()
    while True:  # what ``yield from`` does, by hand: it cannot start from a sent value
        thrown: BaseException | None = None
        try:
            sent = yield value
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:
            thrown = exc
        # Thrown in from outside this ``except``: step code that handles the exception and goes
        # on sees none being handled after its own ``except`` (``sys.exception()``).
        try:
            value = coro.send(sent) if thrown is None else coro.throw(thrown)
        except StopIteration as stop:
            return stop.value
        except Exception:
            raise
        except BaseException as exc:
            _raise_uncaught(step_, exc)
        finally:
            thrown = None  # no cycle through this frame's locals


async def _mark_first_step(ctx: RunContext, started: Event) -> None:
    """Before the drive's first live step's code runs: write its start (``started``, its
    ``step_started``) and make what the run has seen durable.

    A process that dies in the step leaves that trace, and the next driver counts the death
    (``max_recoveries``, ``wf.engine._recovery``). Where ``append_soon`` outlives the process
    (the local store writes at once) that costs no flush of its own: the deaths counted are
    process deaths, which the page cache survives. Elsewhere the start is written at once
    for this process's death to keep (``Lease.append_visible``: PostgreSQL commits it without
    waiting for its WAL flush), then ``settle`` flushes what the run has seen, and steps
    started while that write is in flight wait for it (``_execute``), so no step's code runs
    before the drive is marked.
    """
    ctx.step_marked = marked = ctx.loop.create_future()
    if ctx.lease.soon_outlives_process:
        marked.set_result(None)
        ctx.write_soon(started)
        await ctx.settle()
        return
    try:
        await ctx.write(started, durable=False)
    finally:
        marked.set_result(None)
    await ctx.settle()


async def _execute(
    ctx: RunContext,
    step_: Step[Any, Any],
    op: int,
    history: OpHistory | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    own_task: bool,
) -> Any:
    """Run the step's attempts and record them; ``own_task``: in a task of its own (else in
    the task that awaits it, ``OpCall``'s ``inline``)."""
    this = asyncio.current_task(ctx.loop)  # given the loop: no getpid() to find it
    if this is not None:  # in flight until it ends: the run's outcome waits for it
        ctx.step_calls[op] = this
    try:
        attempt = 1
        if history is not None:
            retries = [e for e in history.events if e["type"] == "step_retrying"]
            attempt = len(retries) + 1
            if retries:
                _not_ending(ctx)
                await ctx.wait(op, "retry", step_.name, retries[-1]["retry_at"])
        arguments = recorded_arguments(args, kwargs)
        # A step's code is the outside world: what the run has seen so far (the results its
        # arguments may come from) is made durable before it runs.
        _not_ending(ctx)
        if ctx.step_marked is None:  # the drive's first live step: its start marks the drive
            await _mark_first_step(
                ctx,
                ctx.event("step_started", op=op, name=step_.name, attempt=attempt, args=arguments),
            )
            marked = True  # its start is written: not again with its end
        else:
            # A later step: its start is built only to be written with its end (below).
            marked = False
            if not ctx.step_marked.done():  # the drive's mark is in flight: no code before it
                await asyncio.shield(ctx.step_marked)
            await ctx.settle()
        while True:
            _not_ending(ctx)
            # The step may hand out a hook's token (a payment provider gets ``hook.url`` and
            # calls back before the step returns): the hooks created so far are live first.
            if ctx.outside_pending:
                await ctx.engine.features.before_outside(ctx)
                _not_ending(ctx)
            if not marked:
                # Written with the step's end, or as soon as the step suspends (``_invoke``).
                ctx.defer(
                    ctx.event(
                        "step_started", op=op, name=step_.name, attempt=attempt, args=arguments
                    )
                )
            marked = False
            ctx.steps_running += 1
            ctx.add_active(1)
            current = StepContext(ctx, op, step_.name, attempt)
            token = _current_step.set(current)
            guard = in_run.set(False)  # a step may do anything, asyncio.wait_for included
            error: Exception | None = None
            ctx.running_steps[op] = step_.name
            ctx.running_since[op] = time.monotonic()
            if step_.is_async and this is not None:
                ctx.step_tasks[op] = this
            # In the step's own context, so what an instrument makes current (a span) is current
            # in the step's code, in its thread too.
            observers = (
                _instrument_step(ctx.engine.instruments, current)
                if ctx.engine.instruments
                else None
            )
            ended: BaseException | None = None
            limit = ctx.engine.step_log_limit
            capture, capturing = _steplogs.begin(ctx, current, limit) if limit else (None, None)
            try:
                result = await _invoke(ctx, step_, args, kwargs)
            except asyncio.CancelledError as exc:
                ended = exc
                if this is not None and not this.cancelling():
                    # Nothing cancelled this task: the step's code raised it. Obeyed, it would
                    # leave the run unrecorded, driven again at once, the step run again.
                    error = ended = made_up_cancel(f"step {step_.name!r}")
                    error.__cause__ = exc
                elif op not in ctx.cancelled_steps or ctx.lost is not None:
                    raise
                else:
                    # Cancelled because its run was: the workflow sees wf.Cancelled at this call.
                    if this is not None:
                        this.uncancel()
                    raise ctx.deliver_to_step(op) from None
            except Exception as exc:
                # Also what a sys.exit, a KeyboardInterrupt or another BaseException of the
                # step's code became (``_raise_uncaught``): this step's failure, never the end
                # of the worker and of every run in it.
                error = ended = exc
            except BaseException as exc:
                ended = exc
                raise
            finally:
                if capture is not None and capturing is not None:
                    _steplogs.end(capture, capturing)
                    if ended is not None and not isinstance(ended, Exception):
                        capture.close_soon()  # interrupted: what it printed is stored, unwaited
                if observers:
                    step_ended(observers, ended)
                in_run.reset(guard)
                _current_step.reset(token)
                current.end()  # a stream writer it leaked (to a task, a thread) stops here
                ctx.running_steps.pop(op, None)
                ctx.running_since.pop(op, None)
                ctx.step_tasks.pop(op, None)
                ctx.add_active(-1)
                ctx.step_finished()
                if _signals.watchers:  # the step may have taken the stop signals
                    _signals.step_ended(step_.name)
            if capture is not None and capture.used:
                await capture.close()  # what the attempt printed is stored before its outcome

            if error is None:
                try:
                    encoded = encode(result, where=f"result of step {step_.name!r}")
                except ValueEncodingError as exc:
                    await _fail(ctx, step_, op, attempt, exc)
                    raise
                done = ctx.event(
                    "step_completed", op=op, name=step_.name, attempt=attempt, result=encoded
                )
                # ``wf.select`` reads it from the operation's own task, a timeout's block from
                # the task it awaited (``timeout._durable_end``).
                ctx.mark_done_at(done["ts"])
                # Durable before anything leaves the run (the next step's code settles first), not
                # before the workflow goes on: the outcome's flush carries a run's last step.
                if not ctx.write_pending(done):
                    await ctx.write(done)
                return result

            # A UsageError (a name or value wf refuses) is asked again the same way: no retry.
            retryable = not fails_at_once(error)
            if not retryable or attempt > step_.max_retries or ctx.ending:
                await _fail(ctx, step_, op, attempt, error)
                raise error
            if isinstance(error, RetryableError) and error.after is not None:
                try:
                    retry_at = due_after(
                        f"the retry of step {step_.name!r} after RetryableError",
                        ctx.clock.now(),
                        error.after,
                    )
                except UsageError as refused:  # a wait wf cannot keep: no retry
                    await _fail(ctx, step_, op, attempt, refused)
                    raise refused from error
            else:
                retry_at = ctx.clock.now() + step_.retry_delay(attempt)
            await ctx.write(
                ctx.event(
                    "step_retrying",
                    op=op,
                    name=step_.name,
                    attempt=attempt,
                    max_attempts=step_.max_retries + 1,
                    error=describe_error(error),
                    retry_at=retry_at,
                )
            )
            _not_ending(ctx)
            await ctx.wait(op, "retry", step_.name, retry_at)
            attempt += 1
    finally:
        ctx.step_calls.pop(op, None)


def _not_ending(ctx: RunContext) -> None:
    """A step call whose run is ending (``RunContext.end_steps``) starts nothing more."""
    if ctx.ending:
        raise asyncio.CancelledError()


async def _fail(
    ctx: RunContext, step_: Step[Any, Any], op: int, attempt: int, error: BaseException
) -> None:
    await ctx.write(
        ctx.event(
            "step_failed", op=op, name=step_.name, attempt=attempt, error=describe_error(error)
        )
    )


def step_id() -> str:
    """A stable idempotency key for the current step: the same on every attempt and replay."""
    current = _current_step.get()
    if current is None:
        raise UsageError("wf.step_id() can only be called inside a step")
    return f"{current.run.run_id}:{current.op}"


def cancel_requested() -> bool:
    """Whether the current run has been asked to stop (``wf cancel``, ``run.cancel()``), or
    its workflow has ended around the calling step (it failed, for instance while this step ran
    beside it in a ``gather``, or returned without awaiting it).

    For long sync steps, which run in a thread and cannot be interrupted: poll it and return
    (or raise) early. The run's outcome is recorded only once every step it started has ended,
    so a sync step that never looks holds the outcome back until it returns. Async steps need
    not poll: they receive asyncio's cancellation. Works in workflow code too; outside a run it
    is False.

    It is also true once this process's driver lost the run's lease (its connection to a
    PostgreSQL or Redis server dropped): another process may be driving the run, and running
    this same step, already; whatever this attempt returns is recorded by nobody.
    """
    step = _current_step.get()
    ctx = step.run if step is not None else current_run()
    return ctx is not None and (ctx.root_scope.fired or ctx.ending or ctx.lost is not None)


def current_step() -> StepContext | None:
    """The step running in the current task, if any."""
    return _current_step.get()


ARGS_LIMIT = 2048
"""Bytes of a step's encoded arguments kept in its ``step_started`` event; beyond, a preview."""


def recorded_arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """A step's arguments as ``step_started`` records them, for people reading the journal.

    ``{"args": [...], "kwargs": {...}}`` in the tagged JSON of run inputs, or, past
    ``ARGS_LIMIT`` bytes, ``{"truncated": true, "size": N, "preview": "<the first bytes>"}``;
    an argument wf cannot encode gives ``{"unrecorded": "<why>"}``. Never fails the step:
    replay does not read these, they only explain.
    """
    try:
        value = {
            "args": [encode(a, where="step argument") for a in args],
            "kwargs": {k: encode(v, where="step argument") for k, v in kwargs.items()},
        }
        text = orjson.dumps(value)
    except Exception as exc:  # an argument wf cannot store: say so, run the step anyway
        return {"unrecorded": f"{type(exc).__name__}: {exc}"[:200]}
    if len(text) <= ARGS_LIMIT:
        return value
    preview = text[:ARGS_LIMIT].decode("utf-8", errors="ignore")
    return {"truncated": True, "size": len(text), "preview": preview}
