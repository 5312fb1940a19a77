"""``wf stream``: raw bytes on stdout, tails with negative starts, following a stream live from
another process, and streams that survive a SIGKILL of the process writing them.

The workflows live here so that subprocesses import them as ``tests.cli.test_stream_cli:NAME``.
"""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import subprocess
import sys
import threading
import time

import wf
from tests.cli.conftest import Project
from tests.cli.flows import append, log_dir

HERE = "tests.cli.test_stream_cli"
RAW = bytes(range(256)) + b"\xff\xfe\x00\r\n"  # not UTF-8, NULs, CR LF: must pass untouched


async def wait_for_file(name: str, timeout: float = 30.0) -> None:
    """Hold a step until the test creates ``name`` in the log directory."""
    deadline = time.monotonic() + timeout
    while not (log_dir() / name).exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)


@wf.step
async def emit(count: int) -> int:
    async with wf.stream_writer() as out:
        for i in range(count):
            await out.write(f"chunk {i}\n")
    async with wf.stream_writer("raw") as raw:
        await raw.write(RAW[:100])
        await raw.write(RAW[100:])
    return count


@wf.workflow
async def chunks(count: int) -> int:
    return await emit(count)


@wf.step
async def gated(count: int) -> int:
    """Write line i, then wait for the file ``go_<i>``: the test decides when the next comes."""
    async with wf.stream_writer() as out:
        for i in range(count):
            await out.write(f"line {i}\n")
            await wait_for_file(f"go_{i}")
        await out.close()
    return count


@wf.workflow
async def live(count: int) -> int:
    return await gated(count)


@wf.step
async def part(i: int) -> None:
    append("parts", f"start {i} {os.getpid()}")
    if (log_dir() / f"hold_{i}").exists():
        await wait_for_file(f"release_{i}")  # the test kills the process here
    async with wf.stream_writer() as out:
        await out.write(f"part {i}\n")
    append("parts", f"end {i} {os.getpid()}")


@wf.workflow
async def parts(count: int) -> str:
    for i in range(count):
        await part(i)
    return "done"


@wf.step
async def reply(text: str) -> None:
    async with wf.stream_writer() as out:
        await out.write(f"{text}\n")


@wf.workflow
async def replies_once_asked() -> str:
    hook = wf.create_hook(str, token="ask")
    text = await hook.next()
    await reply(text)
    return text


class Follower:
    """``wf stream ARGS`` in a subprocess, its stdout collected as raw bytes by a thread."""

    def __init__(self, project: Project, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "wf", "stream", *args],
            cwd=project.root,
            env=project.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self._data = bytearray()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while chunk := os.read(fd, 65536):  # whatever arrived, without waiting for more
            with self._lock:
                self._data += chunk

    @property
    def output(self) -> bytes:
        with self._lock:
            return bytes(self._data)

    def finish(self, timeout: float = 30.0) -> tuple[int, bytes, str]:
        self.proc.wait(timeout=timeout)
        self._thread.join(timeout)
        assert self.proc.stderr is not None
        return self.proc.returncode, self.output, self.proc.stderr.read().decode()


def test_stream_writes_raw_bytes_and_tails_with_negative_starts(project: Project) -> None:
    done = project.cli("run", f"{HERE}:chunks", "-i", "5", "--id", "c", "-q")
    assert done.exit_code == 0, done.stderr
    every = b"".join(f"chunk {i}\n".encode() for i in range(5))

    def stream(*args: str) -> bytes:
        result = project.cli("stream", "c", *args)
        assert result.exit_code == 0, result.stderr
        return bytes(result.stdout_bytes)

    assert stream() == every
    assert stream("--start", "-2") == b"chunk 3\nchunk 4\n"
    assert stream("--start", "3") == b"chunk 3\nchunk 4\n"
    assert stream("-s", "-1", "--follow") == b"chunk 4\n"  # closed (the run ended): returns
    assert stream("--start", "-10") == every
    assert stream("--start", "10") == b""
    assert stream("--name", "raw") == RAW
    for follow in ("--follow", "--no-follow"):  # never written, and the run is over
        typo = project.cli("stream", "c", "--name", "nothing", follow)
        assert typo.exit_code == 2
        assert typo.stderr.strip() == (
            "error: run c has no stream 'nothing' (its streams: 'default', 'raw')"
        )

    # Byte for byte through a real pipe too (sys.stdout.buffer, no newline translation).
    raw = subprocess.run(
        [sys.executable, "-m", "wf", "stream", "c", "--name", "raw"],
        cwd=project.root,
        env=project.env,
        capture_output=True,
        timeout=30,
    )
    assert raw.returncode == 0 and raw.stdout == RAW


def test_unknown_run_is_exit_2(project: Project) -> None:
    result = project.cli("stream", "wrun_missing")
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: no run with id 'wrun_missing'"
    assert project.cli("stream", "../x").exit_code == 2


def test_follow_from_another_process_while_a_step_writes(project: Project) -> None:
    writer = project.spawn("run", f"{HERE}:live", "-i", "3", "--id", "live", "-q")
    project.wait_for(lambda: project.status("live") is not None)
    follower = Follower(project, "live", "--follow")

    project.wait_for(lambda: follower.output == b"line 0\n")  # shown before line 1 exists
    # A second reader joining late with a negative start sees only the tail, then follows.
    tail = Follower(project, "live", "--follow", "--start", "-1")
    project.wait_for(lambda: tail.output == b"line 0\n")
    (project.log / "go_0").touch()
    project.wait_for(lambda: follower.output == b"line 0\nline 1\n")
    (project.log / "go_1").touch()
    (project.log / "go_2").touch()

    code, out, err = follower.finish()
    assert code == 0, err
    assert out == b"line 0\nline 1\nline 2\n"  # it returned once the stream was closed
    code, out, err = tail.finish()
    assert code == 0, err
    assert out == b"line 0\nline 1\nline 2\n"
    assert writer.wait(timeout=30) == 0


def test_follow_waits_for_a_stream_a_suspended_run_opens_later(project: Project) -> None:
    writer = project.spawn("run", f"{HERE}:replies_once_asked", "--id", "ask", "-q")
    project.wait_for(lambda: project.status("ask") == "suspended")  # waits for its hook
    follower = Follower(project, "ask", "--follow")
    time.sleep(1.0)  # it starts and looks: no stream yet, and the run is not finished
    assert follower.proc.poll() is None, follower.finish()  # waiting, not "no stream"
    assert follower.output == b""
    resumed = project.cli("hook", "resume", "ask", "--data", '"hello"')
    assert resumed.exit_code == 0, resumed.stderr
    code, out, err = follower.finish()
    assert code == 0, err
    assert out == b"hello\n"
    assert writer.wait(timeout=30) == 0


def test_a_stream_survives_sigkill_of_its_worker_without_chunks_written_twice(
    project: Project,
) -> None:
    (project.log / "hold_2").touch()
    run_id = project.cli("run", f"{HERE}:parts", "-i", "4", "--detach").stdout.strip()
    follower = Follower(project, run_id, "--follow")
    worker = project.spawn("worker", "--poll", "0.2")

    def started(i: int) -> bool:
        return any(line.startswith(f"start {i} ") for line in project.lines("parts"))

    project.wait_for(lambda: started(2))
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    project.wait_for(lambda: follower.output == b"part 0\npart 1\n")
    assert follower.proc.poll() is None  # still following: the run is not over

    (project.log / "release_2").touch()
    finish = project.wf("worker", "--until-idle", "--poll", "0.2")
    assert finish.returncode == 0, finish.stderr
    assert project.status(run_id) == "completed"

    expected = b"part 0\npart 1\npart 2\npart 3\n"
    code, out, err = follower.finish()
    assert code == 0, err
    assert out == expected  # one follower across the crash, each chunk once
    assert project.cli("stream", run_id).stdout_bytes == expected
    # The step re-run after the SIGKILL finished: what the stream holds is its whole output.
    assert project.gather(run_id)["streams"] == {
        "default": {"chunks": 4, "closed": True, "complete": True, "cut_step": None}
    }
    starts = collections.Counter(
        int(line.split()[1]) for line in project.lines("parts") if line.startswith("start ")
    )
    assert starts == {0: 1, 1: 1, 2: 2, 3: 1}  # completed steps never ran again


def test_report_example_streams_its_progress(project: Project) -> None:
    run_id = project.cli(
        "run", "examples.report:report", "-i", '{"rows": 3}', "--detach"
    ).stdout.strip()
    follower = Follower(project, run_id, "--follow")
    assert project.cli("worker", "--until-idle").exit_code == 0
    code, out, err = follower.finish()
    assert code == 0, err
    assert out.decode().splitlines() == [
        "row 1/3: running total 1",
        "row 2/3: running total 3",
        "row 3/3: running total 6",
    ]
    assert project.gather(run_id)["run"]["output"] == 6


@wf.step(max_retries=0)
async def answer_cut_off() -> None:
    async with wf.stream_writer() as out:
        await out.write("Half an")
        raise wf.FatalError("the provider hung up")


@wf.workflow
async def cut_off() -> None:
    await answer_cut_off()


def test_a_stream_whose_writer_was_cut_off_is_written_then_said_incomplete(
    project: Project,
) -> None:
    ran = project.cli("run", f"{HERE}:cut_off", "--id", "cut", "-q")
    assert ran.exit_code == 1
    for follow in ("--follow", "--no-follow"):
        result = project.cli("stream", "cut", follow)
        assert result.exit_code == 1  # as for the failed run
        assert result.stdout_bytes == b"Half an"  # every chunk first
        assert result.stderr.strip() == (
            "error: run cut's stream 'default' is incomplete: step "
            "'answer_cut_off' was cut off while writing it (its attempt failed, or "
            "the run ended, before it finished)"
        )
    shown = project.cli("inspect", "cut")
    assert "default: 1 chunk(s), incomplete: step 'answer_cut_off' was cut" in (
        " ".join(shown.stdout.split())
    )
    assert project.gather("cut")["streams"] == {
        "default": {
            "chunks": 1,
            "closed": True,
            "complete": False,
            "cut_step": "answer_cut_off",
        }
    }
