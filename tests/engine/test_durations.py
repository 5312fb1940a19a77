"""The waits a workflow asks for (``wf.sleep``, ``wf.sleep_until``, ``wf.timeout``,
``wf.deadline``, ``wf.RetryableError(after=...)``) are checked as a run's ``delay`` and ``at``
are: NaN, infinity, a value that is no number and a wake time past 9999-12-31 are a
``wf.UsageError`` at the call, never a timer that fires at once, never or past what wf keeps."""

from __future__ import annotations

import asyncio
import datetime as dt
import math
from typing import Any

import pytest

import wf
from wf import Engine
from wf.testing import MockClock

VALUES: dict[str, Any] = {
    "nan": math.nan,
    "inf": math.inf,
    "-inf": -math.inf,
    "huge": 1e30,
    "huge-int": 10**400,
    "huge-timedelta": dt.timedelta(days=999_999_999),
    "text": "5",
    "bool": True,
}
FAR = dt.datetime(9999, 12, 31, 23, 0, tzinfo=dt.timezone(dt.timedelta(hours=-2)))
"""In year 10000 in UTC: past the latest due time."""

calls: list[str] = []


@pytest.fixture(autouse=True)
def _reset() -> None:
    calls.clear()


def _refused(call: str, kind: str) -> Any:
    value = VALUES.get(kind)
    if call == "sleep":
        return wf.sleep(value)
    if call == "sleep_until":
        return wf.sleep_until(FAR)
    if call == "timeout":
        return wf.timeout(value)
    return wf.deadline(FAR)


@wf.workflow
async def asks_for_a_wait(call: str, kind: str) -> str:
    try:
        _refused(call, kind)
    except wf.UsageError as exc:
        said = str(exc)
    else:
        return "accepted"
    await wf.sleep(3600)  # suspends: the replay meets the refused call again
    return said


@pytest.mark.parametrize("kind", list(VALUES))
@pytest.mark.parametrize("call", ["sleep", "timeout"])
async def test_a_wait_that_is_no_finite_number_of_seconds_is_refused_at_the_call(
    wf_engine: Engine, mock_clock: MockClock, call: str, kind: str
) -> None:
    run = await wf.start(asks_for_a_wait, call, kind)
    said = await asyncio.wait_for(run.result(), 10)
    assert said.startswith(f"wf.{call}: ")
    if kind in ("text", "bool"):
        assert "expected seconds or a timedelta" in said
    elif kind.startswith("huge"):
        assert "past 9999-12-31" in said
    else:
        assert "not a finite number of seconds" in said
    journal = await wf_engine.store.read_journal(run.id)
    assert "run_suspended" in [e["type"] for e in journal]  # and it replayed the same way
    assert mock_clock.now() < dt.datetime(2100, 1, 1, tzinfo=dt.UTC).timestamp()


@pytest.mark.parametrize("call", ["sleep_until", "deadline"])
async def test_a_wake_time_past_9999_is_refused_at_the_call(wf_engine: Engine, call: str) -> None:
    run = await wf.start(asks_for_a_wait, call, "")
    said = await asyncio.wait_for(run.result(), 10)
    assert said.startswith(f"wf.{call} (") and "past 9999-12-31" in said


@wf.workflow
async def sleeps_less_than_nothing() -> str:
    before = wf.now()
    await wf.sleep(-5)
    await wf.sleep(dt.timedelta(seconds=-1))
    return str(wf.now() - before)


async def test_a_negative_sleep_is_no_wait(wf_engine: Engine) -> None:
    run = await wf.start(sleeps_less_than_nothing)
    assert await asyncio.wait_for(run.result(), 10) == "0:00:00"


@pytest.mark.parametrize("after", [math.nan, math.inf, -math.inf, "5", True])
def test_retryable_error_refuses_an_after_that_is_no_finite_number_of_seconds(after: Any) -> None:
    with pytest.raises(wf.UsageError, match=r"RetryableError\(after="):
        wf.RetryableError("busy", after=after)


def test_retryable_error_takes_seconds_or_a_timedelta() -> None:
    assert wf.RetryableError("busy", after=-(10**400)).after == 0.0
    assert wf.RetryableError("busy", after=dt.timedelta(minutes=2)).after == 120.0
    assert wf.RetryableError("busy", after=3).after == 3.0
    assert wf.RetryableError("busy").after is None


@wf.step(max_retries=2)
def busy(kind: str) -> None:
    calls.append(kind)
    raise wf.RetryableError("busy", after=VALUES[kind])


@wf.workflow
async def retried_after(kind: str) -> None:
    await busy(kind)


@pytest.mark.parametrize("kind", ["nan", "inf", "huge", "huge-int", "huge-timedelta"])
async def test_a_retry_after_no_wait_wf_can_keep_fails_the_step_at_once(
    wf_engine: Engine, mock_clock: MockClock, kind: str
) -> None:
    start = mock_clock.now()
    run = await wf.start(retried_after, kind)
    with pytest.raises(wf.RunFailed, match="UsageError") as failed:
        await asyncio.wait_for(run.result(), 10)
    assert isinstance(failed.value.original, wf.UsageError)
    assert calls == [kind]
    assert mock_clock.now() - start < 60
