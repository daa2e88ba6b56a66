"""The `compare-runs` flow (deployment `on-demand`): a table of params and final metrics of
MLflow runs side by side and a PNG of their curves, published as Prefect artifacts."""

from __future__ import annotations

from pathlib import Path

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from uni_agent_core.tracking.compare import compare_runs


@task(name="compare")
def compare(run_ids: list[str], tracking_uri: str, plot: str) -> dict:
    comparison = compare_runs(run_ids, tracking_uri=tracking_uri, plot_path=plot)
    return {
        "markdown": comparison.markdown(),
        "plot": str(comparison.plot),
        "names": comparison.names,
        "params": comparison.params,
        "final": comparison.final,
    }


@flow(name="compare-runs", log_prints=True)
def compare_flow(
    run_ids: list[str], tracking_uri: str = "sqlite:///mlruns.db", plot: str = "compare.png"
) -> dict:
    """Compare runs; the table goes to a Prefect table artifact with the MLflow location."""
    result = compare(run_ids, tracking_uri, str(Path(plot).resolve()))
    rows = [
        {"key": key, **dict(zip(result["names"], values, strict=True))}
        for key, values in {**result["params"], **result["final"]}.items()
    ]
    create_table_artifact(rows, key="compare-runs", description=f"MLflow: {tracking_uri}")
    create_markdown_artifact(
        result["markdown"] + f"\nCurves: `{result['plot']}`; MLflow: `{tracking_uri}`",
        key="compare-runs-markdown",
    )
    print(result["markdown"])
    return result
