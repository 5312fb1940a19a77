"""An exception that cannot describe itself (a ``__str__`` or attributes that raise) or that
is huge fails its run like any other: it is never taken for damage, and what is recorded of
it stays small (``wf.engine._errors.KEPT``)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

import wf
from wf import Engine
from wf.engine._errors import KEPT


class SaysNothing(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no words")


class NoAttributes(Exception):
    @property
    def __dict__(self) -> dict[str, Any]:  # type: ignore[override]
        raise RuntimeError("no attributes")


@wf.step
async def raise_one(kind: str) -> int:
    if kind == "str":
        raise SaysNothing()
    if kind == "attributes":
        raise NoAttributes("plain words")
    raise ValueError("x" * (10 * KEPT))


@wf.workflow
async def hostile(kind: str) -> int:
    return await raise_one(kind)


@pytest.mark.parametrize("kind", ["str", "attributes", "huge"])
async def test_an_exception_that_cannot_be_described_fails_its_run(
    wf_engine: Engine, kind: str
) -> None:
    run = await wf.start(hostile, kind, detach=True)
    await wf.Worker(wf_engine, retention=False).run(until_idle=True)
    with pytest.raises(wf.RunFailed) as failed:
        await run.result()
    record = await wf_engine.store.get_run(run.id)
    assert record.status is wf.RunStatus.FAILED
    message = record.error["message"]  # type: ignore[index]
    if kind == "str":
        assert (
            message
            == "<str() of the tests.engine.test_hostile_errors.SaysNothing raised RuntimeError>"
        )
    elif kind == "attributes":
        assert message == "plain words"
    else:
        assert message.endswith(f"… ({9 * KEPT:,} more characters not recorded)")
        assert failed.value.original is not None
    assert len(orjson.dumps(record.error)) < 4 * KEPT
    journal = await wf_engine.store.read_journal(run.id)
    assert max(len(orjson.dumps(event)) for event in journal) < 4 * KEPT
