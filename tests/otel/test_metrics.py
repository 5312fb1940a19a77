"""Metrics: counters, histograms and queue gauges after a known workload."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

import wf
import wf.otel
import wf.testing
from tests.otel import flows


def points(reader: InMemoryMetricReader) -> dict[str, list[Any]]:
    data = reader.get_metrics_data()
    assert data is not None
    found: dict[str, list[Any]] = {}
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found.setdefault(metric.name, []).extend(metric.data.data_points)
    return found


def value(found: dict[str, list[Any]], name: str, **attributes: Any) -> Any:
    matching = [
        p
        for p in found.get(name, [])
        if all(p.attributes.get(k) == v for k, v in attributes.items())
    ]
    assert len(matching) == 1, (name, attributes, found.get(name))
    point = matching[0]
    return point.count if hasattr(point, "count") else point.value


async def test_metric_values_after_a_known_workload() -> None:
    flows.attempts.clear()
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    async with wf.testing.engine() as eng:
        instrument = wf.otel.instrument(eng, meter_provider=meters, traces=False, metrics=True)
        for key in ("a", "b"):
            assert await (await wf.start(flows.parent, key)).result() == 20
        with pytest.raises(wf.RunFailed):
            await (await wf.start(flows.failing)).result()
        waiting = await wf.start(flows.waiting)
        await waiting.settle()
        await waiting.cancel(wait=True)
        for _ in range(3):
            await wf.start(flows.crashy, detach=True)  # queued, driven by nobody
        again = await wf.start(flows.crashy, detach=True, run_id="wrun_01J00000000000000000000001")
        # The same start again (an idempotent retry) returns the run, not another one.
        assert (
            await wf.start(flows.crashy, detach=True, run_id="wrun_01J00000000000000000000001")
        ).id == again.id
        eng.clock.jump(30)  # type: ignore[attr-defined]
        stats = await instrument.sample_queue(eng.store, eng.clock.now())
    assert [(s.workflow, s.depth) for s in stats] == [("otel_crashy", 4)]

    found = points(reader)
    assert value(found, "wf.runs.started", **{"wf.workflow": "otel_parent"}) == 2
    assert value(found, "wf.runs.started", **{"wf.workflow": "otel_child"}) == 2
    # Counted when enqueued: the queued runs nobody drove count, the retried start once.
    assert value(found, "wf.runs.started", **{"wf.workflow": "otel_crashy"}) == 4
    assert value(found, "wf.runs.completed", **{"wf.workflow": "otel_parent"}) == 2
    assert value(found, "wf.runs.completed", **{"wf.workflow": "otel_child"}) == 2
    assert value(found, "wf.runs.failed", **{"wf.workflow": "otel_failing"}) == 1
    assert value(found, "wf.runs.cancelled", **{"wf.workflow": "otel_waiting"}) == 1
    # Each parent's flaky step failed once: one retry each, two attempts each.
    assert value(found, "wf.step.retries", **{"wf.step": "flaky"}) == 2
    assert value(found, "wf.step.duration", **{"wf.step": "flaky", "wf.outcome": "error"}) == 2
    assert value(found, "wf.step.duration", **{"wf.step": "flaky", "wf.outcome": "ok"}) == 2
    assert value(found, "wf.step.duration", **{"wf.step": "leaf", "wf.outcome": "ok"}) == 2
    # Run durations come from the run's own clock: each parent slept an hour.
    parents = [p for p in found["wf.run.duration"] if p.attributes["wf.workflow"] == "otel_parent"]
    assert len(parents) == 1 and parents[0].count == 2 and parents[0].min >= 3600
    assert value(found, "wf.queue.depth", **{"wf.workflow": "otel_crashy"}) == 4
    assert value(found, "wf.queue.oldest_age", **{"wf.workflow": "otel_crashy"}) == 30


async def test_a_worker_samples_the_queue_for_the_gauges() -> None:
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    async with wf.testing.engine() as eng:
        wf.otel.instrument(eng, meter_provider=meters, traces=False, metrics=True)
        for x in range(2):
            await wf.start(flows.child, x, detach=True)
        await wf.Worker(eng).run(until_idle=True)  # samples before it takes the runs
    found = points(reader)
    assert value(found, "wf.queue.depth", **{"wf.workflow": "otel_child"}) == 2
    assert value(found, "wf.runs.completed", **{"wf.workflow": "otel_child"}) == 2
