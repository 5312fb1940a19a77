"""Traces: the span tree of a run (steps, a retry, a suspension, a child run), context carried
in the run record across processes, and no OpenTelemetry import when it is not in use."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import wf
import wf.otel
import wf.testing
from tests.cli.conftest import REPO, Project
from tests.otel import flows


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    found = InMemorySpanExporter()
    yield found
    found.shutdown()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> TracerProvider:
    made = TracerProvider()
    made.add_span_processor(SimpleSpanProcessor(exporter))
    return made


def by_name(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent else None


def span_id(span: ReadableSpan) -> int:
    context = span.get_span_context()
    assert context is not None
    return context.span_id


def trace_id(span: ReadableSpan) -> int:
    context = span.get_span_context()
    assert context is not None
    return context.trace_id


async def test_the_span_tree_of_a_run_with_steps_a_retry_a_suspension_and_a_child(
    exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    flows.attempts.clear()
    async with wf.testing.engine() as eng:
        wf.otel.instrument(eng, tracer_provider=provider)
        run = await wf.start(flows.parent, "tree")
        assert await run.result() == 20
        logged = await eng.store.read_logs(run.id)
    spans = exporter.get_finished_spans()

    # One trace: the producer span of the start is its root.
    assert len({trace_id(s) for s in spans}) == 1
    (start,) = by_name(spans, "start otel_parent")
    assert start.kind is SpanKind.PRODUCER and start.parent is None
    assert start.attributes is not None and start.attributes["wf.run.id"] == run.id

    # Each drive of the run is a child of the producer span; the sleep suspended the first.
    drives = by_name(spans, "run otel_parent")
    assert len(drives) >= 2
    assert all(parent_of(d) == span_id(start) and d.kind is SpanKind.CONSUMER for d in drives)
    first = drives[0]
    events = [e.name for e in first.events]
    assert "step retrying" in events and "sleep" in events and events[-1] == "suspended"
    retrying = next(e for e in first.events if e.name == "step retrying")
    assert retrying.attributes is not None
    assert retrying.attributes["wf.step"] == "flaky"
    assert retrying.attributes["exception.type"] == "ConnectionError"
    assert "resumed" in [e.name for e in drives[1].events]
    assert drives[-1].status.status_code is StatusCode.UNSET  # success: unset, as the spec asks

    # A span per step attempt, under the drive that ran it; the failed attempt says why.
    annotate = by_name(spans, "step annotate")
    assert len(annotate) == 1 and parent_of(annotate[0]) == span_id(first)
    assert annotate[0].attributes is not None
    assert annotate[0].attributes["app.x"] == 1  # set by user code in the step's thread
    assert annotate[0].attributes["wf.step.attempt"] == 1
    # What the step printed carries the ids of its span.
    (printed,) = logged
    assert printed["text"] == "annotated 1"
    assert printed["trace_id"] == f"{trace_id(annotate[0]):032x}"
    assert printed["span_id"] == f"{span_id(annotate[0]):016x}"
    flaky = by_name(spans, "step flaky")
    assert [s.attributes["wf.step.attempt"] for s in flaky if s.attributes] == [1, 2]
    assert flaky[0].status.status_code is StatusCode.ERROR
    assert [e.name for e in flaky[0].events] == ["exception"]
    assert flaky[1].status.status_code is StatusCode.UNSET

    # The child run: its producer span under the parent's drive, its drive under that.
    (child_start,) = by_name(spans, "start otel_child")
    assert parent_of(child_start) in {span_id(d) for d in drives[1:]}
    child_drives = by_name(spans, "run otel_child")
    assert child_drives and all(parent_of(d) == span_id(child_start) for d in child_drives)
    (leaf,) = by_name(spans, "step leaf")
    assert parent_of(leaf) == span_id(child_drives[-1])
    assert leaf.attributes is not None and leaf.attributes["wf.run.id"] != run.id


async def test_success_leaves_the_status_to_the_code_in_the_step(
    exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    async with wf.testing.engine() as eng:
        wf.otel.instrument(eng, tracer_provider=provider)
        run = await wf.start(flows.handles)
        assert await run.result() == "done"
    spans = exporter.get_finished_spans()
    plain, judged = by_name(spans, "step handled")
    assert plain.status.status_code is StatusCode.UNSET
    assert judged.status.status_code is StatusCode.ERROR  # not overwritten by wf
    assert judged.status.description == "quote stale, used cached"
    (drive,) = by_name(spans, "run otel_handled")
    assert drive.status.status_code is StatusCode.UNSET
    assert drive.attributes is not None and drive.attributes["wf.run.status"] == "completed"


async def test_a_failed_run_sets_the_drive_span_status_with_the_exception(
    exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    async with wf.testing.engine() as eng:
        wf.otel.instrument(eng, tracer_provider=provider)
        run = await wf.start(flows.failing.with_options(group="g1"))
        with pytest.raises(wf.RunFailed):
            await run.result()
    (drive,) = by_name(exporter.get_finished_spans(), "run otel_failing")
    assert drive.attributes is not None and drive.attributes["wf.group"] == "g1"
    assert drive.status.status_code is StatusCode.ERROR
    assert str(drive.status.description).endswith("FatalError: no")
    exception = next(e for e in drive.events if e.name == "exception")
    assert exception.attributes is not None
    assert str(exception.attributes["exception.type"]).endswith("FatalError")


async def test_a_step_span_records_a_huge_or_unencodable_message_bounded_and_as_utf8(
    exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    async with wf.testing.engine() as eng:
        wf.otel.instrument(eng, tracer_provider=provider)
        run = await wf.start(flows.loud, 1_000_000)
        assert await run.result() == "handled"
    steps = by_name(exporter.get_finished_spans(), "step fail_loudly")
    assert steps  # one per attempt
    for step in steps:
        (exception,) = [e for e in step.events if e.name == "exception"]
        attributes = dict(exception.attributes or {})
        assert attributes["exception.type"] == "ValueError"
        message = str(attributes["exception.message"])
        assert message.startswith("bad \\udcff xxx") and len(message) < 20_000
        for value in [*attributes.values(), step.status.description]:
            assert len(str(value)) < 40_000
            str(value).encode("utf-8")  # an exporter's encoding of it cannot fail


async def test_the_trace_context_is_stored_in_the_run_record(
    exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    async with wf.testing.engine() as eng:
        wf.otel.instrument(eng, tracer_provider=provider)
        run = await wf.start(flows.waiting, detach=True)
        record = await run.record()
    (start,) = exporter.get_finished_spans()
    assert record.trace is not None
    assert record.trace["traceparent"].split("-")[1] == f"{trace_id(start):032x}"


def read_spans(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_one_trace_from_a_producer_process_through_a_worker_after_a_crash(
    project: Project, tmp_path: Path
) -> None:
    spans_file = tmp_path / "spans.jsonl"
    env = {"WF_TEST_SPANS": str(spans_file)}

    def traced(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "tests.otel.traced_wf", *args],
            cwd=tmp_path,
            env={**project.env, **env},
            capture_output=True,
            text=True,
            timeout=60,
        )

    (project.log / "crash").touch()
    producer = traced("run", "tests.otel.flows:crashy", "--id", "crashy", "-q")
    assert producer.returncode == 9, producer.stderr  # died mid-step
    worker = traced("worker", "--until-idle", "--poll", "0.2", "-q")
    assert worker.returncode == 0, worker.stderr
    assert project.status("crashy") == "completed"

    spans = read_spans(spans_file)
    (start,) = [s for s in spans if s["name"] == "start otel_crashy"]
    assert start["parent_id"] is None and start["pid"] != os.getpid()
    worker_spans = [s for s in spans if s["pid"] != start["pid"]]
    assert {s["name"] for s in worker_spans} >= {"run otel_crashy", "step crash_if_asked"}
    # The worker's spans are in the producer's trace, its drive a child of the producer span.
    assert {s["trace_id"] for s in spans} == {start["trace_id"]}
    (drive,) = [s for s in worker_spans if s["name"] == "run otel_crashy"]
    assert drive["parent_id"] == start["span_id"]
    (step,) = [s for s in worker_spans if s["name"] == "step crash_if_asked"]
    assert step["parent_id"] == drive["span_id"]
    # The producer's first step was recorded before the crash, in the same trace.
    assert [s["pid"] for s in spans if s["name"] == "step leaf"] == [start["pid"]]


def test_without_opentelemetry_in_use_wf_imports_none_of_it(tmp_path: Path) -> None:
    script = (
        "import asyncio, sys, wf, wf.testing\n"
        "@wf.step\n"
        "async def one() -> int:\n"
        "    return 1\n"
        "@wf.workflow\n"
        "async def flow() -> int:\n"
        "    return await one()\n"
        "async def main() -> None:\n"
        "    async with wf.testing.engine():\n"
        "        assert await (await wf.start(flow)).result() == 1\n"
        "asyncio.run(main())\n"
        "import wf.cli._app\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('opentelemetry'))\n"
        "assert not loaded, loaded\n"
        "print('clean')\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("WF_OTEL", None)
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "clean"


async def test_a_hook_resume_is_a_producer_span_the_drive_links_to(
    exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    async with wf.testing.engine() as eng:
        wf.otel.instrument(eng, tracer_provider=provider)
        run = await wf.start(flows.approval)
        await run.settle()
        await wf.resume_hook("otel-approve", "yes")
        assert await run.result() == "yes"
    spans = exporter.get_finished_spans()
    (sent,) = by_name(spans, "send hook")
    assert sent.kind is SpanKind.PRODUCER
    assert sent.attributes is not None and sent.attributes["wf.hook.token"] == "otel-approve"
    (start,) = by_name(spans, "start otel_approval")
    assert trace_id(sent) != trace_id(start)  # the sender's own trace
    drives = by_name(spans, "run otel_approval")
    linked = [d for d in drives if any(link.context.span_id == span_id(sent) for link in d.links)]
    assert len(linked) == 1
    assert "hook received" in [e.name for e in linked[0].events]


async def test_a_schedule_fire_is_a_producer_span_its_run_continues(
    exporter: InMemorySpanExporter, provider: TracerProvider
) -> None:
    from tests.engine.test_schedules import work_until

    async with wf.testing.engine() as eng:
        wf.otel.instrument(eng, tracer_provider=provider)
        await wf.schedule("otel-minutely", flows.child, cron="* * * * *", input=[2])
        await work_until(eng, eng.clock.now() + 61)
        runs = [r for r in await eng.store.list_runs(limit=10) if r.schedule_id]
    (run,) = runs
    spans = exporter.get_finished_spans()
    (start,) = by_name(spans, "start otel_child")
    assert start.kind is SpanKind.PRODUCER
    assert start.attributes is not None
    assert start.attributes["wf.run.id"] == run.id
    assert start.attributes["wf.schedule.id"] == "otel-minutely"
    # The fired run's drive and step are in the fire's trace, under its span.
    (drive,) = by_name(spans, "run otel_child")
    assert parent_of(drive) == span_id(start) and trace_id(drive) == trace_id(start)
    (step,) = by_name(spans, "step leaf")
    assert parent_of(step) == span_id(drive)


@pytest.mark.parametrize("mode", ["auto", "1"])
def test_a_worker_traces_runs_whose_module_sets_the_provider_as_it_is_imported(
    project: Project, tmp_path: Path, mode: str
) -> None:
    spans_file = tmp_path / "spans.jsonl"
    env = {"WF_TEST_SPANS": str(spans_file), "WF_OTEL": mode}
    target = "tests.otel.provider_at_import:flow"
    queued = project.wf("run", target, "--input", '"ann"', "--id", "a", "--detach", **env)
    assert queued.returncode == 0, queued.stderr
    # The worker has no provider until it drives the run and so imports the module.
    worker = project.wf("worker", "--until-idle", "--poll", "0.2", "-q", **env)
    assert worker.returncode == 0, worker.stderr
    assert project.status("a") == "completed"

    spans = read_spans(spans_file)
    (start,) = [s for s in spans if s["name"] == "start otel_at_import"]
    (drive,) = [s for s in spans if s["name"] == "run otel_at_import"]
    (step,) = [s for s in spans if s["name"] == "step greet"]
    assert drive["pid"] != start["pid"]
    assert {s["trace_id"] for s in spans} == {start["trace_id"]}
    assert drive["parent_id"] == start["span_id"]
    assert step["parent_id"] == drive["span_id"]


@pytest.mark.parametrize("batch", ["", "1"], ids=["simple", "batch"])
def test_wf_run_keeps_console_spans_off_stdout_which_carries_the_result(
    project: Project, batch: str
) -> None:
    # A batch processor exports after the run's end (at exit, at the latest): still stderr.
    done = project.wf(
        "run",
        "tests.otel.console_wf:onboarding",
        "--input",
        '"u1"',
        "-q",
        WF_TEST_BATCH_SPANS=batch,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == "user u1"  # the result alone: `wf run ... | jq` works
    for span in ("start otel_console", "run otel_console", "step fetch_user"):
        assert f'"name": "{span}"' in done.stderr, done.stderr


def test_wf_run_prints_its_result_and_exits_when_the_span_exporter_blocks(
    project: Project,
) -> None:
    proc = project.spawn("run", "tests.otel.blocking_wf:onboarding", "--input", '"u1"', "-q")
    try:
        out, err = proc.communicate(timeout=40)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    assert proc.returncode == 0, err
    assert json.loads(out) == "user u1"
    assert err.count("span exporter did not finish within 3 s") == 1, err


def test_wf_run_waits_for_a_blocked_exporter_once_when_spans_ended_at_import(
    project: Project,
) -> None:
    """Spans ended while the target is imported wait for the exporter with the run's, after
    it: one flush (one wait of 3 s) and one warning, not one for the import and one for the
    run. Said by what the process did, not by how long it took (a machine under load took
    6.8 s for the one wait)."""
    from tests.otel.blocking_said import EXPORTING, FLUSHING

    proc = project.spawn(
        "run", "tests.otel.blocking_at_import_wf:onboarding", "--input", '"u1"', "-q"
    )
    try:
        out, err = proc.communicate(timeout=40)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise
    assert proc.returncode == 0, err
    assert json.loads(out) == "user u1"
    assert err.count(FLUSHING) == 1, err  # one flush: the import's spans waited for the run
    assert err.count("span exporter did not finish within 3 s") == 1, err
    exports = [json.loads(line[len(EXPORTING) :]) for line in err.splitlines() if EXPORTING in line]
    # The exporter got the import's span with the run's, in the one export it blocked on.
    (exported,) = exports
    assert "loading config" in exported and "run otel_blocking_at_import" in exported, exported
    assert err.index(FLUSHING) < err.index(EXPORTING) < err.index("did not finish"), err


class _NetworkExporter(SpanExporter):
    """Stands for an exporter that sends over the network (OTLP...): it could be slow."""

    def export(self, spans: object) -> SpanExportResult:
        return SpanExportResult.SUCCESS


@pytest.mark.parametrize(
    ("processor", "warned"),
    [
        (lambda: SimpleSpanProcessor(_NetworkExporter()), True),
        (lambda: BatchSpanProcessor(_NetworkExporter()), False),
        (lambda: SimpleSpanProcessor(InMemorySpanExporter()), False),  # memory: quick
    ],
)
async def test_a_provider_exporting_inline_over_the_network_is_warned_about_once(
    caplog: pytest.LogCaptureFixture, processor: Any, warned: bool
) -> None:
    provider = TracerProvider()
    provider.add_span_processor(processor())
    async with wf.testing.engine() as eng:
        with caplog.at_level("WARNING", logger="wf.otel"):
            wf.otel.instrument(eng, tracer_provider=provider)
            wf.otel.instrument(eng, tracer_provider=provider)
    found = [r.getMessage() for r in caplog.records if r.name == "wf.otel"]
    if warned:
        (line,) = found  # once per provider
        assert "SimpleSpanProcessor(_NetworkExporter)" in line and "BatchSpanProcessor" in line
    else:
        assert found == []
    provider.shutdown()
