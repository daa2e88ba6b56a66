"""The pipeline's first act: a recipe's `policy.dtype: auto` made concrete for this host.

`with_chosen_precision(recipe, run_dir, echo)` resolves `auto` once per run
(`models/precision_choice.py`: measured on this CPU, or read from the host's cache), prints the
choice with its measured rates and reason, writes them to `<run dir>/precision.json` (training
logs them to MLflow as `precision.*`) and returns the recipe with the concrete dtype: every
stage after it, the resolved recipe and the warm start's key see that dtype, not `auto`. An
explicit `bfloat16` on a CPU where it was measured slower than float32 runs as asked, with a
warning that gives the ratio.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.inference.builder import resolve_device
from uni_agent_core.models.precision_choice import AUTO, choose_dtype
from uni_agent_core.rundir.layout import PRECISION


def with_chosen_precision(recipe: Recipe, run_dir: Path, echo: Callable[[str], None]) -> Recipe:
    """`recipe` with its `auto` dtype chosen for this host (see the module docstring)."""
    device = resolve_device(recipe.trainer.backend.device)
    asked = recipe.policy.dtype
    if asked == AUTO:
        choice = choose_dtype(recipe.policy.name, device, echo=echo)
        echo(choice.summary())
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / PRECISION).write_text(json.dumps(choice.to_json(), indent=1) + "\n")
        policy = recipe.policy.model_copy(update={"dtype": choice.dtype})
        return recipe.model_copy(update={"policy": policy})
    if asked == "bfloat16" and device == "cpu":
        choice = choose_dtype(recipe.policy.name, device, echo=echo)
        ratio = choice.speedup("bfloat16")
        if ratio is not None and ratio < 1:
            echo(
                f"warning: policy.dtype is bfloat16, which runs at {ratio:.2f}x float32's rate on "
                f"this CPU ({choice.cpu}); policy.dtype: auto would choose {choice.dtype}"
            )
    return recipe
