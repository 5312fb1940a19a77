"""Make the screenshots of the web UI in docs/img/ (run by hand, not by the test suite):

    python -m tests.serve.screenshots

Starts ``wf serve`` on a throw-away store, fills it with runs of ``tests.serve.demo`` and
photographs the runs page and one run's page in headless Chromium.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import httpx

from tests.serve.conftest import REPO, env_for, spawn_server, stop

OUT = REPO / "docs" / "img"


def _start(url: str, flow: str, input_: object) -> str:
    body = {"target": f"tests.serve.demo:{flow}", "input": input_}
    response = httpx.post(url + "/api/v1/runs", json=body, timeout=30)
    response.raise_for_status()
    run_id: str = response.json()["id"]
    return run_id


def main() -> None:
    from playwright.sync_api import sync_playwright

    tmp = Path(tempfile.mkdtemp())
    served = spawn_server(env_for(tmp))
    try:
        url = served.url
        for order in range(1, 9):
            _start(url, "quick_order", order)
        _start(url, "refund", 17)
        _start(url, "nightly_report", "2026-11-30")
        featured = _start(url, "checkout", 1042)
        _start(url, "refund", 23)
        time.sleep(6)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path="/usr/bin/chromium", args=["--no-sandbox"]
            )
            page = browser.new_page(viewport={"width": 1360, "height": 820}, device_scale_factor=1)
            page.emulate_media(color_scheme="light")
            page.goto(url + "/")
            page.wait_for_selector("table.runs")
            time.sleep(0.5)
            page.screenshot(path=str(OUT / "serve-runs.png"))
            page.set_viewport_size({"width": 1360, "height": 1180})
            page.goto(f"{url}/runs/{featured}")
            page.wait_for_selector(".timeline")
            time.sleep(1.5)  # let the byte stream fill in
            page.screenshot(path=str(OUT / "serve-run.png"))
            browser.close()
    finally:
        stop(served)
    sys.stdout.write(f"wrote {OUT / 'serve-runs.png'} and {OUT / 'serve-run.png'}\n")


if __name__ == "__main__":
    main()
