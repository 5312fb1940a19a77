"""The store a command uses, and the note a command prints when it drives a run pinned to
another deployment."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from wf import RunRecord
    from wf.store import Store


def store_path() -> str:
    """Where the commands' store is, for messages (see ``wf._config.describe_store``)."""
    from wf._config import describe_store

    return describe_store()


def open_store() -> Store:
    """The store every command uses: the same choice as the library's (``wf._config``)."""
    from wf._config import default_store

    return default_store()


def remote_url() -> str | None:
    """``WF_URL`` when set (not empty): the commands that talk to a server use it; those that
    work on the store here say so (``say_local``) or refuse (``wf check --replay``)."""
    import os

    return os.environ.get("WF_URL") or None


def say_local(command: str) -> None:
    """A note on stderr that ``command`` works on the store here, though ``WF_URL`` is set."""
    from wf.admin._words import visible

    url = remote_url()
    if url is not None:
        sys.stderr.write(
            f"hint: {command} works on the store here ({visible(store_path())}), not on the "
            f"server at WF_URL ({visible(url)}): run it where that server's store is\n"
        )
        sys.stderr.flush()


def say_crossing(here: str | None) -> Callable[[RunRecord], None]:
    """A note on stderr when a command drives a run pinned to another deployment."""

    def say(record: RunRecord) -> None:
        from wf.admin._words import visible

        code = f"deployment {here}'s code" if here is not None else "the code here"
        line = f"run {record.id} is pinned to deployment {record.deployment}; driving it on {code}"
        sys.stderr.write(f"note: {visible(line)}\n")

    return say
