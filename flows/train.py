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

Parameters are small (recipe path, overrides, resume); the recipe is validated first, so a bad
path or an invalid recipe fails the run at once with the validation message, before any stage
runs. Every stage is a thin Prefect task over `uni_agent_core`; training and evaluation resume
from what is on disk, so rerunning the deployment after a crash continues the run.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from prefect import flow
from prefect.artifacts import create_markdown_artifact
from pydantic import BaseModel, Field

from blocks import apply_blocks
from tasks.curriculum import estimate_difficulty, learnable_tasks
from tasks.data import validate_data
from tasks.evaluation import evaluate
from tasks.serving import serve, stop
from tasks.tracking import before_metrics, heldout_curve, log_run
from tasks.training import train as train_task
from tasks.warm_start import warm_start
from uni_agent_core.config.pools import load_recipe_for_pool
from uni_agent_core.config.recipe import Recipe
from uni_agent_core.eval.evaluate import checkpoints_to_evaluate, every_nth
from uni_agent_core.eval.paired import compare_evaluations
from uni_agent_core.rl.verl.merge import find_verl_checkpoints
from uni_agent_core.rl.warm_start import rl_tasks
from uni_agent_core.rundir.layout import VERL_CHECKPOINTS, default_run_dir
from uni_agent_core.tracking.mlflow_tracker import metric_name
from uni_agent_core.tracking.runs import before_after_lines, curve_line, run_episode_pages
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
    valid_tasks = validate_data(loaded, run_dir)
    on_verl = loaded.trainer.backend.type == "verl"
    warmed = None
    if loaded.warm_start.enabled:
        warmed = warm_start(loaded, run_dir, valid_tasks)
        valid_tasks = rl_tasks(loaded, valid_tasks)
        loaded = loaded.model_copy(deep=True)
        loaded.policy.name = warmed["policy"]
    if on_verl:
        return _train_on_verl(loaded, run_dir, valid_tasks, command)
    estimate_difficulty(loaded, run_dir, valid_tasks)
    evaluating = loaded.eval.enabled
    before = None
    if evaluating and loaded.eval.before_training:
        # traced into the warm start's run, which training continues (none: not traced)
        before = evaluate(
            loaded, run_dir, checkpoint="none", trace_run=warmed and warmed["mlflow_run_id"]
        )
    trained = train_task(
        loaded,
        run_dir,
        valid_tasks,
        mlflow_run_id=warmed and warmed["mlflow_run_id"],
        launch_command=command,
    )
    evaluations = []
    if evaluating:
        for checkpoint in checkpoints_to_evaluate(loaded, run_dir):
            trace_run = trained["mlflow_run_id"]
            evaluations.append(evaluate(loaded, run_dir, str(checkpoint), trace_run=trace_run))
    scores = evaluations[-1] if evaluations else None
    if scores is not None:
        log_run(loaded, run_dir, trained["mlflow_run_id"], scores, before, curve=evaluations)
    summary = {
        "run_dir": str(run_dir),
        **trained,
        "eval": scores and scores["metrics"],
        "eval_before": before and before["metrics"],
        "warm_start": warmed and warmed["report"],
    }
    lines = [
        f"# agent-rl run `{loaded.name}`",
        "",
        f"- run directory: `{run_dir}`",
        f"- MLflow run: `{trained['mlflow_run_id']}`",
    ]
    first, count = trained["start_step"], trained["steps"]
    lines.append(f"- steps trained: {first + 1}..{first + count} ({trained['backend']})")
    if warmed is not None:
        report = warmed["report"]
        lines.append(
            f"- warm start: {report['trajectories']} gold trajectories x {report['epochs']} "
            f"epochs, nll {report['loss_by_epoch'][0]:.3f} -> {report['loss_by_epoch'][-1]:.3f} "
            f"({(report['gold_s'] + report['fit_s']) / 60:.1f} min)"
        )
    summary["heldout_curve"] = heldout_curve(before, evaluations)
    if len(summary["heldout_curve"]) > 1:
        lines.append(f"- {curve_line(summary['heldout_curve'])}")
    if scores is not None and before is not None:
        comparison = compare_evaluations(Path(before["report_dir"]), Path(scores["report_dir"]))
        summary["before_after"] = {**comparison.metrics(), "verdict": comparison.verdict}
        logged = {**scores["metrics"], **before_metrics(before["metrics"]), **comparison.metrics()}
        shown = before_after_lines({metric_name(k): v for k, v in logged.items()})
        lines += ["", *(f"- {line}" if line and line[0] != "|" else line for line in shown), ""]
    if scores is not None:
        lines += [f"- {key}: {value:.3f}" for key, value in sorted(scores["metrics"].items())]
    lines += [f"- {line}" for line in run_episode_pages(loaded.tracking, trained["mlflow_run_id"])]
    create_markdown_artifact("\n".join(lines), key="agent-rl-summary")
    return summary


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
    evaluations = []
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
        f"- steps trained: {trained['start_step'] + 1}..{trained['start_step'] + trained['steps']}",
        f"- served: {', '.join(sorted({v for k, v in repro.items() if k.endswith('.label')}))}",
        *(f"- {line}" for line in run_episode_pages(recipe.tracking, run_id)),
    ]
    for evaluation in evaluations:
        lines.append(
            f"- checkpoint step {evaluation['step']}: pass@1 "
            f"{evaluation['metrics']['eval/pass@1']:.3f}"
        )
    create_markdown_artifact("\n".join(lines), key="agent-rl-summary")
    return {
        "run_dir": str(run_dir),
        **trained,
        "mlflow_run_id": run_id,
        "eval": last and last["metrics"],
        "eval_before": before and before["metrics"],
        "evaluations": [e["metrics"] for e in evaluations],
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
