"""``wf.testing.replay``: an exported run replayed against the code here."""

from __future__ import annotations

from pathlib import Path

import pytest

import wf
import wf.testing


@wf.step
def pick(item: str) -> str:
    return f"picked {item}"


@wf.workflow
async def pick_one(item: str) -> str:
    return await pick(item)


async def exported_run() -> list[dict[str, object]]:
    """What ``wf inspect RUN_ID --journal`` prints of a completed run, parsed."""
    async with wf.testing.TestEngine() as eng:
        run = await wf.start(pick_one, "a")
        await run.result()
        record = await eng.real_store.get_run(run.id)
        return [{"record": record.to_json()}, *await eng.real_store.read_journal(run.id)]


async def test_a_run_replays_against_the_code_that_made_it_from_its_lines() -> None:
    await wf.testing.replay(await exported_run())


async def test_a_workflow_the_run_does_not_name_is_replayed_when_given() -> None:
    @wf.workflow
    async def renamed(item: str) -> str:
        return await pick(item)

    await wf.testing.replay(await exported_run(), renamed)


async def test_an_unreadable_export_is_a_usage_error_naming_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    with pytest.raises(wf.UsageError, match="cannot read the exported journal"):
        await wf.testing.replay(bad)
    bad.write_text('{"type": "run_started"}\n')
    with pytest.raises(wf.UsageError, match="begins with the run's record"):
        await wf.testing.replay(bad)


async def test_a_run_whose_workflow_is_not_here_cannot_be_replayed() -> None:
    lines = await exported_run()
    record = dict(lines[0]["record"])  # type: ignore[call-overload]
    record["workflow"], record["target"] = "nowhere:flow", None
    with pytest.raises(wf.WFError, match="cannot be replayed here"):
        await wf.testing.replay([{"record": record}, *lines[1:]])
