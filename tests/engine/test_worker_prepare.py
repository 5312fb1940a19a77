"""What a worker does before it serves (``Worker.prepare``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_PROGRAM = """
import asyncio, sys
import wf
from wf.store.local import LocalStore

async def main():
    engine = wf.Engine(LocalStore(sys.argv[1]))
    worker = wf.Worker(engine, retention=False)
    before = "wf.engine._schedules" in sys.modules
    await worker.prepare()
    print(before, "wf.engine._schedules" in sys.modules)
    await engine.store.close()

asyncio.run(main())
"""


def test_a_worker_imports_what_fires_schedules_before_it_serves(tmp_path: Path) -> None:
    # A fresh interpreter: the test process imported it long ago. Imported on the first pass
    # of ``run`` instead, it was each worker's first 5 ms of serving (its source compiled),
    # while the others drained.
    done = subprocess.run(
        [sys.executable, "-c", _PROGRAM, str(tmp_path / "wf")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.split() == ["False", "True"]
