"""The cyclic garbage collector of a process that drives runs for hours (`wf worker`, `wf serve`).

Such a process builds most of what it will ever hold before its first run: the command line,
the store's driver, the workflows' modules: some 40,000-50,000 objects that live as long
as the process. Every step then allocates and frees short-lived ones. With CPython's defaults
(a young collection every 700 net allocations of containers, an older one every 10 of those)
the collector keeps promoting survivors, and each full collection walks everything start-up
built once more: in ``wf worker`` processes draining a PostgreSQL queue, collections took a
quarter of two workers' CPU and two fifths of four's (each process pays its own full
collections, so more processes meant more of them for the same runs; docs/performance.md,
"A worker drain").

``settle_heap`` runs once start-up is over: one full collection (start-up's garbage is freed,
not kept), ``gc.freeze()`` (what survived is left out of every later collection: it lives as
long as the process, but for the odd object that later becomes cyclic garbage, such as a
connection replaced after it was lost, which is then never freed), and, if the thresholds are
still CPython's defaults, a youngest generation of 10,000 objects instead of 700 (fewer,
larger young collections; what a step leaves reaches the older generations far less often).
A threshold the process set itself (a workflow module, a ``sitecustomize``) is left as it is,
and a disabled collector stays disabled.

Only a process that the ``wf`` command owns does this (``wf.cli.main``): a library must not
change its host application's collector.
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000
"""Net allocations of containers between two collections of the youngest generation."""

_CPYTHON_DEFAULTS = frozenset({(700, 10, 10), (2000, 10, 10), (2000, 10, 0)})
"""``gc.get_threshold()`` as CPython starts (3.11–3.13; 3.14)."""


def settle_heap() -> bool:
    """Collect, freeze what start-up left, and widen the youngest generation (see the module's
    docstring). Returns False, changing nothing, when the collector is disabled."""
    if not gc.isenabled():
        return False
    gc.collect()
    gc.freeze()
    threshold = gc.get_threshold()
    if threshold in _CPYTHON_DEFAULTS:
        gc.set_threshold(YOUNG_THRESHOLD, *threshold[1:])
    return True
