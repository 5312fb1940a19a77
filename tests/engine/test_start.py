"""Starting runs: chosen ids, an id that exists, ids of child runs."""

from __future__ import annotations

import pytest

import wf
from wf import Engine


@wf.workflow
async def plus_one(x: int) -> int:
    return x + 1


@wf.workflow
async def minus_one(x: int) -> int:
    return x - 1


async def test_an_existing_id_with_the_same_input_returns_that_run(wf_engine: Engine) -> None:
    first = await wf.start(plus_one, 1, run_id="job-1")
    assert await first.result() == 2
    again = await wf.start(plus_one, 1, run_id="job-1")
    assert again.id == first.id and await again.result() == 2
    assert len(await wf_engine.store.list_runs()) == 1


async def test_an_existing_id_with_another_input_or_workflow_is_refused(
    wf_engine: Engine,
) -> None:
    await (await wf.start(plus_one, 1, run_id="job-1")).result()
    with pytest.raises(wf.RunAlreadyExists, match="another input") as caught:
        await wf.start(plus_one, 2, run_id="job-1")
    assert caught.value.run_id == "job-1"
    with pytest.raises(wf.RunAlreadyExists, match="for workflow"):
        await wf.start(minus_one, 1, run_id="job-1")
    assert len(await wf_engine.store.list_runs()) == 1


@wf.workflow
async def scaled(x: int, factor: int = 1) -> int:
    return x * factor


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [((3,), {}), ((), {"x": 3}), ((3, 1), {}), ((3,), {"factor": 1}), (("3",), {})],
    ids=["positional", "by-name", "default-given", "default-by-name", "coerced"],
)
async def test_the_same_call_written_another_way_is_the_same_input(
    wf_engine: Engine, args: tuple[object, ...], kwargs: dict[str, object]
) -> None:
    """An id is started again with the arguments bound to the workflow's signature, defaults
    filled in: ``scaled(3)``, ``scaled(x=3)`` and ``scaled(3, 1)`` are one call."""
    first = await wf.start(scaled, 3, run_id="job-s")
    assert await first.result() == 3
    again = await wf.start(scaled, *args, run_id="job-s", **kwargs)
    assert again.id == first.id
    with pytest.raises(wf.RunAlreadyExists, match="another input"):
        await wf.start(scaled, 3, 2, run_id="job-s")
    assert len(await wf_engine.store.list_runs()) == 1


async def test_an_empty_id_is_an_error_not_a_fresh_id(wf_engine: Engine) -> None:
    with pytest.raises(wf.UsageError, match="cannot be empty"):
        await wf.start(plus_one, 1, run_id="")
    assert await wf_engine.store.list_runs() == []


@wf.workflow
async def fan_out(count: int) -> list[str]:
    return [(await wf.start(plus_one, i, detach=True)).id for i in range(count)]


async def test_a_parent_id_too_long_for_child_ids_fails_before_any_child_starts(
    wf_engine: Engine,
) -> None:
    run = await wf.start(fan_out, 12, run_id="p" * 120)
    with pytest.raises(wf.RunFailed, match="too long to derive its child runs' ids"):
        await run.result()
    assert [r.id for r in await wf_engine.store.list_runs()] == [run.id]  # no child started
    fine = await wf.start(fan_out, 12, run_id="p" * 117)
    assert await fine.result() == [f"{'p' * 117}.{op}" for op in range(12)]


@pytest.mark.parametrize(
    ("name", "raw", "attribute", "default"),
    [
        ("WF_SUSPEND_AFTER", "abc", "suspend_after", 30.0),
        ("WF_SUSPEND_AFTER", "nan", "suspend_after", 30.0),
        ("WF_SUSPEND_AFTER", "-1", "suspend_after", 30.0),
        ("WF_INBOX_POLL", "0", "inbox_poll", 1.0),  # a poll of 0 would spin
        ("WF_INBOX_POLL", "inf", "inbox_poll", 1.0),
    ],
)
def test_a_seconds_variable_that_is_no_number_of_seconds_is_ignored_with_a_warning(
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    name: str,
    raw: str,
    attribute: str,
    default: float,
) -> None:
    from wf.store.memory import MemoryStore

    monkeypatch.setenv(name, raw)
    with caplog.at_level("WARNING", logger="wf"):
        engine = Engine(MemoryStore())
    assert getattr(engine, attribute) == default
    assert f"ignoring {name}={raw!r}: not a number of seconds" in caplog.text
    monkeypatch.setenv(name, "0.5")
    assert getattr(Engine(MemoryStore()), attribute) == 0.5


def test_a_step_log_limit_that_is_no_number_of_characters_is_ignored_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from wf.engine._steplogs import DEFAULT_LIMIT as DEFAULT_STEP_LOG_LIMIT
    from wf.store.memory import MemoryStore

    monkeypatch.setenv("WF_STEP_LOG_LIMIT", "lots")
    with caplog.at_level("WARNING", logger="wf"):
        engine = Engine(MemoryStore())
    assert engine.step_log_limit == DEFAULT_STEP_LOG_LIMIT
    assert "ignoring WF_STEP_LOG_LIMIT='lots': not a number of characters" in caplog.text
    monkeypatch.setenv("WF_STEP_LOG_LIMIT", "100")
    assert Engine(MemoryStore()).step_log_limit == 100


ran: list[int] = []


@wf.workflow
async def counted(x: int) -> int:
    ran.append(x)
    return x


async def test_an_id_whose_run_was_deleted_returns_that_run_and_never_runs_it_again(
    wf_engine: Engine,
) -> None:
    """A chosen id is an idempotency key for as long as the deleted run's tombstone is kept:
    starting with it again is the deleted run (its result expired), not a new run. It used
    to start the workflow a second time once retention or gc had deleted the first run."""
    ran.clear()
    assert await (await wf.start(counted, 1, run_id="job-1")).result() == 1
    store = wf_engine.store
    assert (await store.delete_runs(["job-1"], now=5.0, reason="gc")).ids == ["job-1"]
    again = await wf.start(counted, 1, run_id="job-1")
    assert again.id == "job-1"
    with pytest.raises(wf.ResultExpired, match="deleted by wf gc"):
        await again.result()
    detached = await wf.start(counted, 1, run_id="job-1", detach=True)
    assert detached.id == "job-1"
    assert ran == [1] and await store.list_runs() == []
    with pytest.raises(wf.RunAlreadyExists, match="for workflow"):
        await wf.start(minus_one, 1, run_id="job-1")
    generated = await wf.start(counted, 2)
    assert await generated.result() == 2 and ran == [1, 2]
