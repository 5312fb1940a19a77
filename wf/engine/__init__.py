"""The kernel: run context, replay, steps, timers, hooks, streams, child runs.

It talks to persistence only through ``wf.store.Store`` and never imports a concrete store or the
command line (``tests/test_layers.py`` enforces it).
"""
