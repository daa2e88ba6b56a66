"""The micro-swe held-out suite follows the recipe's eval levels."""

from pathlib import Path

from uni_agent_core.config import load_recipe
from uni_agent_core.eval.suites import resolve_suite

ROOT = Path(__file__).resolve().parents[3]


def test_held_out_suite_has_the_eval_levels() -> None:
    every = load_recipe(ROOT / "recipes" / "ci-smoke.yaml", ["eval.max_tasks=8"])
    trained = load_recipe(
        ROOT / "recipes" / "ci-smoke.yaml", ["eval.max_tasks=8", "eval.levels=[L0,L1]"]
    )
    assert {t.difficulty for t in resolve_suite("micro-swe:test", every)} == {
        "L0",
        "L1",
        "L2",
        "L3",
    }
    tasks = resolve_suite("micro-swe:test", trained)
    assert len(tasks) == 8 and {t.difficulty for t in tasks} == {"L0", "L1"}
