"""wf's pytest plugin as pytest loads it: in every session where wf is installed."""

from __future__ import annotations

import subprocess
import sys

from tests.test_docs import REPO


def test_loading_the_plugin_imports_no_engine() -> None:
    # pytest imports the plugin (an entry point) in sessions that never use wf: it must cost
    # next to nothing there; the fixtures import the engine when a test asks for them.
    script = (
        "import sys\n"
        "import wf.testing.pytest_plugin\n"
        "heavy = ('wf.engine._engine', 'wf.store', 'wf.testing._engine', 'pydantic')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)))\n"
        "from wf.testing import MockClock, TestEngine\n"
        "print('wf.engine._engine' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.splitlines() == ["[]", "True"], done.stdout + done.stderr


def test_wf_testing_is_an_attribute_of_wf_imported_on_first_use() -> None:
    # The guide writes ``wf.testing.engine()`` after a bare ``import wf``; ``import wf`` itself
    # still loads none of the subpackages.
    script = (
        "import sys, wf\n"
        "print(sorted(m for m in sys.modules if m in ('wf.testing', 'wf.admin', 'wf.otel')))\n"
        "print(wf.testing.engine.__name__, wf.admin.run_detail.__name__)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.splitlines() == ["[]", "engine run_detail"], done.stdout + done.stderr
