"""The local store's file-system calls (``wf.store.local._fsops``): finding ``syncfs``."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from wf import StoreCorrupted
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


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_reading_a_directory_leaves_no_descriptor_open(tmp_path: Path) -> None:
    # A directory where a file belongs (a damaged run's run.json): each read must fail and
    # close what it opened, or a server polling that run runs out of descriptors.
    (tmp_path / "run.json").mkdir()
    before = _open_descriptors()
    for _ in range(20):
        with pytest.raises(StoreCorrupted, match="is a directory"):
            _fsops.read_bytes(str(tmp_path / "run.json"))
    assert _open_descriptors() == before


def test_a_lock_file_made_by_a_lease_is_not_executable(tmp_path: Path) -> None:
    path = str(tmp_path / "lock")
    fd = _fsops.try_lock(path, os.O_RDWR | os.O_CREAT)
    assert fd is not None
    os.close(fd)
    assert stat.S_IMODE(os.stat(path).st_mode) & 0o111 == 0
