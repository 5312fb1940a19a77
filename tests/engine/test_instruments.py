"""Instruments: what the engine tells an observer, and that a broken one never fails a run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

import wf
import wf.testing
from wf.engine._context import StepContext
from wf.engine._instruments import DriveObserver, Instrument, StepObserver
from wf.store import Event, InboxMessage, RunRecord


class Recorder(Instrument):
    def __init__(self) -> None:
        self.seen: list[Any] = []

    def on_start(self, record: RunRecord) -> None:
        self.seen.append(("start", record.workflow))

    def on_drive(self, record: RunRecord, resuming: bool) -> DriveObserver:
        self.seen.append(("drive", resuming))
        seen = self.seen

        class Drive(DriveObserver):
            def on_events(self, events: Sequence[Event]) -> None:
                seen.extend(("event", e["type"]) for e in events)

            def on_message(self, message: InboxMessage) -> None:
                seen.append(("message", message.kind))

            def on_end(self, record: RunRecord | None, error: BaseException | None) -> None:
                seen.append(("drive end", record.status.value if record else repr(error)))

        return Drive()

    def on_step(self, step: StepContext) -> StepObserver:
        self.seen.append(("step", step.name, step.attempt))
        seen = self.seen

        class Step(StepObserver):
            def on_end(self, error: BaseException | None) -> None:
                seen.append(("step end", type(error).__name__ if error else None))

        return Step()

    def on_outcome(self, record: RunRecord) -> None:
        self.seen.append(("outcome", record.status.value))

    def on_send(self, run_id: str, kind: str, data: dict[str, Any]) -> None:
        self.seen.append(("send", kind))


tries: list[int] = []


@wf.step(max_retries=1, backoff=0.0)
async def once_flaky() -> int:
    tries.append(1)
    if len(tries) == 1:
        raise ConnectionError("again")
    return len(tries)


@wf.workflow(name="observed")
async def observed() -> int:
    result = await once_flaky()
    await wf.sleep(3600)
    return result


async def test_an_instrument_sees_starts_drives_events_steps_and_the_outcome() -> None:
    tries.clear()
    recorder = Recorder()
    async with wf.testing.engine() as eng:
        eng.add_instrument(recorder)
        run = await wf.start(observed)
        assert await run.result() == 2
    seen = recorder.seen
    assert seen[:2] == [("start", "observed"), ("drive", False)]
    assert ("step", "once_flaky", 1) in seen and ("step", "once_flaky", 2) in seen
    assert [s for s in seen if s[0] == "step end"] == [
        ("step end", "ConnectionError"),
        ("step end", None),
    ]
    assert ("event", "step_retrying") in seen and ("event", "sleep_started") in seen
    ends = [s for s in seen if s[0] in ("drive", "drive end")]
    assert ends == [
        ("drive", False),
        ("drive end", "suspended"),
        ("drive", True),
        ("drive end", "completed"),
    ]
    assert seen.index(("outcome", "completed")) < seen.index(("drive end", "completed"))
    assert seen.count(("outcome", "completed")) == 1


@wf.workflow(name="approved")
async def approved() -> str:
    return await wf.create_hook(str, token="instrumented-hook").next()


async def test_an_instrument_sees_messages_sent_and_applied() -> None:
    recorder = Recorder()
    async with wf.testing.engine() as eng:
        eng.add_instrument(recorder)
        run = await wf.start(approved)
        await run.settle()
        await wf.resume_hook("instrumented-hook", "ok")
        assert await run.result() == "ok"
    assert recorder.seen.index(("send", "hook")) < recorder.seen.index(("message", "hook"))


class Broken(Instrument):
    def on_start(self, record: RunRecord) -> None:
        raise RuntimeError("broken on_start")

    def on_drive(self, record: RunRecord, resuming: bool) -> DriveObserver:
        raise RuntimeError("broken on_drive")

    def on_step(self, step: StepContext) -> StepObserver:
        raise RuntimeError("broken on_step")

    def on_outcome(self, record: RunRecord) -> None:
        raise RuntimeError("broken on_outcome")


async def test_a_broken_instrument_is_logged_and_never_fails_a_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    tries.clear()
    async with wf.testing.engine() as eng:
        eng.add_instrument(Broken())
        run = await wf.start(observed)
        assert await run.result() == 2
    failures = [r.getMessage() for r in caplog.records if r.name == "wf.instruments"]
    assert any("on_step" in m for m in failures) and any("on_outcome" in m for m in failures)
