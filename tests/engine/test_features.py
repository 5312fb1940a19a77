"""Kernel features plug in through the ``Features`` their engine owns, never at import time.

``Feature`` and ``Features`` have no public name (they are the kernel's own plug-in points), so
these tests import them from ``wf.engine._features``.
"""

from __future__ import annotations

from typing import Any

import pytest

import wf
from wf import Engine
from wf.engine._context import RunContext
from wf.engine._features import Feature, Features
from wf.store import InboxMessage, RunRecord
from wf.testing import MemoryStore, TestEngine


@wf.workflow
async def plain(x: int) -> int:
    return x + 1


async def test_an_engine_owns_the_kernel_features() -> None:
    engine = Engine(MemoryStore())
    assert [f.name for f in engine.features] == ["hooks", "streams", "child runs"]
    assert set(engine.features.messages) == {"hook", "child_done", "child_waiter"}
    assert set(engine.features.readers) == {
        "hook_created",
        "hook_payload",
        "hook_payload_refused",
        "stream_write",
        "stream_closed",
        "child_started",
        "child_finished",
        "child_waiter",
        "run_retrying",
    }
    assert set(engine.features.waits) == {"hook", "child"}


async def _nothing(ctx: RunContext, message: InboxMessage, live: bool) -> None:
    return None


def test_features_refuse_the_kernel_messages_and_a_kind_handled_twice() -> None:
    with pytest.raises(ValueError, match="kernel's own"):
        Features(Feature("mine", messages={"cancel": _nothing}))
    with pytest.raises(ValueError, match="another feature"):
        Features(Feature("a", messages={"x": _nothing}), Feature("b", messages={"x": _nothing}))


async def test_the_driver_and_the_inbox_consult_the_engine_features() -> None:
    seen: list[Any] = []

    async def before(ctx: RunContext) -> None:
        seen.append(("drive", ctx.run_id))

    async def on_probe(ctx: RunContext, message: InboxMessage, live: bool) -> None:
        seen.append(("probe", message.data["n"]))

    async def after(ctx: RunContext, record: RunRecord) -> None:
        seen.append(("outcome", record.status.value))

    probe = Feature("probe", messages={"probe": on_probe}, before_drive=before, after_outcome=after)
    async with TestEngine(MemoryStore()) as eng:
        eng.features = Features(*eng.features, probe)
        with eng.installed():
            run = await wf.start(plain, 1, detach=True)
            await eng.store.post(run.id, "probe", {"n": 7})
            eng.drive_soon(run.id)
            assert await run.result() == 2
    assert seen == [("drive", run.id), ("probe", 7), ("outcome", "completed")]


async def test_an_engine_without_a_feature_ignores_its_messages(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Importing a feature's module adds nothing: only the engine's features count."""
    async with TestEngine(MemoryStore()) as eng:
        eng.features = Features(*(f for f in eng.features if f.name != "hooks"))
        assert "hook" not in eng.features.messages
        with eng.installed():
            run = await wf.start(plain, 1, detach=True)
            await eng.store.post(run.id, "hook", {"hook": 0, "payload": None})
            eng.drive_soon(run.id)
            assert await run.result() == 2
    assert "ignoring inbox message of unknown kind 'hook'" in caplog.text
