"""Steps inside and outside runs, results, retries, backoff and error recording."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import socket
import sys
from typing import Any

import pytest

import wf
from wf import Engine
from wf.engine._codec import decode
from wf.testing import TestEngine

calls: dict[str, int] = {}


def bump(name: str) -> int:
    calls[name] = calls.get(name, 0) + 1
    return calls[name]


@pytest.fixture(autouse=True)
def _reset_calls() -> None:
    calls.clear()


@wf.step
async def add(a: int, b: int) -> int:
    bump("add")
    return a + b


@wf.step
def double(x: int) -> int:
    bump("double")
    return 2 * x


@wf.workflow
async def arithmetic(x: int) -> int:
    y = await add(x, 1)
    return await double(y)


async def test_a_workflow_runs_its_steps_and_returns_the_result(wf_engine: Engine) -> None:
    run = await wf.start(arithmetic, 4)
    assert await run.result() == 10
    assert await run.status() == wf.RunStatus.COMPLETED
    journal = await wf_engine.store.read_journal(run.id)
    types = [e["type"] for e in journal]
    assert types == [
        "run_started",
        "step_started",
        "step_completed",
        "step_started",
        "step_completed",
        "run_completed",
    ]
    assert [e["name"] for e in journal if e["type"] == "step_completed"] == ["add", "double"]


async def test_outside_a_run_a_step_is_a_plain_call() -> None:
    assert double(3) == 6
    assert await add(1, 2) == 3


class PaymentDeclined(Exception):
    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


@wf.step(max_retries=0)
def charge(amount: int) -> str:
    bump("charge")
    raise PaymentDeclined(f"declined {amount}", code="insufficient_funds")


@wf.workflow
async def pay_or_refund(amount: int) -> str:
    try:
        return await charge(amount)
    except PaymentDeclined as exc:
        return f"caught {exc.code}"


async def test_except_the_original_type_catches_a_step_error(wf_engine: Engine) -> None:
    run = await wf.start(pay_or_refund, 5)
    assert await run.result() == "caught insufficient_funds"


@wf.workflow
async def just_pay(amount: int) -> str:
    return await charge(amount)


async def test_result_of_a_failed_run_tells_the_original_type_and_fields(wf_engine: Engine) -> None:
    run = await wf.start(just_pay, 7)
    with pytest.raises(wf.RunFailed) as info:
        await run.result()
    failure = info.value
    assert failure.error_type == f"{__name__}.PaymentDeclined"
    assert failure.message == "declined 7"
    assert failure.fields == {"code": "insufficient_funds"}
    assert isinstance(failure.original, PaymentDeclined)
    assert failure.original.code == "insufficient_funds"
    assert failure.__cause__ is failure.original  # a traceback of the RunFailed shows it
    assert "Traceback" in (failure.traceback or "")
    assert calls["charge"] == 1


@wf.step(max_retries=3, backoff=1.0, backoff_factor=2.0, max_backoff=3.0)
def flaky() -> str:
    attempt = bump("flaky")
    if attempt < 3:
        raise ConnectionError(f"attempt {attempt}")
    return f"ok after {attempt}"


@wf.workflow
async def uses_flaky() -> str:
    return await flaky()


async def test_a_failing_step_is_retried_with_jittered_backoff(wf_engine: Engine) -> None:
    run = await wf.start(uses_flaky)
    assert await run.result() == "ok after 3"
    journal = await wf_engine.store.read_journal(run.id)
    retries = [e for e in journal if e["type"] == "step_retrying"]
    assert [r["attempt"] for r in retries] == [1, 2]
    assert [r["max_attempts"] for r in retries] == [4, 4]
    assert retries[0]["error"]["type"] == "ConnectionError"
    # full jitter: delay in [0, min(cap, base * factor ** (attempt - 1))]
    assert 0 <= retries[0]["retry_at"] - retries[0]["ts"] <= 1.0
    assert 0 <= retries[1]["retry_at"] - retries[1]["ts"] <= 2.0
    completed = [e for e in journal if e["type"] == "step_completed"]
    assert completed[0]["attempt"] == 3


@wf.step(max_retries=2, backoff=0.01)
def always_down() -> None:
    bump("down")
    raise ConnectionError("down")


@wf.workflow
async def uses_down() -> None:
    await always_down()


async def test_retries_are_bounded_by_max_retries(wf_engine: Engine) -> None:
    run = await wf.start(uses_down)
    with pytest.raises(wf.RunFailed, match="down"):
        await run.result()
    assert calls["down"] == 3


@wf.step
def fatal() -> None:
    bump("fatal")
    raise wf.FatalError("card stolen")


@wf.workflow
async def uses_fatal() -> None:
    await fatal()


async def test_fatal_error_fails_at_once(wf_engine: Engine) -> None:
    run = await wf.start(uses_fatal)
    with pytest.raises(wf.RunFailed) as info:
        await run.result()
    assert info.value.error_type == "wf.FatalError"
    assert calls["fatal"] == 1


@wf.step(max_retries=3)
async def raises_a_group(nested: bool, fatal: bool) -> None:
    bump("group")
    inner: Exception = wf.FatalError("card stolen") if fatal else RuntimeError("flaky")
    group = ExceptionGroup("inner", [ValueError("beside it"), inner])
    raise ExceptionGroup("outer", [group]) if nested else group


@wf.workflow
async def uses_a_group(nested: bool, fatal: bool) -> None:
    await raises_a_group(nested, fatal)


@pytest.mark.parametrize("nested", [False, True], ids=["flat", "nested"])
async def test_a_fatal_error_in_an_exception_group_fails_the_step_at_once(
    wf_engine: Engine, nested: bool
) -> None:
    run = await wf.start(uses_a_group, nested, True)
    with pytest.raises(wf.RunFailed) as info:
        await asyncio.wait_for(run.result(), 10)
    assert calls["group"] == 1
    # The run's error is the group, rebuilt with its members: ``except*`` finds the FatalError.
    original = info.value.original
    assert isinstance(original, ExceptionGroup)
    fatal = original.subgroup(wf.FatalError)
    assert fatal is not None
    assert [str(e) for e in _leaves(fatal)] == ["card stolen"]
    assert [type(e) for e in _leaves(original)] == [ValueError, wf.FatalError]


def _leaves(group: BaseExceptionGroup[Any]) -> list[BaseException]:
    found: list[BaseException] = []
    for member in group.exceptions:
        found += _leaves(member) if isinstance(member, BaseExceptionGroup) else [member]
    return found


@wf.workflow
async def catches_a_group_then_suspends() -> str:
    try:
        await raises_a_group(False, True)
    except* (wf.FatalError, ValueError):
        pass
    await wf.sleep(3600)  # suspends: the run is driven again, the group replayed
    return "caught on replay too"


async def test_a_replayed_exception_group_is_caught_as_it_was_live(wf_engine: Engine) -> None:
    run = await wf.start(catches_a_group_then_suspends)
    assert await asyncio.wait_for(run.result(), 10) == "caught on replay too"
    assert calls == {"group": 1}
    journal = await wf_engine.store.read_journal(run.id)
    assert "run_suspended" in [e["type"] for e in journal]


async def test_an_exception_group_without_a_fatal_error_is_retried(wf_engine: Engine) -> None:
    run = await wf.start(uses_a_group, True, False)
    with pytest.raises(wf.RunFailed, match="outer"):
        await asyncio.wait_for(run.result(), 10)
    assert calls["group"] == 4


@wf.step
def rate_limited() -> str:
    if bump("limited") == 1:
        raise wf.RetryableError("slow down", after=3600)
    return "done"


@wf.workflow
async def uses_rate_limited() -> str:
    return await rate_limited()


async def test_retryable_error_sets_the_delay_and_a_long_delay_suspends(wf_engine: Engine) -> None:
    run = await wf.start(uses_rate_limited)
    assert await run.result() == "done"
    journal = await wf_engine.store.read_journal(run.id)
    retry = next(e for e in journal if e["type"] == "step_retrying")
    assert retry["retry_at"] - retry["ts"] == pytest.approx(3600)
    suspended = [e for e in journal if e["type"] == "run_suspended"]
    assert suspended and suspended[0]["wake_at"] == pytest.approx(retry["retry_at"])
    assert calls["limited"] == 2


@wf.step
def opens_socket() -> Any:
    return socket.socket()


@wf.workflow
async def returns_socket() -> None:
    await opens_socket()


async def test_a_result_that_cannot_be_encoded_fails_the_step_naming_it(wf_engine: Engine) -> None:
    run = await wf.start(returns_socket)
    with pytest.raises(wf.RunFailed) as info:
        await run.result()
    assert "opens_socket" in info.value.message
    assert "socket" in info.value.message


keys: list[str] = []


@wf.step(max_retries=2, backoff=0.0)
def keyed() -> str:
    keys.append(wf.step_id())
    if len(keys) < 2:
        raise ConnectionError("again")
    return keys[-1]


@wf.workflow
async def uses_keyed() -> list[str]:
    return [await keyed(), await keyed()]


async def test_step_id_is_stable_across_attempts_and_distinct_per_call(wf_engine: Engine) -> None:
    keys.clear()
    run = await wf.start(uses_keyed)
    first, second = await run.result()
    assert keys[0] == keys[1] == first
    assert first != second
    assert first.startswith(run.id)


def test_step_id_outside_a_step_is_an_error() -> None:
    with pytest.raises(wf.UsageError):
        wf.step_id()


@wf.step(max_retries=1)
def fails_once_then_waits() -> str:
    if bump("backoff") == 1:
        raise wf.RetryableError("try later", after=10)  # short: waited in-process
    return "second attempt"


@wf.workflow
async def uses_backoff() -> str:
    return await fails_once_then_waits()


async def test_a_crash_during_a_backoff_keeps_the_attempt_count(wf_engine: TestEngine) -> None:
    wf_engine.clock.autojump = False  # type: ignore[attr-defined]
    run = await wf.start(uses_backoff)
    while "backoff" not in calls:
        await asyncio.sleep(0.001)
    await asyncio.sleep(0.01)
    await wf_engine.crash(run)  # the process dies while waiting out the backoff
    wf_engine.clock.autojump = True  # type: ignore[attr-defined]
    await wf.Worker(wf_engine).run(until_idle=True)
    assert await run.result() == "second attempt"
    journal = await wf_engine.store.read_journal(run.id)
    completed = next(e for e in journal if e["type"] == "step_completed")
    assert completed["attempt"] == 2  # max_retries=1 would have refused a third attempt
    assert calls["backoff"] == 2


GATE: list[asyncio.Event] = []


@wf.step
async def waits_at_the_gate() -> str:
    await GATE[0].wait()
    return "through"


@wf.workflow
async def gated() -> list[object]:
    return [await add(1, 2), await waits_at_the_gate()]


@pytest.mark.stores("memory")  # it patches the memory store's lease
async def test_a_step_shows_as_started_while_it_runs_and_a_quick_one_in_one_write(
    wf_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``step_started`` is written with the step's end when the step never suspends (one
    append instead of two), and as soon as it suspends otherwise: the journal shows a running
    step while it runs."""
    from wf.store import memory

    batches: list[list[str]] = []
    real_soon = memory._MemoryLease.append_soon  # (the memory lease's append goes through it)

    def append_soon(self: Any, events: Any) -> None:
        batches.append([e["type"] for e in events])
        real_soon(self, events)

    monkeypatch.setattr(memory._MemoryLease, "append_soon", append_soon)
    GATE[:] = [asyncio.Event()]
    run = await wf.start(gated)
    for _ in range(1000):
        kinds = [e["type"] for e in await wf_engine.store.read_journal(run.id)]
        if kinds.count("step_started") == 2:
            break
        await asyncio.sleep(0)
    assert kinds == ["run_started", "step_started", "step_completed", "step_started"]
    GATE[0].set()
    assert await run.result() == [3, "through"]
    assert batches[:3] == [
        ["step_started", "step_completed"],  # add: never suspended, one append
        ["step_started"],  # waits_at_the_gate: written when it suspended
        ["step_completed"],
    ]


CAUGHT: list[str] = []


@wf.step
async def pauses() -> str:
    await asyncio.sleep(0)  # suspends: its step_started is written here
    return "done"


@wf.workflow
async def catches_everything() -> str:
    try:
        return await pauses()
    except Exception as exc:  # must not see the store's failure
        CAUGHT.append(repr(exc))
        return "swallowed"


@pytest.mark.stores("memory")  # it patches the memory store's lease
async def test_a_failed_write_of_step_started_stops_the_driver_not_the_step(
    wf_engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    from wf.engine._driver import drive
    from wf.store import memory

    CAUGHT.clear()
    real_soon = memory._MemoryLease.append_soon
    failures = [wf.StoreError("cannot write journal: [ENOSPC] No space left on device")]

    def append_soon(self: Any, events: Any) -> None:
        if failures and any(e["type"] == "step_started" for e in events):
            raise failures.pop()
        real_soon(self, events)

    monkeypatch.setattr(memory._MemoryLease, "append_soon", append_soon)
    run = await wf.start(catches_everything)
    with pytest.raises(wf.StoreError, match="ENOSPC"):
        await wf_engine.wait_driven(run)
    assert CAUGHT == []
    assert (await run.status()) is not wf.RunStatus.COMPLETED  # still due for a driver
    await drive(wf_engine, run.id)  # the disk is back
    assert await run.result() == "done" and CAUGHT == []


def test_a_recorded_error_never_imports_its_module(caplog: pytest.LogCaptureFixture) -> None:
    import sys

    from wf.engine._errors import rebuild_error

    info = {
        "type": "planted_wf_errors.Boom",
        "module": "planted_wf_errors",
        "qualname": "Boom",
        "message": "boom",
        "args": None,
        "fields": {},
    }
    error = rebuild_error(info)
    assert isinstance(error, wf.StepFailed) and str(error) == "planted_wf_errors.Boom: boom"
    assert "planted_wf_errors" not in sys.modules
    assert "planted_wf_errors:Boom decoded as plain data" in caplog.text


@wf.step
def refuse() -> str:
    raise wf.FatalError("card refused")


@wf.workflow
async def refused() -> str:
    return await refuse()


async def test_wf_errors_are_named_as_users_import_them(wf_engine: Engine) -> None:
    import pickle
    import traceback

    # Every public error says `wf.Name` in reprs and tracebacks, not its private module.
    errors = [getattr(wf, n) for n in wf.__all__ if isinstance(getattr(wf, n), type)]
    errors = [e for e in errors if issubclass(e, BaseException)]
    assert errors and all(e.__module__ == "wf" for e in errors), errors
    assert repr(wf.RunFailed) == "<class 'wf.RunFailed'>"

    run = await wf.start(refused)
    with pytest.raises(wf.RunFailed) as info:
        await run.result()
    failure = info.value
    assert failure.error_type == "wf.FatalError"
    assert isinstance(failure.original, wf.FatalError)  # rebuilt from the recorded name
    assert "wf.FatalError: card refused" in (failure.traceback or "")
    assert "_exceptions" not in (failure.traceback or "")
    shown = "".join(traceback.format_exception(failure))
    assert "wf.RunFailed: " in shown and "wf.FatalError: card refused" in shown
    assert "wf._exceptions" not in shown
    again = pickle.loads(pickle.dumps(wf.FatalError("x")))
    assert type(again) is wf.FatalError


MARK: contextvars.ContextVar[str] = contextvars.ContextVar("MARK", default="unset")


@wf.step
async def marks(value: str) -> str:
    MARK.set(value)
    await asyncio.sleep(0)
    return MARK.get()


@wf.workflow
async def marked() -> list[str]:
    seen = [await marks("awaited"), MARK.get()]
    seen += await asyncio.gather(marks("gathered"), marks("beside"))
    return [*seen, MARK.get()]


async def test_what_a_step_sets_in_its_context_stays_in_the_step(wf_engine: Engine) -> None:
    """A step runs in a copy of its caller's context, as a task of its own would, awaited
    directly or gathered: a variable it sets is not seen by the workflow after it (a replay,
    which does not run the step, would not see it either)."""
    run = await wf.start(marked)
    assert await run.result() == ["awaited", "unset", "gathered", "beside", "unset"]


HELPERS: list[asyncio.Task[None]] = []


@wf.step
async def sleeps_long() -> None:
    await asyncio.sleep(3600)


async def _stays_after_its_step() -> None:
    try:
        await sleeps_long()
    except asyncio.CancelledError:
        await asyncio.Event().wait()  # the helper goes on after its step was cancelled


@wf.workflow
async def leaves_a_helper() -> str:
    HELPERS.append(asyncio.get_running_loop().create_task(_stays_after_its_step()))
    for _ in range(10):
        await asyncio.sleep(0)  # the helper's step starts
    return "done"


async def test_a_step_in_a_helper_task_ends_with_the_run_however_long_the_helper_goes_on(
    wf_engine: Engine,
) -> None:
    """The run's end cancels the step a helper task of the workflow's own left running, and
    waits for that step alone, not for what the helper does after it."""
    HELPERS.clear()
    run = await wf.start(leaves_a_helper)
    try:
        assert await asyncio.wait_for(run.result(), 10) == "done"
        journal = await wf_engine.store.read_journal(run.id)
        # Cancelled by the run's end: started, and never ended in the journal.
        assert [e["type"] for e in journal if e.get("name") == "sleeps_long"] == ["step_started"]
    finally:
        for helper in HELPERS:
            helper.cancel()


@wf.step
async def waits_forever() -> None:
    await asyncio.Event().wait()


async def _awaits_waits_forever() -> None:
    await waits_forever()


@wf.workflow
async def closes_a_started_step() -> str:
    started = _awaits_waits_forever()
    started.send(None)  # the step starts, in this task, and waits
    started.close()  # as a coroutine dropped half way is closed
    return "closed"


async def test_a_step_closed_half_way_ends_in_its_own_context(wf_engine: Engine) -> None:
    """Closing a coroutine that awaits a started step closes the step the way its own task
    would: its cleanup runs in the step's context (resetting what it set there) and the run
    goes on."""
    run = await wf.start(closes_a_started_step)
    assert await asyncio.wait_for(run.result(), 10) == "closed"


@wf.step
async def sees_an_error() -> str:
    return repr(sys.exception())


@wf.step
async def fails_plainly() -> None:
    raise ValueError("the step's own")


@wf.workflow
async def steps_in_an_except_block() -> str:
    try:
        raise KeyError("the workflow's own")
    except KeyError:
        seen = await sees_an_error()
        with contextlib.suppress(ValueError):
            await fails_plainly()
    return seen


async def test_a_step_started_in_an_except_block_does_not_see_its_callers_error(
    wf_engine: Engine,
) -> None:
    """A step's code sees no exception being handled but its own, where the workflow awaits it
    in an ``except`` block: nor does the traceback recorded for its failure show the workflow's."""
    run = await wf.start(steps_in_an_except_block)
    assert await run.result() == "None"
    journal = await wf_engine.store.read_journal(run.id)
    [failed] = [e for e in journal if e["type"] == "step_failed"]
    assert "the step's own" in failed["error"]["traceback"]
    assert "the workflow's own" not in failed["error"]["traceback"]


@wf.step
async def shrugs_off_a_cancel() -> str:
    GATE[0].set()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.Event().wait()
    return repr(sys.exception())


@wf.workflow
async def cancelled_in_a_step() -> str:
    return await shrugs_off_a_cancel()


async def test_a_step_that_handles_its_cancellation_sees_none_handled_after(
    wf_engine: Engine,
) -> None:
    """Cancelled with its run, a step that handles the cancellation and goes on sees no
    exception being handled after its ``except`` block, as in a task of its own."""
    GATE[:] = [asyncio.Event()]
    run = await wf.start(cancelled_in_a_step)
    await asyncio.wait_for(GATE[0].wait(), 10)
    await run.cancel()
    # The step went on and returned what it saw; the cancel, journaled before the outcome and
    # not caught by the workflow, still ends the run cancelled (its end is its next operation).
    with pytest.raises(wf.RunCancelled):
        await asyncio.wait_for(run.result(), 10)
    journal = await wf_engine.store.read_journal(run.id)
    [done] = [e for e in journal if e["type"] == "step_completed"]
    assert decode(done["result"]) == "None"


@wf.workflow
async def awaits_the_step_itself() -> int:
    return await double  # type: ignore[misc]  # the mistake under test: no call


@wf.workflow
async def awaits_a_workflow_itself() -> int:
    return await arithmetic  # type: ignore[misc]


async def test_awaiting_a_step_without_calling_it_says_so(wf_engine: Engine) -> None:
    run = await wf.start(awaits_the_step_itself)
    with pytest.raises(wf.RunFailed, match=r"step 'double' is awaited without being called"):
        await run.result()
    run = await wf.start(awaits_a_workflow_itself)
    with pytest.raises(wf.RunFailed, match=r"await arithmetic\(\.\.\.\)"):
        await run.result()


def test_a_lambda_step_needs_a_name() -> None:
    with pytest.raises(wf.UsageError, match="a lambda cannot be a step without a name"):
        wf.step(lambda x: x)
    with pytest.raises(wf.UsageError, match="name="):
        wf.step(max_retries=1)(lambda: 1)
    named = wf.step(lambda x: x + 1, name="increment")
    assert named.name == "increment"
    assert wf.step(name="one")(lambda: 1).name == "one"


def test_an_unknown_keyword_names_the_closest_one() -> None:
    with pytest.raises(wf.UsageError, match=r"'retries': did you mean max_retries=\?"):
        wf.step(retries=3)  # type: ignore[call-overload]
    with pytest.raises(wf.UsageError, match=r"'max_retry': did you mean max_retries=\?"):
        wf.step(max_retry=3)  # type: ignore[call-overload]
    with pytest.raises(wf.UsageError, match=r"'attempts': did you mean max_attempts=\?"):
        wf.workflow(attempts=3)  # type: ignore[call-overload]
    with pytest.raises(wf.UsageError, match="it takes backoff, "):
        wf.step(colour="red")  # type: ignore[call-overload]


@pytest.mark.parametrize(
    ("keyword", "value"),
    [
        ("backoff", float("nan")),
        ("backoff", float("inf")),
        ("backoff", -1.0),
        ("max_backoff", float("nan")),
        ("max_backoff", float("inf")),
        ("max_backoff", -1.0),
        ("backoff_factor", float("nan")),
        ("backoff_factor", float("inf")),
        ("backoff_factor", -2.0),
        ("backoff", "soon"),
    ],
)
def test_a_step_backoff_that_is_no_finite_number_of_seconds_is_refused_at_declaration(
    keyword: str, value: Any
) -> None:
    """A NaN ceiling made a once-failed step's retry wait NaN: its run never completed."""
    with pytest.raises(wf.UsageError, match=rf"wf.step\(\) {keyword}: "):
        wf.step(**{keyword: value})
    with pytest.raises(wf.UsageError, match=rf"wf.step\(\) {keyword}: "):
        wf.step(lambda: 1, name="one", **{keyword: value})


@pytest.mark.parametrize("value", ["3", 2.5, True, -1, None])
def test_a_step_max_retries_that_is_no_count_is_refused_naming_the_option(value: Any) -> None:
    """A string once reached a raw comparison: TypeError: '<' not supported ..."""
    for declare in (
        lambda: wf.step(max_retries=value),
        lambda: wf.step(lambda: 1, name="one", max_retries=value),
    ):
        with pytest.raises(wf.UsageError, match=r"wf.step\(\) max_retries must be an integer"):
            declare()


def test_a_step_backoff_of_zero_is_no_wait() -> None:
    zero = wf.step(lambda: 1, name="zero", backoff=0, max_backoff=0, backoff_factor=0)
    assert zero.retry_delay(3) == 0.0
