"""The `agent-rl` flow (deployment `train`): validate data -> warm start (when the recipe has
one) -> estimate difficulty -> evaluate the starting policy (`eval.before_training`) -> train
-> evaluate the checkpoints -> log to MLflow. With both evaluations, the summary states
the paired pass@1 delta, its 95% bootstrap interval and whether it is beyond noise, with the
exit reasons before and after (`eval/paired.py`); MLflow gets the same and the flip table.

On verl recipes the same five stages run around verl's trainer, which starts its own rollout
servers inside its run: Best-of-N (and the `before_training` evaluation) on the base policy
served by the serve stage (`tasks/serving.py`: vLLM, SGLang or vLLM-Ascend, as the pool profile
says); verl trained on the tasks Best-of-N kept; each chosen checkpoint (`eval.every_n_checkpoints`,
the last always) merged by verl's model merger, served and evaluated; everything logged into
verl's MLflow run, with what was served as `repro.served.*` params. Servers stop in `finally`
blocks, so a failing stage never leaves them running.

The embedded sequence is `uni_agent_core.pipeline.run_pipeline`, the one `agent-rl train`
follows: here its stages are the Prefect tasks (`PrefectStages`), so each shows as a task run.
verl's sequence (`_train_on_verl`) shares its first stages (`prepare_training`); it stays here
because its stages run on servers the serve stage starts and stops around them.

Parameters are small (recipe path, overrides, resume); the recipe is validated first, so a bad
path or an invalid recipe fails the run at once with the validation message, before any stage
runs. Every stage is a thin Prefect task over `uni_agent_core`; training and evaluation resume
from what is on disk, so rerunning the deployment after a crash continues the run.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from prefect import flow
from prefect.artifacts import create_markdown_artifact
from pydantic import BaseModel, Field

from blocks import apply_blocks
from tasks.curriculum import estimate_difficulty, learnable_tasks
from tasks.data import validate_data
from tasks.evaluation import evaluate
from tasks.serving import serve, stop
from tasks.tracking import log_run
from tasks.training import train as train_task
from tasks.warm_start import warm_start
from uni_agent_core.config.pools import load_recipe_for_pool
from uni_agent_core.config.recipe import Recipe
from uni_agent_core.eval.evaluate import every_nth
from uni_agent_core.pipeline.results import Evaluated, Trained
from uni_agent_core.pipeline.run import prepare_training, run_pipeline
from uni_agent_core.pipeline.summary import summary_lines, summary_record
from uni_agent_core.rl.verl.merge import find_verl_checkpoints
from uni_agent_core.rl.warm_start import WarmStartResult
from uni_agent_core.rundir.layout import VERL_CHECKPOINTS, default_run_dir
from uni_agent_core.tracking.runs import run_episode_pages
from uni_agent_core.types import TaskSpec


def launch_command(parameters: dict) -> str:
    """The command that reproduces this flow run: the deployment run with its parameters, or
    the direct `python -m flows.train` call when the flow runs without a deployment."""
    from prefect.runtime import deployment, flow_run

    given = {k: v for k, v in parameters.items() if v is not None}
    if deployment.name:
        args = " ".join(
            f"--param {shlex.quote(f'{k}={v if isinstance(v, str) else json.dumps(v)}')}"
            for k, v in given.items()
        )
        return f"prefect deployment run agent-rl/{deployment.name} {args} (flow run {flow_run.id})"
    overrides = " ".join(shlex.quote(o) for o in given.get("overrides") or [])
    return f"python -m flows.train {shlex.quote(given['recipe'])} {overrides}".strip()


class TrainParameters(BaseModel):
    """What a run of the deployment takes."""

    recipe: str = Field(description="Recipe YAML path (relative to the project root).")
    overrides: list[str] = Field(default_factory=list, description="KEY=VALUE recipe overrides.")
    resume: bool = Field(
        default=True,
        description="Continue from the newest complete checkpoint (overrides trainer.resume).",
    )


class PrefectStages:
    """The pipeline's stages as this module's Prefect tasks (`uni_agent_core.pipeline.Stages`):
    each call is a task run of the flow run."""

    def validate_data(self, recipe: Recipe, run_dir: Path) -> list[TaskSpec]:
        return validate_data(recipe, run_dir)

    def warm_start(self, recipe: Recipe, run_dir: Path, tasks: list[TaskSpec]) -> WarmStartResult:
        return warm_start(recipe, run_dir, tasks)

    def estimate_difficulty(
        self, recipe: Recipe, run_dir: Path, tasks: list[TaskSpec]
    ) -> Path | None:
        return estimate_difficulty(recipe, run_dir, tasks)

    def evaluate(
        self, recipe: Recipe, run_dir: Path, checkpoint: str, trace_run: str | None
    ) -> Evaluated:
        return evaluate(recipe, run_dir, checkpoint=checkpoint, trace_run=trace_run)

    def train(
        self,
        recipe: Recipe,
        run_dir: Path,
        tasks: list[TaskSpec],
        mlflow_run_id: str | None,
        stop_after_steps: int | None,
        launch_command: str | None,
    ) -> Trained:
        return train_task(
            recipe,
            run_dir,
            tasks,
            mlflow_run_id=mlflow_run_id,
            launch_command=launch_command,
            stop_after_steps=stop_after_steps,
        )

    def log_run(
        self,
        recipe: Recipe,
        run_dir: Path,
        mlflow_run_id: str | None,
        evaluation: Evaluated,
        before: Evaluated | None,
        curve: Sequence[Evaluated],
    ) -> str | None:
        return log_run(recipe, run_dir, mlflow_run_id, evaluation, before, curve=list(curve))


@flow(name="agent-rl", log_prints=True)
def train(
    recipe: str,
    overrides: list[str] | None = None,
    resume: bool = True,
    inference_block: str | None = None,
    sandbox_block: str | None = None,
    tracking_block: str | None = None,
    credentials_block: str | None = None,
) -> dict:
    """Train a recipe end to end; returns the MLflow run id, final metrics and eval scores.

    The `*_block` parameters name saved agent-rl blocks (`blocks/`) whose settings override
    the recipe's engine, sandbox and tracking sections and whose secrets are exported.
    """
    params = TrainParameters(recipe=recipe, overrides=overrides or [], resume=resume)
    command = launch_command(
        {
            "recipe": recipe,
            "overrides": overrides,
            "resume": resume,
            "inference_block": inference_block,
            "sandbox_block": sandbox_block,
            "tracking_block": tracking_block,
            "credentials_block": credentials_block,
        }
    )
    extra = ["trainer.resume=auto" if params.resume else "trainer.resume=never"]
    extra += apply_blocks(
        inference=inference_block,
        sandbox=sandbox_block,
        tracking=tracking_block,
        credentials=credentials_block,
    )
    loaded = load_recipe_for_pool(
        params.recipe, [*params.overrides, *extra]
    )  # fails fast on bad input
    run_dir = default_run_dir(loaded)
    print(f"agent-rl: recipe {loaded.name}, run directory {run_dir}")
    stages = PrefectStages()
    if loaded.trainer.backend.type == "verl":
        prepared = prepare_training(loaded, run_dir, stages)
        return _train_on_verl(prepared.recipe, run_dir, prepared.tasks, command)
    result = run_pipeline(loaded, run_dir, stages, launch_command=command)
    lines = [f"# agent-rl run `{result.recipe.name}`", "", *summary_lines(result)]
    create_markdown_artifact("\n".join(lines), key="agent-rl-summary")
    return summary_record(result)


def _train_on_verl(recipe: Recipe, run_dir: Path, tasks: list[TaskSpec], command: str) -> dict:
    """The five stages around verl's trainer, each served policy stopped however a stage ends."""
    repro: dict[str, str] = {}
    before = None
    base = serve(recipe, run_dir, "none")
    try:
        estimate_difficulty(base.recipe, run_dir, tasks)
        if recipe.eval.enabled and recipe.eval.before_training:
            before = evaluate(base.recipe, run_dir, served_as=["base", 0])
        repro |= base.repro("base")
    finally:
        stop(base)
    kept = learnable_tasks(recipe, run_dir, tasks)
    trained = train_task(recipe, run_dir, kept, mlflow_run_id=None, launch_command=command)
    evaluations: list[Evaluated] = []
    if recipe.eval.enabled:
        for label, checkpoint in chosen_verl_checkpoints(recipe, run_dir):
            served = serve(recipe, run_dir, str(checkpoint))
            try:
                step = served.model.version
                evaluations.append(evaluate(served.recipe, run_dir, served_as=[label, step]))
                repro |= served.repro(label)
            finally:
                stop(served)
    last = evaluations[-1] if evaluations else None
    run_id = log_run(recipe, run_dir, None, last, before, repro)
    lines = [
        f"# agent-rl run `{recipe.name}` (verl)",
        "",
        f"- run directory: `{run_dir}`",
        f"- MLflow run: `{run_id}` (verl's own, with the stages' evaluations)",
        f"- steps trained: {trained.start_step + 1}..{trained.last_step}",
        f"- served: {', '.join(sorted({v for k, v in repro.items() if k.endswith('.label')}))}",
        *(f"- {line}" for line in run_episode_pages(recipe.tracking, run_id)),
    ]
    for evaluation in evaluations:
        lines.append(
            f"- checkpoint step {evaluation.step}: pass@1 {evaluation.metrics['eval/pass@1']:.3f}"
        )
    create_markdown_artifact("\n".join(lines), key="agent-rl-summary")
    return {
        "run_dir": str(run_dir),
        **asdict(trained),
        "mlflow_run_id": run_id,
        "eval": last.metrics if last is not None else None,
        "eval_before": before.metrics if before is not None else None,
        "evaluations": [e.metrics for e in evaluations],
        "served": repro,
    }


def chosen_verl_checkpoints(recipe: Recipe, run_dir: Path) -> list[tuple[str, Path]]:
    """`(label, actor dir)` of the verl checkpoints to evaluate: every `eval.every_n_checkpoints`-th
    of this run's, and the last always."""
    found = find_verl_checkpoints(run_dir / VERL_CHECKPOINTS)
    chosen = every_nth(found, recipe.eval.every_n_checkpoints)
    return [(f"verl-step-{step}", actor) for step, actor in chosen]


if __name__ == "__main__":
    import sys

    train(recipe=sys.argv[1], overrides=sys.argv[2:])
