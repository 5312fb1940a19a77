"""``wf inspect`` as a full-screen terminal app (Textual), over the runs of a store: the one here,
or a ``wf serve``'s (``WF_URL``), through a ``wf.admin.Admin`` client.

Importing this package costs nothing: Textual is imported only by ``launch`` (and by the
modules that build the app), so ``wf --help`` and the plain ``wf inspect`` stay fast.

Modules: ``_app`` (the app and its actions), ``_runs`` (the runs table), ``_run`` (one run),
``_rows`` (what the run screen's tables and header show), ``_why`` (why a run is where it is, in
words), ``_model`` (reading a run: ``Admin.run_detail`` and its JSON document), ``_query``
(pages of runs: ``Admin.list_runs``), ``_live`` (redrawing on ``Admin.changes``), ``_values``
(JSON tree), ``_streams`` (byte-stream viewer), ``_prompts`` (modals).
"""

from __future__ import annotations

__all__ = ["launch"]


def launch(run_id: str | None = None) -> None:
    """Run the app until the user quits; ``run_id`` opens that run.

    Its client is ``wf.admin.connect()``'s: a ``wf serve`` when ``WF_URL`` names one, else the
    store here, with an engine on it configured like ``wf cancel``'s and ``wf wake``'s (the
    actions drive runs with it); drives this process began are abandoned on exit as a crash
    would leave them.
    """
    import asyncio

    asyncio.run(_run_app(run_id))


async def _run_app(run_id: str | None) -> None:
    from wf._config import describe_store
    from wf._setup import remote
    from wf.admin import connect
    from wf.cli.tui._app import InspectApp

    server = remote()
    location = describe_store() if server is None else server.url
    async with connect() as client:
        await InspectApp(client, run_id=run_id, location=location).run_async()
