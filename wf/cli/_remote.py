"""The commands that talk to a ``wf serve`` when ``WF_URL`` is set (``WF_TOKEN`` its token):
``wf runs``, ``wf inspect --json``, ``wf run``, ``wf cancel``, ``wf wake``, ``wf hook resume``,
``wf stream``. They render what the server answers as they render the local store's, and
never open a store or import the workflow's code here."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, BinaryIO

if TYPE_CHECKING:
    from wf._remote import RemoteClient
    from wf.store import RunRecord

_RECORD_KEYS = (
    "id", "workflow", "status", "target", "input", "output", "error", "created_at", "updated_at",
    "wake_at", "waiting_for", "parent_id", "root_id", "deployment", "code_hash", "resumes",
    "cancel_requested",
)  # fmt: skip


def client() -> RemoteClient | None:
    """The server named by ``WF_URL``, or None (then the commands use the store)."""
    import os

    if not os.environ.get("WF_URL"):
        return None
    from wf._remote import remote_client

    return remote_client()


def list_runs(
    remote: RemoteClient, statuses: list[str] | None, workflow: str | None, limit: int
) -> list[RunRecord]:
    """``wf runs`` over HTTP."""
    from wf.store import RunRecord

    page = asyncio.run(
        remote.list_runs(status=",".join(statuses or []), workflow=workflow, limit=limit)
    )
    return [RunRecord.from_json(r) for r in page["runs"]]


def inspect_json(remote: RemoteClient, run_id: str | None) -> dict[str, Any] | None:
    """``wf inspect --json`` over HTTP: the server's detail in the local command's shape."""
    import urllib.parse

    from wf.admin import Explanation, Reason
    from wf.cli._inspect_data import why_line

    async def read() -> dict[str, Any] | None:
        rid = run_id
        if rid is None:
            newest = await remote.list_runs(limit=1)
            if not newest["runs"]:
                return None
            rid = newest["runs"][0]["id"]
        data: dict[str, Any] = await remote.call("GET", "/runs/" + urllib.parse.quote(str(rid)))
        return data

    data = asyncio.run(read())
    if data is None:
        return None
    why = data["why"]
    explanation = Explanation(
        why["status"],
        tuple(Reason(**{**r, "kinds": tuple(r.get("kinds", ()))}) for r in why["reasons"]),
        why.get("waiting_for"),
        why.get("wake_at"),
    )
    import time

    return {
        "run": {key: data.get(key) for key in _RECORD_KEYS},
        "why": why_line(explanation, time.time()),
        "steps": [{k: v for k, v in s.items() if k != "spans"} for s in data["steps"]],
        "events": data["events"],
        "errors": data["errors"],
        "hooks": data["hooks"],
        "streams": data["stream_info"],
        "children": data["children"],
        "parent": data["parent"],
        "races": data["races"],
        "compensations": data["compensations"],
        "deployment": {
            "pinned": data.get("deployment"),
            "recorded": data.get("code_hash"),
            "current": None,
        },
        "replays": None,
    }


def start(
    remote: RemoteClient, target: str, data: Any, run_id: str | None, detach: bool
) -> tuple[str, dict[str, Any] | None]:
    """``wf run`` over HTTP: start by target (imported by the server, not here); with
    ``detach`` only its id, else also its result once it ended."""

    async def go() -> tuple[str, dict[str, Any] | None]:
        body: dict[str, Any] = {"target": target}
        if data is not None:
            body["input"] = data
        if run_id is not None:
            body["id"] = run_id
        started = await remote.call("POST", "/runs", json=body)
        rid = str(started["id"])
        if detach:
            return rid, None
        while True:
            result: dict[str, Any] = await remote.call(
                "GET", f"/runs/{rid}/result", params={"wait": 30}, timeout=60
            )
            if result["status"] in ("completed", "failed", "cancelled"):
                return rid, result

    return asyncio.run(go())


def control(
    remote: RemoteClient, run_id: str, action: str, wait: bool, children: bool = False
) -> list[tuple[str, bool, str]]:
    """``wf cancel`` / ``wf wake`` over HTTP: (run id, sent, status) per run."""
    from wf.store._ids import validate_run_id

    params = {"wait": str(wait).lower()}
    if children:
        params["children"] = "true"
    path = f"/runs/{validate_run_id(run_id)}/{action}"
    answer = asyncio.run(remote.call("POST", path, params=params, timeout=None))
    runs = answer.get("runs") or [{"run_id": answer["id"], **answer}]
    return [(r["run_id"], bool(r["sent"]), str(r["status"])) for r in runs]


def resume(remote: RemoteClient, token: str, payload: Any, wait: bool) -> tuple[str, Any]:
    """``wf hook resume`` over HTTP: the owning run's id (and its record, with ``wait``)."""

    async def go() -> tuple[str, Any]:
        run = await remote.resume_hook(token, payload)
        return run.id, (await run.settle()) if wait else None

    return asyncio.run(go())


def stream(
    remote: RemoteClient, run_id: str, name: str, start: int, follow: bool, out: BinaryIO
) -> None:
    """``wf stream`` over HTTP: the chunks as the server sends them."""
    from wf._remote import RemoteRun
    from wf.store._ids import validate_run_id

    async def go() -> None:
        run = RemoteRun(validate_run_id(run_id), remote)
        async for chunk in run.read_stream(name, start, follow=follow):
            out.write(chunk)
            out.flush()

    asyncio.run(go())
