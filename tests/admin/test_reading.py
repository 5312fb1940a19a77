"""``wf.admin._client.reading``: the client of the commands that only read (``wf runs``,
``wf inspect``) reads the store here without an engine, and drives or controls nothing."""

from __future__ import annotations

import pytest

import wf
import wf._config
from wf.admin import LocalAdmin
from wf.admin._client import reading
from wf.testing import TestEngine


@wf.workflow
async def waits() -> None:
    await wf.create_hook(dict).next()


async def test_a_reading_client_reads_without_an_engine_and_refuses_to_drive(
    wf_engine: TestEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = await wf.start(waits)
    await wf_engine.settle()
    closed: list[bool] = []

    async def close() -> None:
        closed.append(True)

    monkeypatch.delenv("WF_URL", raising=False)
    monkeypatch.setattr(wf._config, "default_store", lambda: wf_engine.store)
    monkeypatch.setattr(wf_engine.store, "close", close)
    async with reading() as client:
        assert isinstance(client, LocalAdmin)
        assert await client.newest_run() == run.id
        assert (await client.run_detail(run.id)).run.status == "suspended"
        assert [row.id for row in (await client.list_runs()).runs] == [run.id]
        # Driving or controlling a run needs an engine current while it runs, seeing each
        # crossing of deployments: connect()'s. This client says so rather than half-build one.
        with pytest.raises(RuntimeError, match=r"only reads .* wf\.admin\.connect\(\)"):
            await client.cancel(run.id)
        with pytest.raises(RuntimeError, match="only reads"):
            await client.wake(run.id)
        assert client.driving(run.id) is None  # it drives nothing
        assert not closed
    assert closed == [True]
    assert (await wf_engine.store.get_run(run.id)).status == "suspended"  # not cancelled
