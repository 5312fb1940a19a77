"""How long `wf check` takes on a generated 10,000-line project.

Run: ``python bench/bench_check.py [--lines N] [--repeat R]``. It writes a package of modules
(workflows, steps, helpers calling helpers in other modules, a few violations) into a temporary
directory, then times ``check_paths`` on it: a cold run (parse + analyze) and warm runs, which
reuse parsed modules as `wf dev` does. Not a test: the budget ("well under a second for 10,000
lines") is checked by reading the figure, never by a timed assertion.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from wf.check import check_paths

MODULE = '''\
"""Generated module {i}."""

import asyncio
import datetime
import random
import time

import wf
from pkg.mod{prev} import helper_{prev}_0

LIMITS = {{"a", "b", "c"}}


@wf.step
async def fetch_{i}(key: str) -> dict[str, int]:
    await asyncio.sleep(0.01)
    return {{"key": len(key), "at": int(time.time())}}


def helper_{i}_0(values: list[int]) -> int:
    total = 0
    for value in values:
        total += value * 2
    return total + helper_{prev}_0(values[:1])


def helper_{i}_1(names: list[str]) -> list[str]:
    seen = set(names)
    return [name.upper() for name in sorted(seen)]


class Service{i}:
    def __init__(self, scale: int) -> None:
        self.scale = scale

    def compute(self, values: list[int]) -> int:
        return self.scale * helper_{i}_0(values)

    def stamp(self) -> float:
        return time.time()
'''

WORKFLOW = """

@wf.workflow
async def flow_{i}_{j}(order_id: str, items: list[int]) -> dict[str, object]:
    data = await fetch_{i}(order_id)
    service = Service{i}(3)
    total = service.compute(items) + helper_{i}_0(items)
    names = helper_{i}_1([str(x) for x in items])
    when = wf.now()
    if total > 100:
        await wf.sleep(60)
    for name in names:
        data[name] = len(name)
    for key in data:
        total += data[key]
    result: dict[str, object] = {{"total": total, "when": when, "names": names}}
    if not items:
        result["late"] = datetime.datetime.now()
        result["pick"] = random.choice(names or ["x"])
        for tag in LIMITS:
            result[tag] = tag
    return result
"""


def generate(root: Path, target_lines: int) -> tuple[int, int]:
    """Write the project; return (files, lines)."""
    package = root / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    files, lines, i = 1, 0, 0
    while lines < target_lines:
        text = MODULE.format(i=i, prev=max(i - 1, 0)) + "".join(
            WORKFLOW.format(i=i, j=j) for j in range(4)
        )
        if i == 0:
            text = text.replace("from pkg.mod0 import helper_0_0\n", "")
            text = text.replace(" + helper_0_0(values[:1])", "")
        (package / f"mod{i}.py").write_text(text)
        lines += text.count("\n")
        files += 1
        i += 1
    return files, lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        files, lines = generate(root, args.lines)
        started = time.perf_counter()
        result = check_paths([root])
        cold = time.perf_counter() - started
        warm = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            check_paths([root])
            warm.append(time.perf_counter() - started)
    print(f"project: {files} files, {lines} lines; {len(result.findings)} findings")
    print(f"cold check (parse + analyze): {cold * 1000:.0f} ms ({lines / cold:,.0f} lines/s)")
    print(f"warm check (unchanged files): best {min(warm) * 1000:.0f} ms of {args.repeat}")


if __name__ == "__main__":
    main()
