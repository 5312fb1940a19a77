"""``wf dev``: keep a worker serving the current code while the code is edited.

The library side of the command (the CLI only parses arguments and picks a renderer):

* ``_config``: ``wf.toml`` / ``[tool.wf]`` settings, and the starter file ``wf init`` writes;
* ``_watch``: watching the project's Python files (events, or polling on network mounts);
* ``_checking``: ``wf check`` before a reload, and which findings block it;
* ``_serving``: an engine that reports its runs, a worker that drains and restarts;
* ``_modules``: the project's modules, purged and re-imported as one transaction;
* ``_replay``: replay-checking the runs in flight against the new code;
* ``_loop``: the loop tying these together; ``_events``: what it reports;
* ``_lines`` / ``_live`` / ``_state``: greppable lines for pipes, a rich console for terminals.

See ``docs/dev.md``.
"""

from __future__ import annotations

from wf.dev._config import DevConfig, load_dev_config, starter_config, write_starter
from wf.dev._events import DevEvent, Sink
from wf.dev._lines import LineRenderer
from wf.dev._loop import DevLoop, DevOptions

__all__ = [
    "DevConfig",
    "DevEvent",
    "DevLoop",
    "DevOptions",
    "LineRenderer",
    "Sink",
    "load_dev_config",
    "starter_config",
    "write_starter",
]
