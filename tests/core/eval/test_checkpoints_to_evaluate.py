"""Which checkpoints of a run the flow scores: every n-th, the newest always."""

from pathlib import Path

import pytest

from uni_agent_core.config import load_recipe
from uni_agent_core.eval.evaluate import checkpoints_to_evaluate, every_nth

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("count", "every", "chosen"),
    [(3, 1, [1, 2, 3]), (5, 2, [2, 4, 5]), (4, 2, [2, 4]), (2, 5, [2]), (0, 1, [])],
)
def test_every_nth_keeps_the_last_always(count, every, chosen) -> None:
    assert every_nth(list(range(1, count + 1)), every) == chosen


def test_a_run_without_a_complete_checkpoint_is_a_clear_error(tmp_path) -> None:
    recipe = load_recipe(ROOT / "recipes" / "ci-smoke.yaml")
    with pytest.raises(ValueError, match="no complete checkpoint under .*; train first"):
        checkpoints_to_evaluate(recipe, tmp_path)
