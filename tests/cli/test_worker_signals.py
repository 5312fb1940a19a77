"""``wf worker`` stops on SIGTERM and Ctrl-C even after a step replaced its signal handlers."""

from __future__ import annotations

import signal

import pytest

from tests.cli.conftest import Project


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_worker_still_stops_after_a_step_took_its_signals(
    project: Project, sig: signal.Signals
) -> None:
    queued = project.wf("run", "tests.cli.signal_flows:grabber", "--id", "g", "--detach")
    assert queued.returncode == 0, queued.stderr
    worker = project.spawn("worker", "--poll", "0.2")
    try:
        project.wait_for(lambda: project.status("g") == "completed")
        worker.send_signal(sig)
        _out, err = worker.communicate(timeout=15)
    finally:
        if worker.poll() is None:  # it ignored the signal: the fault under test
            worker.kill()
            worker.communicate(timeout=15)
    assert worker.returncode == 0, err
    assert "draining" in err
    said = [line for line in err.splitlines() if "replaced wf's" in line]
    assert len(said) == 1, err
    assert "step 'grab_signals' replaced wf's SIGTERM and SIGINT handlers" in said[0]
    assert "Traceback" not in err
