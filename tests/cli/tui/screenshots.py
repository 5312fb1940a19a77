"""Make the SVG screenshots of ``docs/inspect.md`` from the examples and the test flows.

Run from the repository root: ``python -m tests.cli.tui.screenshots`` (writes ``docs/img/``).
The store is a MemoryStore filled by really running ``examples/hello.py``, ``examples/flaky.py``,
``examples/sleepy.py`` and the workflows of ``tests/cli/tui/flows.py`` on a fake clock, so the
pictures show what a user sees, with stable ids and times.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

from textual.widgets import Input

REPO = Path(__file__).resolve().parents[3]
OUT = REPO / "docs" / "img"
SIZE = (130, 36)


async def _examples(engine: Any) -> dict[str, str]:
    from examples.flaky import fetch_quote
    from examples.hello import hello
    from examples.sleepy import nap
    from tests.cli.tui.flows import fixed_id

    ids = {}
    flows = {"hello": (hello, ("world",)), "flaky": (fetch_quote, ("WF",)), "nap": (nap, (3600.0,))}
    for n, (name, (flow, args)) in enumerate(flows.items(), start=30):
        run_id = fixed_id(engine.clock.now() - 3600 + n, n)  # an hour before the other runs
        await engine.start(flow, args, {}, run_id=run_id)
        task = engine.drivers.get(run_id)
        if task is not None:
            await asyncio.wait({task})
        ids[name] = run_id
    return ids


async def _shoot() -> list[Path]:
    import wf.testing
    from tests.cli.tui.flows import populate
    from wf.cli.tui._app import InspectApp
    from wf.cli.tui._run import RunScreen

    written: list[Path] = []
    async with wf.testing.engine() as engine:
        examples = await _examples(engine)
        runs = await populate(engine, live=False)
        app = InspectApp(engine, location=".workflows")

        async with app.run_test(size=SIZE) as pilot:

            async def shot(name: str) -> None:
                await pilot.pause()
                written.append(Path(app.save_screenshot(f"{name}.svg", str(OUT))))

            async def open_run(run_id: str, *keys: str) -> None:
                app.open_run(run_id)
                while not (isinstance(app.screen, RunScreen) and app.screen.view):
                    await pilot.pause(0.02)
                await pilot.press(*keys)

            await shot("inspect-runs")
            await open_run(runs["hook"])
            await shot("inspect-run-hook")
            await pilot.press("r")
            app.screen.query_one("#payload", Input).value = '{"approved": "maybe", "by": "ada"}'
            await pilot.press("enter")
            await shot("inspect-resume-hook")
            await pilot.press("escape", "escape")
            await open_run(runs["retrying"])
            await shot("inspect-run-retrying")
            await pilot.press("escape")
            await open_run(runs["failed"], "2")
            await shot("inspect-run-events")
            await pilot.press("escape")
            await open_run(runs["orphan"])
            await shot("inspect-run-orphan")
            await pilot.press("escape")
            await open_run(runs["completed"], "3")
            await shot("inspect-run-values")
            await pilot.press("6")
            await shot("inspect-streams")
            await pilot.press("down", "enter", "t")
            await shot("inspect-streams-hex")
            await pilot.press("escape")
            await open_run(examples["flaky"])  # examples/flaky.py: three attempts of `quote`
            await shot("inspect-run-flaky")
    return written


def main() -> None:
    """Write the screenshots and list them."""
    os.environ["TZ"] = "UTC"
    time.tzset()
    sys.path.insert(0, str(REPO))
    import wf.engine._engine as engine_module

    engine_module.deployment_of = lambda fn: "2027.01-a"  # type: ignore[attr-defined]
    OUT.mkdir(parents=True, exist_ok=True)
    for path in asyncio.run(_shoot()):
        print(path.relative_to(REPO))


if __name__ == "__main__":
    main()
