"""Comparing MLflow runs: params and final metrics side by side, and their curves as a PNG.

`compare_runs(run_ids, tracking_uri)` reads each run's params and metric histories; the table
lists every param that differs between runs (plus the recipe name) and the last value of every
metric; `agent-rl compare` prints it as markdown and writes the plot, and the `compare-runs`
flow publishes both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from uni_agent_core.tracking.mlflow_tracker import metric_name
from uni_agent_core.tracking.plots import plot_curves

DEFAULT_CURVES = ("train/reward_mean", "train/pass_rate", "eval/pass@1")


@dataclass
class Comparison:
    run_ids: list[str]
    names: list[str]
    params: dict[str, list[str]]
    """Params that differ between the runs (and `recipe`), one value per run."""
    final: dict[str, list[float | None]]
    """Last value of each metric per run."""
    plot: Path | None = None

    def markdown(self) -> str:
        header = "| | " + " | ".join(self.names) + " |"
        lines = [header, "|---" * (len(self.names) + 1) + "|"]
        for key, values in sorted(self.params.items()):
            lines.append(f"| {key} | " + " | ".join(values) + " |")
        for key, finals in sorted(self.final.items()):
            cells = ["" if v is None else f"{v:.4g}" for v in finals]
            lines.append(f"| {key} | " + " | ".join(cells) + " |")
        return "\n".join(lines) + "\n"


def compare_runs(
    run_ids: Sequence[str],
    *,
    tracking_uri: str,
    plot_path: str | Path | None = None,
    curves: Sequence[str] = DEFAULT_CURVES,
) -> Comparison:
    """Read the runs and build the comparison (and the plot when `plot_path` is given).

    Raises:
        ValueError: fewer than two runs, or a run id MLflow does not know.
    """
    import mlflow

    if len(run_ids) < 2:
        raise ValueError("compare needs at least two run ids")
    client = mlflow.MlflowClient(tracking_uri=tracking_uri)
    runs = []
    for run_id in run_ids:
        try:
            runs.append(client.get_run(run_id))
        except mlflow.exceptions.MlflowException as error:
            raise ValueError(f"unknown MLflow run {run_id!r} at {tracking_uri}") from error
    names = [run.info.run_name or run.info.run_id[:8] for run in runs]
    keys = sorted({k for run in runs for k in run.data.params})
    params = {
        key: [run.data.params.get(key, "") for run in runs]
        for key in keys
        if key == "recipe" or len({run.data.params.get(key) for run in runs}) > 1
    }
    metric_keys = sorted({k for run in runs for k in run.data.metrics})
    final = {key: [run.data.metrics.get(key) for run in runs] for key in metric_keys}
    comparison = Comparison(list(run_ids), names, params, final)
    if plot_path is not None:
        series = {
            name: {
                key: [
                    (m.step, m.value)
                    for m in client.get_metric_history(run.info.run_id, metric_name(key))
                ]
                for key in curves
            }
            for name, run in zip(names, runs, strict=True)
        }
        comparison.plot = plot_curves(series, list(curves), plot_path, "agent-rl runs")
    return comparison
