"""Facts about paths on this machine that every layer may ask (no layer of its own), and
how many files this process may open against how many a worker needs (a local store's drive
holds its run's journal, and lock file, open and opens a few more while it commits: a worker
driving more runs at once than ``ulimit -n`` allows for runs out of files, ``EMFILE``)."""

from __future__ import annotations

import os
import resource


def read_only(path: str) -> bool:
    """Whether the directory at ``path`` cannot be written (a read-only mount, no permission)."""
    try:
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return True
    except OSError:
        return False
    return not os.access(path, os.W_OK)


FILES_PER_RUN = 4
"""Files a run driven by a local store may have open at once (its journal, its lock file, and
the files of a commit in progress)."""

FILES_BESIDES = 64
"""Files a worker process has open whatever it drives (the interpreter, its modules, the
store's shared files, sockets)."""


def open_files_limit() -> int | None:
    """The soft ``RLIMIT_NOFILE`` (``ulimit -n``), or ``None`` when unlimited or unknown."""
    try:
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (OSError, ValueError):
        return None
    return None if soft == resource.RLIM_INFINITY else soft


def too_few_files(concurrency: int) -> str | None:
    """A warning when ``ulimit -n`` is too low for ``concurrency`` runs at once, else ``None``."""
    limit = open_files_limit()
    needed = FILES_BESIDES + FILES_PER_RUN * concurrency
    if limit is None or limit >= needed:
        return None
    return (
        f"`ulimit -n` {limit} is too low for --concurrency {concurrency}; wf needs about "
        f"{FILES_PER_RUN} files per run (about {needed} in all): fewer runs are driven at "
        f"once (raise it with `ulimit -n {needed}`)"
    )
