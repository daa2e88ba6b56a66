"""Finding a recipe's newest MLflow run: where it is, what it scored, how to look at it.

`latest_run(recipe)` reads the recipe's tracking URI and experiment and returns the newest run
named after the recipe; `describe_run` renders its id, status, final metrics (with the held-out
before -> after RL comparison of `before_after_lines`), artifact location and the commands that
open the MLflow and Prefect UIs (`agent-rl runs latest`, `make demo`);
`episode_pages` says where a run's episodes are read: its traces in the MLflow UI and its
token-level views (`docs/viewer.md`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from uni_agent_core.config.evaluation import TrackingConfig
from uni_agent_core.config.recipe import Recipe
from uni_agent_core.errors import UserError

SUMMARY_METRICS = ("train/reward_mean", "train/pass_rate", "eval/pass_at_1", "eval/avg_at_")
"""Final metrics shown first (MLflow names, or their prefixes); the others follow by name."""


class RunNotFoundError(UserError, LookupError):
    """The recipe's experiment, or a run named after the recipe, is not in its tracking store."""


@dataclass
class RunSummary:
    """The newest run of a recipe, as MLflow records it."""

    run_id: str
    experiment: str
    experiment_id: str
    status: str
    tracking_uri: str
    artifact_uri: str
    metrics: dict[str, float] = field(default_factory=dict)
    params: int = 0
    artifacts: list[str] = field(default_factory=list)
    heldout_curve: list[tuple[int, float]] = field(default_factory=list)
    """`(RL step, held-out pass@1)`: the starting policy at 0 and each scored checkpoint."""


def latest_run(recipe: Recipe) -> RunSummary:
    """The newest MLflow run named after `recipe` (or its `tracking.run_name`).

    Raises:
        RunNotFoundError: the experiment or a run of the recipe does not exist (a `LookupError`).
    """
    import mlflow

    tracking: TrackingConfig = recipe.tracking
    client = mlflow.MlflowClient(tracking_uri=tracking.tracking_uri)
    experiment = client.get_experiment_by_name(tracking.experiment)
    if experiment is None:
        raise RunNotFoundError(
            f"no MLflow experiment {tracking.experiment!r} at {tracking.tracking_uri}; "
            f"train the recipe first (agent-rl train --recipe ...)"
        )
    name = tracking.run_name or recipe.name
    runs = client.search_runs(
        [experiment.experiment_id],
        filter_string=f"tags.mlflow.runName = '{name}'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    if not runs:
        raise RunNotFoundError(f"no run named {name!r} in experiment {tracking.experiment!r}")
    run = runs[0]
    artifacts = sorted(item.path for item in client.list_artifacts(run.info.run_id))
    curve = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "eval/pass_at_1")}
    if "eval_before/pass_at_1" in run.data.metrics and curve:
        curve[0] = run.data.metrics["eval_before/pass_at_1"]
    return RunSummary(
        run_id=run.info.run_id,
        experiment=tracking.experiment,
        experiment_id=run.info.experiment_id,
        status=run.info.status,
        tracking_uri=tracking.tracking_uri,
        artifact_uri=run.info.artifact_uri,
        metrics=dict(run.data.metrics),
        params=len(run.data.params),
        artifacts=artifacts,
        heldout_curve=sorted(curve.items()),
    )


LOCAL_UI = "http://127.0.0.1:5000"
"""Where `mlflow ui` (the command `describe_run` prints) serves a local store."""


def ui_address(tracking_uri: str) -> str:
    """The MLflow UI of a tracking URI: the server itself, or `mlflow ui` on loopback."""
    if tracking_uri.startswith(("http://", "https://")):
        return tracking_uri.rstrip("/")
    return LOCAL_UI


def episode_pages(tracking_uri: str, experiment_id: str, run_id: str) -> list[str]:
    """Where a run's episodes are read, one line each: its page and traces in the MLflow UI,
    and its token-level views (markdown, for the flow's summary and `agent-rl runs latest`)."""
    ui = ui_address(tracking_uri)
    # MLflow 3's run page shows its traces in the tab at `/evaluations`.
    return [
        f"run page: {ui}/#/experiments/{experiment_id}/runs/{run_id}",
        f"episode traces: {ui}/#/experiments/{experiment_id}/runs/{run_id}/evaluations",
        f"token-level views: `agent-rl view {run_id}` (or the run's artifacts "
        "`trajectories/step-*.html`)",
    ]


def run_episode_pages(config: TrackingConfig, run_id: str) -> list[str]:
    """`episode_pages` of the MLflow run `run_id` under the recipe's tracking section."""
    import mlflow

    run = mlflow.MlflowClient(tracking_uri=config.tracking_uri).get_run(run_id)
    return episode_pages(config.tracking_uri, run.info.experiment_id, run_id)


def _ui_command(tracking_uri: str) -> str:
    if tracking_uri.startswith(("http://", "https://")):
        return f"open {tracking_uri}"
    if tracking_uri.startswith("sqlite:///"):
        # The UI resolves a relative sqlite path against its working directory.
        db = Path(tracking_uri.removeprefix("sqlite:///")).resolve()
        tracking_uri = f"sqlite:///{db}"
    return f"mlflow ui --backend-store-uri {tracking_uri} --host 127.0.0.1 --port 5000"


def noise_verdict(low: float, high: float) -> str:
    """A paired interval of a delta in words: beyond noise only when it excludes 0."""
    if low > 0:
        return "a gain beyond noise"
    if high < 0:
        return "a loss beyond noise"
    return "not distinguishable from noise"


def curve_line(points: Sequence[tuple[int, float]]) -> str:
    """The held-out curve in one line: `held-out pass@1 by RL step: 0: 0.396, 4: 0.438, ...`."""
    shown = ", ".join(f"{step}: {value:.3f}" for step, value in points)
    return f"held-out pass@1 by RL step (same tasks): {shown}"


def before_after_lines(metrics: Mapping[str, float]) -> list[str]:
    """Held-out pass@1 before -> after RL, the paired delta with its 95% interval and what it
    means, and a table of exit reasons before and after (samples per reason), from a run's
    MLflow metrics (`eval_before/...`, `eval/...`); none when the run has no before-RL
    evaluation."""
    before, after = (metrics.get(f"{k}/pass_at_1") for k in ("eval_before", "eval"))
    if before is None or after is None:
        return []
    lines = [f"held-out pass@1: {before:.3f} before RL -> {after:.3f} after RL"]
    low, high = (
        metrics.get("eval/pass_at_1_delta_ci_low"),
        metrics.get("eval/pass_at_1_delta_ci_high"),
    )
    delta = metrics.get("eval/pass_at_1_delta", after - before)
    if low is not None and high is not None:
        tasks = int(metrics.get("eval/paired_tasks", 0))
        lines.append(
            f"pass@1 delta {delta * 100:+.1f} points, 95% paired bootstrap interval "
            f"[{low * 100:+.1f}, {high * 100:+.1f}] over {tasks} tasks: "
            f"{noise_verdict(low, high)}"
        )
    else:
        lines.append(f"pass@1 delta {delta * 100:+.1f} points (no paired interval logged)")
    counts = {}
    for side in ("eval_before", "eval"):
        samples = metrics.get(f"{side}/samples")
        prefix = f"{side}/exit/"
        shares = {k.removeprefix(prefix): v for k, v in metrics.items() if k.startswith(prefix)}
        counts[side] = {
            reason: f"{round(share * samples)}" if samples else f"{share:.0%}"
            for reason, share in shares.items()
        }
    reasons = sorted({*counts["eval_before"], *counts["eval"]})
    if reasons:
        lines += ["", "| exit reason | before RL | after RL |", "|---|---|---|"]
        lines += [
            f"| {reason} | {counts['eval_before'].get(reason, '0')} | "
            f"{counts['eval'].get(reason, '0')} |"
            for reason in reasons
        ]
    return lines


def describe_run(summary: RunSummary, prefect_api_url: str | None = None) -> str:
    """Where the run is, its final metrics, and how to open the UIs."""
    shown = [
        name
        for key in SUMMARY_METRICS
        for name in sorted(summary.metrics)
        if name == key or (key.endswith("_") and name.startswith(key))
    ]
    shown += sorted(name for name in summary.metrics if name not in shown)
    lines = [
        f"MLflow run {summary.run_id} ({summary.status}) in experiment {summary.experiment!r}",
        f"  tracking URI: {summary.tracking_uri}",
        f"  artifacts:    {summary.artifact_uri} ({', '.join(summary.artifacts) or 'none'})",
        f"  params:       {summary.params}",
    ]
    lines += [f"  {line}" for line in before_after_lines(summary.metrics)]
    if len(summary.heldout_curve) > 1:
        lines.append(f"  {curve_line(summary.heldout_curve)}")
    lines += [f"  {name}: {summary.metrics[name]:.4g}" for name in shown[:12]]
    if len(shown) > 12:
        lines.append(f"  ... and {len(shown) - 12} more metrics")
    lines.append(f"MLflow UI:  {_ui_command(summary.tracking_uri)}  (then {LOCAL_UI})")
    lines += [
        f"  {line}"
        for line in episode_pages(summary.tracking_uri, summary.experiment_id, summary.run_id)
    ]
    if prefect_api_url:
        ui = prefect_api_url.removesuffix("/api")
        lines.append(f"Prefect UI: {ui}  (flow runs, task logs, the agent-rl-summary artifact)")
    return "\n".join(lines)


STAGES_TAG = "agent_rl.stages_of"
"""Tag of an MLflow run the flow opened for the stages around a verl run (`verl_stage_run`)."""


def verl_stage_run(recipe: Recipe, run_dir: Path) -> str:
    """The MLflow run the flow logs the stages around verl's training into.

    verl logs its steps to a run named after the recipe in the recipe's experiment; the stages
    (Best-of-N, served evaluations, what was served) go into that same run. When verl logged
    none, a run of that name is opened and tagged `agent_rl.stages_of` with the run directory.
    """
    from uni_agent_core.tracking.mlflow_tracker import MlflowTracker

    try:
        return latest_run(recipe).run_id
    except RunNotFoundError:
        tracker = MlflowTracker(recipe.tracking, run_name=recipe.name, run_dir=run_dir)
        tracker.client.set_tag(tracker.run_id, STAGES_TAG, str(run_dir.resolve()))
        return tracker.run_id
