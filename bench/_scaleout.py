"""Scale-out: 1, 2 and 4 worker processes draining one backlog, in rounds.

One drain of a few thousand runs takes 2–4 s here, and its throughput moves ±15% from one
drain to the next on this kind of machine (a shared disk, two cores): a verdict taken on one
drain each of 2 and 4 workers, or on the best of two each, fell either way near the budget.
So each round drains with 1, 2 and 4 workers back to back (the three see the same machine),
and a row gives the median throughput of its rounds (an odd number of them: the median is a
round's, whose counters stand for the workload) and is judged on the median of its per-round
ratios to half as many workers: two workers must drain more than one, four at least
``TOLERANCE`` of two (they time-share two cores here).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

WORKERS = (1, 2, 4)
TOLERANCE = 0.95
"""Four workers must drain at least this fraction of two workers' throughput."""


def measure(drain: Callable[[int], dict[str, Any]], rounds: int) -> dict[int, list[dict[str, Any]]]:
    """``rounds`` rounds of ``drain(k)`` for every ``k`` in ``WORKERS``, in that order."""
    found: dict[int, list[dict[str, Any]]] = {k: [] for k in WORKERS}
    for _ in range(rounds):
        for k in WORKERS:
            found[k].append(drain(k))
    return found


@dataclass
class Summary:
    workers: int
    error: str | None
    runs_per_s: float
    """The median of the rounds."""
    typical: dict[str, Any]
    """The round whose throughput is the median (with an even number of rounds, the lower of
    the two middle ones): its counters stand for the workload."""
    against_one: float
    """Median throughput over the 1-worker median (0 when unknown)."""
    against_half: list[float]
    """Per round, throughput over the same round's drain with half as many workers."""

    @property
    def step(self) -> float:
        """The median of ``against_half`` (0 when unknown)."""
        return statistics.median(self.against_half) if self.against_half else 0.0

    @property
    def ok(self) -> bool:
        """Two workers drain more than one; more, at least ``TOLERANCE`` of half as many."""
        if not self.against_half:
            return False
        return self.step > 1.0 if self.workers == 2 else self.step >= TOLERANCE


def summarize(found: dict[int, list[dict[str, Any]]]) -> list[Summary]:
    """One summary per number of workers, in ``found``'s order."""
    errors = {
        k: next((str(r["error"]) for r in rounds if "error" in r), None)
        for k, rounds in found.items()
    }
    medians = {
        k: statistics.median(r["runs_per_s"] for r in rounds)
        for k, rounds in found.items()
        if rounds and errors[k] is None
    }
    summaries = []
    for k, rounds in found.items():
        if errors[k] is not None or not rounds:
            summaries.append(Summary(k, errors[k] or "not measured", 0.0, {}, 0.0, []))
            continue
        ordered = sorted(rounds, key=lambda r: float(r["runs_per_s"]))
        one = medians.get(1, 0.0)
        half = found.get(k // 2, []) if k > 1 and errors.get(k // 2) is None else []
        against_half = [
            mine["runs_per_s"] / theirs["runs_per_s"]
            for mine, theirs in zip(rounds, half, strict=False)
            if theirs["runs_per_s"]
        ]
        summaries.append(
            Summary(
                k,
                None,
                medians[k],
                ordered[(len(ordered) - 1) // 2],
                medians[k] / one if one else 0.0,
                against_half,
            )
        )
    return summaries
