"""Benchmark evaluation throughput: episodes per minute at several concurrency levels.

    python bench/eval_throughput.py [--tasks 16] [--levels 1 4 16]

Evaluates the base `tiny` policy (recipes/tiny-cpu.yaml) on the first `--tasks` tasks of the
micro-swe held-out split, one sample each, through the whole stack (HF engine, in-loop gateway,
ReAct harness, bubblewrap sandboxes, verifier), once per concurrency level, each in a fresh
directory. Printed: wall time, episodes/minute and the ratio to concurrency 1 measured in the
same run (this machine is noisy; compare ratios).
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path

from uni_agent_core.config import load_recipe
from uni_agent_core.eval.runner import Evaluation
from uni_agent_core.eval.suites import resolve_suite

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 4, 16])
    args = parser.parse_args()
    isolation = "bubblewrap" if shutil.which("bwrap") else "none"
    recipe = load_recipe(
        ROOT / "recipes" / "tiny-cpu.yaml",
        [f"sandbox.isolation={isolation}", f"engine.max_batch_size={max(args.levels)}"],
    )
    tasks = resolve_suite("micro-swe:test", recipe, max_tasks=args.tasks)
    work = Path(tempfile.mkdtemp(prefix="bench-eval-"))
    rows = []
    try:
        for level in args.levels:
            evaluation = Evaluation(
                recipe,
                tasks,
                suite="micro-swe:test",
                k=1,
                out_dir=work / f"c{level}",
                concurrency=level,
            )
            started = time.perf_counter()
            summary = asyncio.run(evaluation.run_async())
            wall = time.perf_counter() - started
            rows.append((level, wall, summary.samples, summary.exit_reasons))
            print(f"concurrency {level}: {summary.samples} episodes in {wall:.1f}s", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    base = rows[0][2] / rows[0][1] * 60
    print()
    print(f"{len(tasks)} micro-swe held-out tasks x 1 sample, base tiny policy, {isolation}")
    header = f"{'concurrency':>12}{'wall s':>9}{'episodes':>10}{'ep/min':>9}{'ratio':>8}  exits"
    print(header)
    print("-" * len(header))
    for level, wall, samples, exits in rows:
        rate = samples / wall * 60
        print(f"{level:>12}{wall:>9.1f}{samples:>10}{rate:>9.1f}{rate / base:>7.2f}x  {exits}")


if __name__ == "__main__":
    main()
