"""``wf inspect`` as a full-screen terminal app (Textual), over the runs of a store.

Importing this package costs nothing: Textual is imported only by ``launch`` (and by the
modules that build the app), so ``wf --help`` and the plain ``wf inspect`` stay fast.

Modules: ``_app`` (the app and its actions), ``_runs`` (the runs table), ``_run`` (one run),
``_rows`` (what the run screen's tables and header show), ``_why`` (why a run is where it is, in
words), ``_model`` (reading a run: ``wf.admin.run_detail`` and its JSON document), ``_query``
(pages of runs: ``wf.admin.list_runs``), ``_values`` (JSON tree), ``_streams`` (byte-stream
viewer), ``_prompts`` (modals).
"""

from __future__ import annotations

__all__ = ["launch"]


def launch(run_id: str | None = None) -> None:
    """Run the app on this directory's store until the user quits; ``run_id`` opens that run.

    The store and an engine on it are made here; actions use that engine (see ``_app``).
    """
    from wf._config import default_store, describe_store
    from wf.admin._engines import configured_engine, current
    from wf.cli.tui._app import InspectApp

    # The engine the actions drive runs with is configured like `wf cancel`'s and `wf wake`'s.
    with current(configured_engine(default_store())) as engine:
        InspectApp(engine, run_id=run_id, location=describe_store(), owns_engine=True).run()
