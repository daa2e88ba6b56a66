"""PNG plots of run metrics (Agg backend; no display needed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path


def plot_curves(
    series: Mapping[str, Mapping[str, Sequence[tuple[int, float]]]],
    keys: Sequence[str],
    target: str | Path,
    title: str = "",
) -> Path:
    """One panel per metric key, one line per run: `series[run][key] = [(step, value), ...]`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(len(keys), 1, figsize=(7, 2.6 * len(keys)), squeeze=False)
    for axis, key in zip(axes[:, 0], keys, strict=True):
        drawn = 0
        for run, metrics in series.items():
            points = sorted(metrics.get(key, []))
            if points:
                axis.plot([s for s, _ in points], [v for _, v in points], marker=".", label=run)
                drawn += 1
        axis.set_title(key)
        axis.set_xlabel("step")
        axis.grid(alpha=0.3)
        if drawn > 1:
            axis.legend(fontsize="small")
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


HELDOUT_CURVE = "heldout_curve.png"
"""The held-out curve's file name, in the run directory's `eval/` and the MLflow run's."""


def plot_heldout_curve(run: str, points: Sequence[tuple[int, float]], directory: Path) -> Path:
    """Held-out pass@1 by RL step (`points`: the starting policy at step 0, then each scored
    checkpoint): the same tasks scored the same way at every point, unlike the training reward,
    whose steps draw different tasks."""
    return plot_curves(
        {run: {"held-out pass@1": list(points)}},
        ["held-out pass@1"],
        Path(directory) / HELDOUT_CURVE,
        f"{run}: held-out pass@1 by RL step (same tasks, greedy)",
    )
