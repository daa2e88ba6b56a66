"""Where each file of a run lives: the one module that knows the run directory's layout.

A run directory (`runs/<recipe name>` unless a command names another) holds:

| path | written by |
|---|---|
| `resolved_recipe.yaml` | the run, at start: the recipe after overrides and defaults |
| `precision.json` | the pipeline, at start: what `policy.dtype: auto` chose, measured, and why |
| `sizing.json` | the pipeline, at start (a recipe with `host_sizing`): the rate and tier taken |
| `metrics.jsonl` | the step loop, one JSON line per step (rewound at a run's start: `rewind.py`) |
| `curves.png` | the run, at the end (reward, pass rate, loss, ...) |
| `trajectories/` | the step loop, sampled episodes per step |
| `checkpoints/step-*/` | the trainer (`checkpoint.py`) |
| `history.sqlite` | every rollout's attempt record (curriculum) |
| `warm_start/` | the warm start (policy, NLL curve, trajectories) |
| `validation/` | data validation (`validation.json`, `validation.md`) |
| `curriculum/` | Best-of-N difficulty; `published/` the curriculum versions |
| `eval/<suite>-<checkpoint>/` | evaluations |
| `verl/` | a verl launch's working files |

The recipe may name its own checkpoint directory or history file; those are kept.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from uni_agent_core.config.recipe import RUNS_DIR, Recipe

RESOLVED_RECIPE = "resolved_recipe.yaml"
PRECISION = "precision.json"
SIZING = "sizing.json"
METRICS = "metrics.jsonl"
CURVES = "curves.png"
TRAJECTORIES = "trajectories"
WARM_START = "warm_start"
VALIDATION = "validation"
CURRICULUM = "curriculum"
PUBLISHED_CURRICULUM = "curriculum/published"
EVAL = "eval"
VERL = "verl"
VERL_CHECKPOINTS = "verl/checkpoints"
"""verl's `default_local_dir`: `global_step_<N>/actor/` per checkpoint and its tracker file."""
SERVED = "served"
"""Checkpoints made servable (verl's merged into Hugging Face directories) and server logs."""
HISTORY_SNAPSHOT = "history-snapshot.sqlite"


def default_run_dir(recipe: Recipe) -> Path:
    """`runs/<recipe name>`."""
    return Path(RUNS_DIR) / recipe.name


def _in_run_dir(configured: Path | None, recipe: Recipe, run_dir: Path | None, name: str) -> Path:
    """A recipe path that defaults to `runs/<name>/<name>`: moved under `run_dir` when the recipe
    left the default, kept when the recipe names its own."""
    run_dir = run_dir or default_run_dir(recipe)
    if configured is None or configured == default_run_dir(recipe) / name:
        return run_dir / name
    return Path(configured)


def history_path(recipe: Recipe, run_dir: Path | None = None) -> Path:
    """The run's attempt history: the recipe's path, or `<run dir>/history.sqlite`."""
    return _in_run_dir(recipe.curriculum.history_path, recipe, run_dir, "history.sqlite")


def checkpoint_dir(recipe: Recipe, run_dir: Path | None = None) -> Path:
    """The run's checkpoints: the recipe's directory, or `<run dir>/checkpoints`."""
    return _in_run_dir(recipe.trainer.checkpoint_dir, recipe, run_dir, "checkpoints")


def write_resolved_recipe(recipe: Recipe, run_dir: Path) -> Path:
    """Write `<run dir>/resolved_recipe.yaml`: the recipe as the run uses it, after `--set`
    overrides, pool profiles and defaults, with the checkpoint directory and attempt history
    this run directory gives them; `load_recipe` reads it back."""
    run_dir.mkdir(parents=True, exist_ok=True)
    used = recipe.model_copy(deep=True)
    used.trainer.checkpoint_dir = checkpoint_dir(recipe, run_dir)
    used.curriculum.history_path = history_path(recipe, run_dir)
    target = run_dir / RESOLVED_RECIPE
    text = yaml.safe_dump(used.model_dump(mode="json"), sort_keys=False)
    target.write_text(f"# the recipe {recipe.name!r} as this run resolved it\n{text}")
    return target
