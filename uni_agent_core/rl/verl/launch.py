"""`agent-rl verl launch`: run a recipe on verl (Ray pools of GPUs or Ascend NPUs).

`plan_launch(recipe)` compiles the recipe (overrides composed against the installed verl wheel,
then verl's own start-up checks) and lays out the run's files under `runs/<name>/verl/`:

- `recipe.yaml`: the validated recipe, read by every `UniAgentLoop` worker;
- `agent_loops.yaml`: verl's agent-loop config registering `uni_agent` with that recipe;
- `data/train.parquet`, `data/val.parquet`: the task rows (`data.write_verl_dataset`);
- `checkpoints/`: verl's checkpoints (`trainer.default_local_dir`).

`--dry-run` prints the command, its environment and the composed config without writing or
running anything. Otherwise `write_launch_files` writes the files and `run_launch` runs
`python -m verl.trainer.main_ppo <overrides>` (joining `trainer.backend.ray_address` through
`RAY_ADDRESS` when set), streaming its output.
"""

from __future__ import annotations

import contextlib
import io
import os
import shlex
import subprocess
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from uni_agent_core.config.recipe import Recipe
from uni_agent_core.errors import UserError
from uni_agent_core.rl.verl.compile import (
    VERL_ENTRY_MODULE,
    VerlConfigError,
    VerlInputs,
    check_verl_batch,
    compose_verl_config,
    verl_backend,
    verl_overrides,
)
from uni_agent_core.rl.verl.names import AGENT_LOOP_CLASS, AGENT_NAME, RECIPE_ENV
from uni_agent_core.rundir.layout import (
    PUBLISHED_CURRICULUM,
    VERL,
    VERL_CHECKPOINTS,
    write_resolved_recipe,
)


class VerlLaunchError(UserError, RuntimeError):
    """The run cannot start here (the message says why and what to do)."""


@dataclass
class VerlLaunch:
    """Everything needed to start (or show) one verl run."""

    recipe: Recipe
    verl_dir: Path
    inputs: VerlInputs
    overrides: list[str]
    config: Any
    """The composed `ppo_trainer` config (OmegaConf)."""
    env: dict[str, str] = field(default_factory=dict)

    @property
    def recipe_file(self) -> Path:
        return self.verl_dir / "recipe.yaml"

    @property
    def command(self) -> list[str]:
        return [sys.executable, "-m", VERL_ENTRY_MODULE, *self.overrides]

    def shell_command(self) -> str:
        """The command line with its environment, as one would type it."""
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return f"{exports} {shlex.join(self.command)}".strip()


def model_path(recipe: Recipe) -> str:
    """The policy's model directory (a built-in policy's cache directory)."""
    from uni_agent_core.models.registry import resolve_policy

    return str(resolve_policy(recipe.policy.name).path)


def prepare_model(recipe: Recipe) -> None:
    """Make sure the policy's model directory exists (builds a built-in policy).

    Raises:
        VerlLaunchError: an `hf:<dir>` policy whose directory holds no model.
    """
    from uni_agent_core.models.registry import prepare_policy
    from uni_agent_core.models.smollm2 import PolicyUnavailableError

    try:
        prepare_policy(recipe.policy.name)
    except PolicyUnavailableError as error:
        raise VerlLaunchError(str(error)) from error


def absolute_tracking_uri(uri: str) -> str:
    """A relative `sqlite:///` path made absolute (verl's processes run elsewhere)."""
    prefix = "sqlite:///"
    if uri.startswith(prefix) and not uri[len(prefix) :].startswith("/"):
        return prefix + str(Path(uri[len(prefix) :]).resolve())
    return uri


def verl_checks(config: Any) -> None:
    """The batch rules and verl's own start-up validation, on a composed config.

    Raises:
        VerlConfigError: with verl's message.
    """
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    check_verl_batch(config)
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            # "Disabled critic as algorithm.adv_estimator != gae": expected for GRPO-style runs.
            warnings.simplefilter("ignore", UserWarning)
            validate_config(
                config=config,
                use_reference_policy=need_reference_policy(config),
                use_critic=need_critic(config),
            )
    except (AssertionError, ValueError) as exc:
        raise VerlConfigError(f"verl's start-up checks reject the config: {exc}") from exc


def plan_launch(recipe: Recipe, *, run_dir: Path) -> VerlLaunch:
    """Compile and check the recipe for verl; nothing is written.

    Raises:
        VerlConfigError: the recipe is not a verl recipe, or verl rejects the config.
    """
    backend = verl_backend(recipe)
    verl_dir = (run_dir / VERL).resolve()
    inputs = VerlInputs(
        train_files=verl_dir / "data" / "train.parquet",
        val_files=verl_dir / "data" / "val.parquet",
        agent_loop_config=verl_dir / "agent_loops.yaml",
        model_path=model_path(recipe),
        checkpoint_dir=(run_dir / VERL_CHECKPOINTS).resolve(),
    )
    overrides = verl_overrides(recipe, inputs)
    config = compose_verl_config(overrides)
    verl_checks(config)
    env = {
        RECIPE_ENV: str(verl_dir / "recipe.yaml"),
        "MLFLOW_TRACKING_URI": absolute_tracking_uri(recipe.tracking.tracking_uri),
    }
    if backend.ray_address:
        env["RAY_ADDRESS"] = backend.ray_address
    return VerlLaunch(recipe, verl_dir, inputs, overrides, config, env)


def write_launch_files(
    launch: VerlLaunch,
    *,
    published_curriculum: Path | None = None,
    task_ids: list[str] | None = None,
) -> str:
    """Write the recipe, agent-loop config and task rows; returns a one-line summary.

    Args:
        launch: the planned run.
        published_curriculum: the run's published curriculum directory (inactive tasks are
            left out of the training rows).
        task_ids: keep only these tasks (e.g. those that passed data validation).
    """
    import yaml

    from uni_agent_core.envs.sources import load_tasks
    from uni_agent_core.rl.verl.data import write_verl_dataset

    launch.verl_dir.mkdir(parents=True, exist_ok=True)
    launch.recipe_file.write_text(
        yaml.safe_dump(launch.recipe.model_dump(mode="json"), sort_keys=False)
    )
    agent_loops = [
        {"name": AGENT_NAME, "_target_": AGENT_LOOP_CLASS, "recipe_path": str(launch.recipe_file)}
    ]
    launch.inputs.agent_loop_config.write_text(yaml.safe_dump(agent_loops, sort_keys=False))
    tasks = load_tasks(launch.recipe.tasks)
    if task_ids is not None:
        wanted = set(task_ids)
        tasks = [task for task in tasks if task.instance_id in wanted]
    written = write_verl_dataset(
        tasks,
        launch.inputs.train_files.parent,
        data_source=f"agent-rl/{launch.recipe.tasks.type}",
        published_curriculum=published_curriculum,
    )
    curriculum = (
        f", curriculum v{written.curriculum_version} left out {written.skipped_by_curriculum}"
        if written.curriculum_version is not None
        else ""
    )
    return f"{written.tasks} training tasks in {written.train_files}{curriculum}"


def describe(launch: VerlLaunch) -> str:
    """The dry-run report: command, environment and the composed config."""
    import verl
    from omegaconf import OmegaConf

    trainer, verl_trainer = launch.recipe.trainer, launch.config.trainer
    devices = verl_trainer.nnodes * verl_trainer.n_gpus_per_node
    lines = [
        f"# verl {verl.__version__}: {launch.recipe.name}, v1 trainer "
        f"{verl_trainer.v1.trainer_mode} ({trainer.mode}), "
        f"{trainer.backend.device} x {devices}",
        "# command:",
        launch.shell_command(),
        "# composed config (verl ppo_trainer + the overrides above):",
        OmegaConf.to_yaml(launch.config),
    ]
    return "\n".join(lines)


def accelerator_problem(launch: VerlLaunch) -> str | None:
    """Why this machine cannot start the run locally (None when it can, or Ray is remote)."""
    if "RAY_ADDRESS" in launch.env:
        return None
    device = launch.recipe.trainer.backend.device
    import torch

    npu = getattr(torch, "npu", None)  # only with torch_npu (Ascend) installed
    available = torch.cuda.is_available() if device == "cuda" else bool(npu and npu.is_available())
    if available:
        return None
    return (
        f"trainer.backend.device is {device} but this machine has none and no Ray cluster is "
        "set (trainer.backend.ray_address); run it on the gpu/ascend work pool "
        "(prefect deployment run agent-rl/train-gpu) or use --dry-run to inspect the config"
    )


def run_launch(launch: VerlLaunch) -> int:
    """Run verl's entry point in the foreground; returns its exit code."""
    env = {**os.environ, **launch.env}
    print(f"launching: {launch.shell_command()}", flush=True)
    return subprocess.run(launch.command, env=env, check=False).returncode


def launch_recipe(
    recipe: Recipe,
    *,
    run_dir: Path,
    dry_run: bool = False,
    task_ids: list[str] | None = None,
    echo: Any = print,
) -> int:
    """Plan, then print (`dry_run`) or write the files and run verl; returns the exit code.

    Raises:
        VerlConfigError: verl rejects the compiled config.
        VerlLaunchError: no accelerator here and no Ray cluster to join.
    """
    launch = plan_launch(recipe, run_dir=run_dir)
    if dry_run:
        echo(describe(launch))
        return 0
    problem = accelerator_problem(launch)
    if problem is not None:
        raise VerlLaunchError(problem)
    prepare_model(recipe)
    write_resolved_recipe(recipe, run_dir)
    echo(
        write_launch_files(
            launch,
            published_curriculum=run_dir / PUBLISHED_CURRICULUM,
            task_ids=task_ids,
        )
    )
    return run_launch(launch)
