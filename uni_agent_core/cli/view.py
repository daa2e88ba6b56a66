"""`agent-rl view`'s glue: resolve a run directory or MLflow run id, then serve its step pages
or write one step's page to a file."""

from __future__ import annotations

import tempfile
from pathlib import Path

from uni_agent_core.tracking.runs import ui_address
from uni_agent_core.viewer.export import write_step_view
from uni_agent_core.viewer.html import trace_url_template
from uni_agent_core.viewer.server import serve
from uni_agent_core.viewer.source import resolve_source
from uni_agent_core.viewer.steps import ViewerError, find_step


def view_command(
    target: str,
    *,
    step: int | None,
    out: str | None,
    port: int,
    tracking_uri: str,
    mlflow_ui: str | None,
    experiment_id: str | None,
) -> int:
    """Serve `target`'s step pages on 127.0.0.1, or write one step's page to `out`.

    Trace links need the MLflow UI address and the run's experiment: an MLflow run id gives the
    experiment and the UI address (a tracking server's own, or for a local store where
    `mlflow ui` serves it), a run directory needs `mlflow_ui` and `experiment_id`.

    Raises:
        ViewerError: the run, its trajectories or the step cannot be found.
    """
    if port < 0 or port > 65535:
        raise ViewerError(f"--port {port} is not a port (0-65535; 0 picks a free one)")
    with tempfile.TemporaryDirectory(prefix="agent-rl-view-") as scratch:
        source = resolve_source(target, tracking_uri=tracking_uri, download_dir=Path(scratch))
        experiment = experiment_id or source.experiment_id
        if mlflow_ui is None and source.run_id:
            mlflow_ui = ui_address(tracking_uri)  # a local store: where `mlflow ui` serves it
        trace_url = trace_url_template(mlflow_ui, experiment) if mlflow_ui and experiment else None
        if mlflow_ui and not experiment:
            print("note: no trace links: a run directory needs --experiment-id for them")
        if out is None:
            serve(source, port=port, trace_url=trace_url, step=step)
            return 0
        step_file = find_step(source.trajectories_dir, step)
        try:
            written = write_step_view(
                step_file, Path(out), run_name=source.run_name, trace_url=trace_url
            )
        except OSError as error:
            raise ViewerError(f"cannot write {out}: {error.strerror or error}") from error
        print(f"step {step_file.step} of {source.run_name}: {written}")
    return 0
