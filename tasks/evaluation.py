"""Prefect task: evaluate the newest checkpoint on the recipe's eval suite (thin)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from prefect import task

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.eval.commands import resolve_checkpoint
from uni_agent_core.eval.report import eval_metrics
from uni_agent_core.eval.runner import Evaluation
from uni_agent_core.eval.suites import resolve_suite

SUITE_NAMES = {"micro_swe": "micro-swe:test", "swe_bench_verified": "swe-bench-verified"}


@task(name="evaluate-checkpoint", retries=1, retry_delay_seconds=10)
def evaluate(recipe: Recipe, run_dir: Path, checkpoint: str = "latest") -> dict:
    """Resumable evaluation (a retry skips finished samples); returns `eval/...` metrics."""
    suite = SUITE_NAMES[recipe.eval.suite]
    source = resolve_checkpoint(recipe, checkpoint, run_dir)
    tasks = resolve_suite(suite, recipe)
    label = source.path.name if source else "base"
    out = run_dir / "eval" / f"{suite.replace(':', '-')}-{label}"
    evaluation = Evaluation(
        recipe, tasks, suite=suite, k=recipe.eval.k, out_dir=out, checkpoint=source
    )
    summary = asyncio.run(evaluation.run_async())
    print(f"evaluate-checkpoint: {suite} {label}: pass@1 {summary.pass_at_1:.3f}")
    return {
        "report_dir": str(out),
        "step": source.step if source else 0,
        "metrics": eval_metrics(summary),
    }
