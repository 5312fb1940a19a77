"""Forgetting ``await``: the misuse is named where it happens, and a dropped call warns."""

from __future__ import annotations

import dataclasses
import gc
import subprocess
import sys
import warnings
from typing import Any

import pytest

import wf
from wf import Engine


@wf.step
def compute(x: int) -> int:
    return x * 2


@wf.workflow
async def returns_the_call(x: int) -> int:
    return compute(x)  # type: ignore[return-value]


@wf.workflow
async def adds_to_the_call(x: int) -> int:
    return compute(x) + 1  # type: ignore[operator]


@wf.workflow
async def formats_the_call(x: int) -> str:
    return f"total {compute(x)}"


@wf.workflow
async def branches_on_the_call(x: int) -> int:
    if compute(x):
        return 1
    return 0


@wf.workflow
async def reads_an_attribute(x: int) -> Any:
    return compute(x).real  # type: ignore[attr-defined]


@wf.workflow
async def drops_the_call(x: int) -> int:
    compute(x)
    return x


@wf.workflow
async def keeps_the_call_a_while(x: int) -> int:
    kept = [compute(x)]
    return x + len(kept) - 1


@wf.workflow
async def awaits_properly(x: int) -> int:
    return await compute(x) + 1


async def failure_of(workflow: Any) -> str:
    run = await wf.start(workflow, 2)
    with pytest.raises(wf.RunFailed) as caught:
        await run.result()
    return str(caught.value)


async def test_returning_an_unawaited_step_asks_about_await(wf_engine: Engine) -> None:
    message = await failure_of(returns_the_call)
    assert "output of workflow" in message
    assert "is an un-awaited step 'compute' call" in message
    assert "did you forget `await`?" in message
    assert "OpCall" not in message and "wf.engine" not in message


@pytest.mark.parametrize(
    ("workflow", "use"),
    [
        (adds_to_the_call, "using `+` on"),
        (formats_the_call, "formatting"),
        (branches_on_the_call, "testing the truth of"),
        (reads_an_attribute, "reading `.real` of"),
    ],
)
async def test_using_an_unawaited_step_as_a_value_asks_about_await(
    wf_engine: Engine, workflow: Any, use: str
) -> None:
    message = await failure_of(workflow)
    assert f"{use} an un-awaited step 'compute' call: did you forget `await`?" in message
    assert "await compute(...)" in message


async def test_a_dropped_call_warns_at_the_line_that_made_it(wf_engine: Engine) -> None:
    with pytest.warns(RuntimeWarning, match="step 'compute' call was never awaited") as seen:
        run = await wf.start(drops_the_call, 2)
        assert await run.result() == 2
        gc.collect()
    [warning] = [w for w in seen if "never awaited" in str(w.message)]
    assert warning.filename == __file__
    # The decorator, the def, then `compute(x)`: the line that made the call and dropped it.
    assert warning.lineno == drops_the_call.fn.__code__.co_firstlineno + 2
    assert "did you forget `await`?" in str(warning.message)


async def test_with_origins_tracked_a_dropped_call_warns_at_the_line_that_made_it(
    wf_engine: Engine,
) -> None:
    depth = sys.get_coroutine_origin_tracking_depth()
    sys.set_coroutine_origin_tracking_depth(1)  # as Python's development mode does
    try:
        with pytest.warns(RuntimeWarning, match="step 'compute' call was never awaited") as seen:
            run = await wf.start(keeps_the_call_a_while, 2)
            assert await run.result() == 2
            gc.collect()
    finally:
        sys.set_coroutine_origin_tracking_depth(depth)
    [warning] = [w for w in seen if "never awaited" in str(w.message)]
    assert warning.filename == __file__
    # The decorator, the def, then `kept = [compute(x)]`, not the line that let it go.
    assert warning.lineno == keeps_the_call_a_while.fn.__code__.co_firstlineno + 2


def test_a_call_still_held_at_interpreter_exit_warns_without_a_traceback() -> None:
    # Let go of by the interpreter's own cleanup, with no frame of the program left.
    program = (
        "from wf.engine._futures import OpCall\n"
        "kept = OpCall(lambda: None, \"step 'compute' call\", 'compute(...)')\n"
    )
    done = subprocess.run(
        [sys.executable, "-W", "always", "-c", program],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "step 'compute' call was never awaited" in done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr


async def test_an_awaited_call_never_warns(
    wf_engine: Engine, recwarn: pytest.WarningsRecorder
) -> None:
    run = await wf.start(awaits_properly, 2)
    assert await run.result() == 5
    gc.collect()
    assert not [w for w in recwarn if "never awaited" in str(w.message)]


async def test_a_misuse_already_reported_does_not_warn_again(
    wf_engine: Engine, recwarn: pytest.WarningsRecorder
) -> None:
    await failure_of(adds_to_the_call)
    await failure_of(returns_the_call)
    gc.collect()
    assert not [w for w in recwarn if "never awaited" in str(w.message)]


async def test_replay_of_a_select_does_not_warn_about_its_losers(
    wf_engine: Engine, recwarn: pytest.WarningsRecorder
) -> None:
    @wf.workflow(name="tests.await:racer")
    async def racer() -> int:
        index, _ = await wf.select(compute(1), wf.sleep(3600))
        await wf.sleep(100)  # suspends: the next drive replays the select
        return index

    run = await wf.start(racer)
    assert await run.result() == 0
    gc.collect()
    assert not [w for w in recwarn if "never awaited" in str(w.message)]


# -- a recorded result that no longer decodes ----------------------------------------------


PICKY_REFUSES: list[bool] = []
"""Set: ``Picky`` refuses to be made (its ``__post_init__`` raises), so a stored one no longer
decodes on replay."""


@dataclasses.dataclass
class Picky:
    n: int

    def __post_init__(self) -> None:
        if PICKY_REFUSES:
            raise ValueError("picky refuses")


@wf.step
def make() -> Picky:
    return Picky(1)


@wf.workflow
async def makes_then_waits(token: str) -> int:
    made = await make()
    await wf.create_hook(str, token=token).next()  # suspends: the resume replays ``make``
    return made.n


@pytest.mark.stores("memory", "local")
async def test_a_replayed_step_whose_result_no_longer_decodes_was_awaited(
    wf_engine: Engine,
) -> None:
    """The replay awaits ``make()``, whose recorded result fails to decode: the run fails
    with that error, and no warning says the call was never awaited (there used to be one,
    naming the user's line, for a call the code did await)."""
    run = await wf.start(makes_then_waits, "picky")
    await run.settle(timeout=10)
    PICKY_REFUSES.append(True)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            await wf.resume_hook("picky", "go")
            with pytest.raises(wf.RunFailed) as failed:
                await run.result(timeout=10)
            gc.collect()
    finally:
        PICKY_REFUSES.clear()
    assert isinstance(failed.value.original, wf.ValueEncodingError)
    assert "cannot decode a stored dataclass" in str(failed.value.original)
    assert [str(w.message) for w in caught if "never awaited" in str(w.message)] == []
