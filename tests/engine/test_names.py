"""Values that become names (ids, hook tokens, stream names, group keys, queue names, schedule
ids) and due times are checked where they are given: a ``wf.UsageError``, never a run retried
for ever; inside a run the run fails once. A store that already holds such a value lists."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import pytest

import wf
from wf import Worker, admin, encode
from wf.store import RunRecord
from wf.store._ids import new_run_id
from wf.store._limits import LATEST, MAX_NAME_LENGTH
from wf.testing import MockClock, TestEngine

BAD_NAMES = [
    pytest.param("", id="empty"),
    pytest.param("\ud800", id="lone-surrogate"),
    pytest.param("a\udfffb", id="low-surrogate-inside"),
    pytest.param("a\x00b", id="nul"),
    pytest.param("line\n", id="newline"),
    pytest.param("bell\x07", id="control"),
    pytest.param("del\x7f", id="del"),
    pytest.param("c1\x85", id="c1-control"),
    pytest.param("x" * (MAX_NAME_LENGTH + 1), id="over-long"),
]
BAD_SEGMENTS = [*BAD_NAMES, pytest.param(".", id="dot"), pytest.param("..", id="dot-dot")]
"""Hook tokens and stream names also travel as one segment of a URL path."""
GOOD_NAMES = ["a", "x" * MAX_NAME_LENGTH, "ünïcødé 名前 🙂", "with space/and:colon"]

attempts: list[str] = []


@wf.workflow
async def plain(text: str) -> str:
    return text


@wf.workflow(max_attempts=3)
async def hook_token(token: str, web: bool = False) -> str:
    attempts.append("webhook" if web else "hook")
    hook = wf.create_webhook(dict, token=token) if web else wf.create_hook(dict, token=token)
    await hook.next()
    return "resumed"


@wf.step(max_retries=3)
def write(name: str) -> None:
    attempts.append("step")
    with wf.stream_writer(name) as out:
        out.write(b"chunk")


@wf.workflow(max_attempts=3)
async def stream_name(name: str) -> str:
    await write(name)
    return "written"


@wf.workflow(group=lambda key: key)
async def grouped(key: str) -> str:
    return key


@pytest.fixture(autouse=True)
def _reset() -> None:
    attempts.clear()


# -- names given from outside a run --------------------------------------------------------


@pytest.mark.parametrize("bad", BAD_NAMES)
async def test_a_bad_group_queue_workflow_or_step_name_is_refused_where_given(
    wf_engine: TestEngine, bad: str
) -> None:
    with pytest.raises(wf.UsageError, match="group"):
        plain.with_options(group=bad)
    with pytest.raises(wf.UsageError, match="group"):
        await wf.start(grouped, bad)  # computed by the group function
    with pytest.raises(wf.UsageError, match="group"):
        wf.workflow(group=bad)(plain.fn)
    with pytest.raises(wf.UsageError, match="queue"):
        wf.workflow(queue=bad)(plain.fn)
    with pytest.raises(wf.UsageError, match="workflow name"):
        wf.workflow(name=bad)(plain.fn)
    with pytest.raises(wf.UsageError, match="step name"):
        wf.step(name=bad)(write.fn)
    with pytest.raises(wf.UsageError, match="queue"):
        Worker(wf_engine, queues=[bad])
    with pytest.raises(wf.UsageError, match="group"):
        await wf.schedule("nightly", plain, cron="0 3 * * *", input="x", group=bad)
    assert await wf_engine.store.list_runs() == []
    assert await wf.schedules() == []


@pytest.mark.parametrize("bad", BAD_NAMES)
async def test_a_bad_hook_token_or_stream_name_is_refused_by_the_readers(
    wf_engine: TestEngine, bad: str
) -> None:
    run = await wf.start(plain, "x")
    assert await run.result() == "x"
    with pytest.raises(wf.UsageError, match="hook token"):
        await wf.resume_hook(bad, {})
    with pytest.raises(wf.UsageError, match="stream name"):
        async for _ in run.read_stream(bad):
            pass
    with pytest.raises(wf.UsageError, match="stream name"):
        async for _ in admin.follow_stream(wf_engine.store, run.id, bad):
            pass


@pytest.mark.parametrize(
    "bad",
    ["", "\ud800", "a\x00b", "order-1\n", "../escape", "x" * 129, "bad id"],
)
async def test_a_bad_run_or_schedule_id_is_refused(wf_engine: TestEngine, bad: str) -> None:
    with pytest.raises(wf.UsageError, match="run id"):
        await wf.start(plain, "x", run_id=bad)
    with pytest.raises(wf.UsageError, match="run id"):
        wf.get_run(bad)
    with pytest.raises(wf.UsageError, match="schedule id"):
        await wf.schedule(bad, plain, cron="0 3 * * *", input="x")
    with pytest.raises(wf.UsageError, match="schedule id"):
        await wf.unschedule(bad)
    assert await wf_engine.store.list_runs() == []


@pytest.mark.parametrize("good", GOOD_NAMES)
async def test_good_names_are_kept_as_given(wf_engine: TestEngine, good: str) -> None:
    run = await wf.start(grouped, good)
    assert await run.result() == good
    assert (await run.record()).group == good
    run = await wf.start(hook_token, good)
    hooks = await wf_engine.store.list_hooks(run.id)
    while not hooks:
        await wf_engine.store.wait_for_run(run.id, 0.05)
        hooks = await wf_engine.store.list_hooks(run.id)
    assert [h.token for h in hooks] == [good]
    await wf.resume_hook(good, {})
    assert await run.result() == "resumed"
    run = await wf.start(stream_name, good)
    assert await run.result() == "written"
    assert [chunk async for chunk in run.read_stream(good)] == [b"chunk"]


# -- names computed inside a run -------------------------------------------------------------


@pytest.mark.parametrize("bad", BAD_SEGMENTS)
@pytest.mark.parametrize(
    ("flow", "extra", "what", "tries"),
    [
        pytest.param(hook_token, [], "hook token", ["hook"], id="hook"),
        pytest.param(hook_token, [True], "hook token", ["webhook"], id="webhook"),
        pytest.param(stream_name, [], "stream name", ["step"], id="stream"),
    ],
)
async def test_a_bad_name_computed_in_a_run_fails_it_once(
    wf_engine: TestEngine, flow: Any, extra: list[Any], what: str, tries: list[str], bad: str
) -> None:
    run = await wf.start(flow, bad, *extra)
    with pytest.raises(wf.RunFailed) as failed:
        await run.result()
    assert isinstance(failed.value.original, wf.UsageError)
    assert what in str(failed.value.original)
    record = await run.record()
    assert record.status is wf.RunStatus.FAILED
    assert record.attempt == 1  # max_attempts=3, yet no second attempt
    assert attempts == tries  # the step (max_retries=3) ran once
    assert await wf_engine.store.due_runs(math.inf) == []  # nothing left to retry


# -- due times ---------------------------------------------------------------------------------


FAR = dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=dt.timezone(dt.timedelta(hours=-14)))


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({"at": FAR}, id="at-past-9999-by-its-offset"),
        pytest.param({"at": dt.datetime.max.replace(tzinfo=dt.UTC)}, id="at-max"),
        pytest.param({"delay": 1e308}, id="delay-1e308"),
        pytest.param({"delay": math.inf}, id="delay-inf"),
        pytest.param({"delay": math.nan}, id="delay-nan"),
        pytest.param({"delay": -math.inf}, id="delay-minus-inf"),
        pytest.param({"delay": dt.timedelta.max}, id="delay-timedelta-max"),
        pytest.param({"delay": 99999999999 * 86400}, id="delay-99999999999d"),
        pytest.param({"delay": 10**400}, id="delay-int-too-large-for-a-float"),
    ],
)
async def test_a_due_time_past_9999_or_not_finite_is_refused(
    wf_engine: TestEngine, options: dict[str, Any]
) -> None:
    with pytest.raises(wf.UsageError, match=r"9999|seconds or a timedelta"):
        await wf.start(plain.with_options(**options), "x")
    assert await wf_engine.store.list_runs() == []


async def test_a_delay_that_ends_past_9999_only_now_is_refused_at_start(
    wf_engine: TestEngine, mock_clock: MockClock
) -> None:
    flow = plain.with_options(delay=LATEST - mock_clock.now() + 10)
    with pytest.raises(wf.UsageError, match="9999"):
        await wf.start(flow, "x")
    assert await wf_engine.store.list_runs() == []


async def test_the_latest_due_time_is_kept(wf_engine: TestEngine) -> None:
    latest = dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=dt.UTC)
    run = await wf.start(plain.with_options(at=latest), "x")
    record = await run.record()
    assert record.status is wf.RunStatus.PENDING and record.wake_at == LATEST
    detail = await admin.run_detail(wf_engine.store, run.id)
    held = detail.to_json()["queue"]["held"]
    assert held["reason"] == "delayed: due at 9999-12-31T23:59:59+00:00"


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({"at": dt.datetime(2001, 1, 1, tzinfo=dt.UTC)}, id="past-at"),
        pytest.param({"delay": 0}, id="delay-0"),
        pytest.param({"delay": -5}, id="negative-delay"),
        pytest.param({"delay": dt.timedelta(seconds=-1)}, id="negative-timedelta"),
    ],
)
async def test_a_past_at_or_a_delay_of_zero_or_less_is_due_now(
    wf_engine: TestEngine, mock_clock: MockClock, options: dict[str, Any]
) -> None:
    mock_clock.autojump = False
    run = await wf.start(plain.with_options(**options), "now")
    assert (await run.record()).wake_at is None
    assert await run.result() == "now"


# -- a store that already holds such values --------------------------------------------------


async def test_a_stored_due_time_past_9999_still_lists_and_explains(
    wf_engine: TestEngine, mock_clock: MockClock
) -> None:
    # What an older wf wrote: a pending run due in year 10000 and one due "for ever".
    ids = []
    for wake_at in (LATEST + 30 * 86400, 1e300):
        record = RunRecord(
            id=new_run_id(),
            workflow=plain.name,
            target=plain.target,
            input=encode({"args": ["x"], "kwargs": {}}, where="input"),
            wake_at=wake_at,
            group="old\x07group",
        )
        assert await wf_engine.store.create_run(record)
        ids.append(record.id)
    page = await admin.list_runs(wf_engine.store)
    assert sorted(r.id for r in page.runs) == sorted(ids)
    for run_id in ids:
        detail = await admin.run_detail(wf_engine.store, run_id)
        held = detail.to_json()["queue"]["held"]
        assert held["reason"] == "delayed: due at a time after 9999-12-31"
    assert await wf_engine.store.due_runs(mock_clock.now()) == []
