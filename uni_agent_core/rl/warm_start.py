"""The warm-start stage of a run: gold trajectories -> supervised training -> a policy to RL from.

`run_warm_start(recipe, run_dir, task_ids)` runs the recipe's `warm_start` section
(`config/warm_start.py`) with `rl/sft.py`: the gold episodes of the training tasks through the
real stack, then the NLL fit of their sampled tokens. It writes `<run dir>/warm_start/`:

- `policy/`: the warm-started Hugging Face directory; `warm_started(recipe, result)` is the
  recipe whose policy it is (difficulty estimation, RL and evaluation start from it);
- `report.json`: trajectories, epochs, the NLL per epoch and per optimizer step, and the
  seconds of gold rollouts and of fitting (training time, reported apart from RL);
- `nll.png`: the NLL curve; `trajectories.jsonl`: the gold episodes it fitted, decoded.

With tracking on, all of it goes to the run's MLflow run (created here, reused by training
through `mlflow_run_id`). `report.json` also holds the stage's `key`: what the warm-started
weights depend on (the recipe's `policy` section and the content of an `hf:` policy, the
`warm_start` section, the harness and the tool-call format that shape the gold episodes'
tokens, the seed and the ids of the tasks fitted). A finished stage whose key
matches is reused as it is, so a rerun of the flow after a crash goes straight on to RL; one
made with other settings is deleted (one line says which differ) and the stage runs again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.errors import UserError
from uni_agent_core.rundir.checkpoint import policy_weights_digest
from uni_agent_core.rundir.layout import WARM_START
from uni_agent_core.types import TaskSpec, Trajectory

REPORT = "report.json"


class WarmStartError(UserError, ValueError):
    """The recipe's warm start cannot run on its tasks; the message says which setting to change."""


@dataclass
class WarmStartResult:
    """A finished warm start."""

    policy: str
    """The policy name of the warm-started weights (`hf:<dir>`)."""
    directory: Path
    report: dict[str, Any]
    mlflow_run_id: str | None
    reused: bool
    """True when an earlier run's finished stage was taken from disk."""


def warm_start_dir(run_dir: Path) -> Path:
    return run_dir / WARM_START


def warm_started(recipe: Recipe, result: WarmStartResult) -> Recipe:
    """The recipe with its policy replaced by the warm-started one."""
    updated = recipe.model_copy(deep=True)
    updated.policy.name = result.policy
    return updated


def fitted_tasks(recipe: Recipe, tasks: Sequence[TaskSpec]) -> list[TaskSpec]:
    """The tasks whose gold episodes the warm start fits: the first `warm_start.tasks`."""
    count = recipe.warm_start.tasks
    return list(tasks)[:count] if count else list(tasks)


def rl_tasks(recipe: Recipe, tasks: Sequence[TaskSpec]) -> list[TaskSpec]:
    """The tasks that difficulty estimation and RL take after the warm start
    (`warm_start.rl_tasks`): all of them, or those the warm start did not fit.

    Raises:
        WarmStartError: `rest` leaves no task (a `ValueError`).
    """
    if not recipe.warm_start.enabled or recipe.warm_start.rl_tasks == "all":
        return list(tasks)
    rest = list(tasks)[len(fitted_tasks(recipe, tasks)) :]
    if not rest:
        raise WarmStartError(
            f"warm_start.rl_tasks: rest leaves RL no task: all {len(tasks)} valid tasks are "
            f"among the first warm_start.tasks ({recipe.warm_start.tasks}); raise tasks.n or "
            "lower warm_start.tasks"
        )
    return rest


def warm_start_key(recipe: Recipe, tasks: Sequence[TaskSpec]) -> dict[str, Any]:
    """What a warm start's weights depend on: the policy (its section, and an `hf:` policy's
    content), the `warm_start` section (less `rl_tasks`, which only says what RL takes after
    it), the harness and the gateway's tool-call format (they make the gold episodes' tokens),
    the seed and the ids of the tasks it fits."""
    return {
        "policy": recipe.policy.model_dump(mode="json"),
        "policy_sha256": policy_weights_digest(recipe.policy.name),
        "warm_start": recipe.warm_start.model_dump(mode="json", exclude={"rl_tasks"}),
        "harness": recipe.harness.model_dump(mode="json"),
        "tool_parser": recipe.gateway.tool_parser,
        "seed": recipe.seed,
        "tasks": [task.instance_id for task in tasks],
    }


def _finished(
    directory: Path, key: dict[str, Any], echo: Callable[[str], None]
) -> WarmStartResult | None:
    """The finished stage in `directory` if it was made with `key`; a finished one made with
    another key is deleted (it would be reused under a name it no longer deserves)."""
    report_path = directory / REPORT
    if not report_path.is_file() or not (directory / "policy" / "config.json").is_file():
        return None
    report = json.loads(report_path.read_text())
    stored = report.get("key") or {}
    if stored != key:
        changed = sorted(k for k in {*key, *stored} if stored.get(k) != key.get(k))
        echo(
            f"warm start: {directory} was made with other {', '.join(changed)}; "
            "deleting it and warm-starting again"
        )
        shutil.rmtree(directory)
        return None
    return WarmStartResult(
        f"hf:{(directory / 'policy').resolve()}",
        directory,
        report,
        report.get("mlflow_run_id"),
        reused=True,
    )


def _tracked(done: WarmStartResult, recipe: Recipe, echo: Callable[[str], None]) -> WarmStartResult:
    """A reused warm start whose MLflow run is in the recipe's tracking store: when the run
    it recorded is gone (the store was deleted, or the recipe tracks elsewhere), its report is
    logged again into a new run, which training then continues."""
    from uni_agent_core.tracking.mlflow_tracker import run_exists

    recorded = done.mlflow_run_id
    if recorded is not None and run_exists(recipe.tracking, recorded):
        return done
    run_id = _log(recipe, done.directory, done.report, None)
    if recorded is not None:
        echo(
            f"warm start: its MLflow run {recorded} is not in {recipe.tracking.tracking_uri}; "
            f"logged it again as run {run_id}"
        )
    return dataclasses.replace(done, mlflow_run_id=run_id)


def _write_trajectories(trajectories: Sequence[Trajectory], tokenizer: Any, path: Path) -> None:
    with path.open("w") as handle:
        for trajectory in trajectories:
            row = {
                "session_id": trajectory.session_id,
                "prompt_tokens": len(trajectory.prompt_ids),
                "response_tokens": len(trajectory.response_ids),
                "sampled_tokens": trajectory.trainable_tokens,
                "text": tokenizer.decode(trajectory.prompt_ids + trajectory.response_ids),
            }
            handle.write(json.dumps(row) + "\n")


def _log(recipe: Recipe, directory: Path, report: dict[str, Any], run_id: str | None) -> str:
    """Log the finished stage in `directory` to MLflow and record the run in its report (a
    reuse continues it); returns the run id."""
    from uni_agent_core.tracking.mlflow_tracker import MlflowTracker

    tracker = MlflowTracker(recipe.tracking, run_name=recipe.name, run_id=run_id)
    tracker.log_params({"warm_start": recipe.warm_start.model_dump(mode="json")})
    for step, loss in enumerate(report["loss_by_step"], start=1):
        tracker.log_values(step, {"warm_start/nll": loss})
    tracker.log_values(
        0,
        {
            "warm_start/trajectories": float(report["trajectories"]),
            "warm_start/gold_s": report["gold_s"],
            "warm_start/fit_s": report["fit_s"],
            "warm_start/final_nll": report["loss_by_epoch"][-1],
        },
    )
    for name in (REPORT, "nll.png", "trajectories.jsonl"):
        tracker.log_artifact(directory / name, "warm_start")
    tracker.finish()
    report["mlflow_run_id"] = tracker.run_id  # where the stage is logged, for its reuse
    (directory / REPORT).write_text(json.dumps(report, indent=2))
    return tracker.run_id


def run_warm_start(
    recipe: Recipe,
    run_dir: Path,
    tasks: Sequence[TaskSpec],
    *,
    track: bool = True,
    echo: Callable[[str], None] = print,
) -> WarmStartResult:
    """Warm-start the recipe's policy on the gold episodes of `tasks` (or reuse a finished one).

    Raises:
        WarmStartError: none of the tasks yields a resolved gold episode (a `ValueError`).
    """
    from uni_agent_core.host_memory import release_host_memory
    from uni_agent_core.inference.builder import resolve_device
    from uni_agent_core.models import load_policy
    from uni_agent_core.models.precision_choice import resolve_dtype
    from uni_agent_core.rl.sft import gold_trajectories, save_policy, supervised_warm_start
    from uni_agent_core.tracking.plots import plot_curves

    directory = warm_start_dir(run_dir)
    config = recipe.warm_start
    chosen = fitted_tasks(recipe, tasks)
    key = warm_start_key(recipe, chosen)
    done = _finished(directory, key, echo)
    if done is not None:
        echo(f"warm start: reusing {directory} ({done.report['trajectories']} trajectories)")
        return _tracked(done, recipe, echo) if track else done
    directory.mkdir(parents=True, exist_ok=True)
    clock = time.perf_counter()
    gold = asyncio.run(gold_trajectories(recipe, chosen, echo=echo))
    gold_s = time.perf_counter() - clock
    if not gold:
        raise WarmStartError(
            f"warm_start: none of the {len(chosen)} tasks gave a resolved gold episode (only "
            "tasks whose gold patch changes one block of lines of one file have gold actions); "
            "turn warm_start off"
        )
    # float32 master weights; policy.dtype is the compute dtype (rl/precision.py). The fit runs
    # where the RL trainer will (a GPU run once fitted on the host's cores: 217 s, not seconds).
    device = resolve_device(recipe.trainer.backend.device)
    model, tokenizer = load_policy(
        recipe.policy.name,
        dtype="float32",
        device=device,
        chat_template=recipe.policy.chat_template,
    )
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    fitted = supervised_warm_start(
        model,
        gold,
        epochs=config.epochs,
        lr=config.lr,
        micro_batch_tokens=config.micro_batch_tokens,
        pad_token_id=pad,
        seed=recipe.seed,
        compute_dtype=resolve_dtype(recipe.policy.dtype, recipe.policy.name, device),
        echo=echo,
    )
    save_policy(model, tokenizer, directory / "policy")
    del model
    release_host_memory()
    _write_trajectories(gold, tokenizer, directory / "trajectories.jsonl")
    steps = list(enumerate(fitted.loss_by_step, start=1))
    plot_curves(
        {recipe.name: {"warm_start/nll": steps}},
        ["warm_start/nll"],
        directory / "nll.png",
        f"{recipe.name}: warm start on {fitted.trajectories} gold trajectories",
    )
    report: dict[str, Any] = {
        "tasks": len(chosen),
        "trajectories": fitted.trajectories,
        "epochs": fitted.epochs,
        "loss_by_epoch": fitted.loss_by_epoch,
        "loss_by_step": fitted.loss_by_step,
        "gold_s": gold_s,
        "fit_s": fitted.seconds,
        "mlflow_run_id": None,
        "key": key,
    }
    (directory / REPORT).write_text(json.dumps(report, indent=2))
    run_id = _log(recipe, directory, report, None) if track else None
    echo(
        f"warm start: {fitted.trajectories} gold trajectories, nll "
        f"{fitted.loss_by_epoch[0]:.3f} -> {fitted.loss_by_epoch[-1]:.3f} in "
        f"{(gold_s + fitted.seconds) / 60:.1f} min"
    )
    return WarmStartResult(
        f"hf:{(directory / 'policy').resolve()}", directory, report, run_id, reused=False
    )
