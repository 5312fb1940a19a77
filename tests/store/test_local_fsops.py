"""The local store's file-system calls (``wf.store.local._fsops``): finding ``syncfs``."""

from __future__ import annotations

import json
import subprocess
import sys

from wf.store.local import _fsops

STARTED = """
import json, subprocess
started = []

class Recorded(subprocess.Popen):
    def __init__(self, args, *rest, **kwargs):
        started.append(list(args))
        raise OSError("no programs here")

subprocess.Popen = Recorded
from wf.store.local import _fsops
print(json.dumps({"started": started, "syncfs": _fsops._syncfs is not None}))
"""


def test_importing_the_local_store_runs_no_program() -> None:
    # Every process that opens a local store (each `wf` command, each worker) imports this
    # module: looking syncfs up with ctypes.util.find_library ran `ldconfig -p` each time.
    done = subprocess.run(
        [sys.executable, "-c", STARTED], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout)
    assert outcome == {"started": [], "syncfs": _fsops._syncfs is not None}
