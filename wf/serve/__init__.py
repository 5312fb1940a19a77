"""``wf serve``: the HTTP API, webhooks and the web UI over a store (``pip install
'wf-durable[serve]'``).

``create_app(engine, token=..., drive=...)`` is the Starlette app (test it with
``httpx.ASGITransport``); ``serve(...)`` runs it under uvicorn, as ``wf serve`` does.
See ``docs/http.md``.
"""

from __future__ import annotations

from wf.serve._app import create_app
from wf.serve._run import LOOPBACK, check_bind, serve

__all__ = ["LOOPBACK", "check_bind", "create_app", "serve"]
