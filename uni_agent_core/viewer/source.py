"""Where a run's step files are: a run directory on disk, or an MLflow run's artifacts.

`resolve_source(target)` takes what `agent-rl view` was given. An existing directory is a run
directory (its `trajectories/`; the trajectories directory itself is accepted too); anything
else is an MLflow run id, whose `trajectories` artifacts are downloaded into a directory the
caller owns. Each way that fails is a `ViewerError` saying what was looked for and where.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from uni_agent_core.rundir.layout import TRAJECTORIES
from uni_agent_core.viewer.steps import ViewerError, list_steps

DEFAULT_TRACKING_URI = "sqlite:///mlruns.db"
"""The project's local MLflow store (as `tracking.tracking_uri` defaults)."""

SQLITE_PREFIX = "sqlite:///"


@dataclass(frozen=True)
class ViewSource:
    """A run's step files and what the pages say about the run."""

    trajectories_dir: Path
    run_name: str
    run_id: str | None = None
    """The MLflow run, when the source is one."""
    experiment_id: str | None = None
    """The MLflow run's experiment (trace links need it); None for a run directory."""


def resolve_source(
    target: str | Path, *, tracking_uri: str = DEFAULT_TRACKING_URI, download_dir: Path
) -> ViewSource:
    """A run directory, or else an MLflow run id, as a `ViewSource`.

    Args:
        target: a run directory (or its `trajectories/`), or an MLflow run id.
        tracking_uri: the MLflow store a run id is looked up in.
        download_dir: where an MLflow run's artifacts are downloaded (the caller removes it).

    Raises:
        ViewerError: a path that is no directory, a directory without step files, an unknown
            run id, or a run that logged no trajectories.
    """
    path = Path(target)
    if path.is_dir():
        return run_dir_source(path)
    text = str(target)
    if "/" in text or "\\" in text or path.exists():
        raise ViewerError(f"no run directory at {text} (give a run directory or an MLflow run id)")
    return mlflow_run_source(text, tracking_uri=tracking_uri, download_dir=download_dir)


def run_dir_source(run_dir: Path) -> ViewSource:
    """The step files of a run directory (`<run dir>/trajectories/`, or the directory itself
    when it holds step files).

    Raises:
        ViewerError: neither holds a step file.
    """
    run_dir = Path(run_dir)
    if list_steps(run_dir / TRAJECTORIES):
        return ViewSource(run_dir / TRAJECTORIES, run_name=run_dir.resolve().name)
    if list_steps(run_dir):
        named = run_dir.resolve()
        return ViewSource(
            run_dir, run_name=(named.parent if named.name == TRAJECTORIES else named).name
        )
    raise ViewerError(
        f"no trajectories in {run_dir}: expected {run_dir / TRAJECTORIES}/step-NNNNNN.jsonl "
        "(a run writes them when tracking.log_trajectories_per_step > 0)"
    )


def mlflow_run_source(run_id: str, *, tracking_uri: str, download_dir: Path) -> ViewSource:
    """Download an MLflow run's `trajectories` artifacts and point at their step files.

    Raises:
        ViewerError: no MLflow store at a sqlite URI, an unknown run id, or a run without
            trajectories artifacts.
    """
    _require_sqlite_store(tracking_uri)
    import mlflow
    from mlflow.exceptions import MlflowException

    client = mlflow.MlflowClient(tracking_uri=tracking_uri)
    try:
        run = client.get_run(run_id)
    except MlflowException as error:
        raise ViewerError(
            f"{run_id!r} is neither a directory nor an MLflow run at {tracking_uri} "
            "(pass --tracking-uri for another store)"
        ) from error
    if not client.list_artifacts(run_id, TRAJECTORIES):
        raise ViewerError(
            f"MLflow run {run_id} logged no {TRAJECTORIES}/ artifacts (a run logs them at its "
            "end when tracking.log_trajectories_per_step > 0)"
        )
    download_dir = Path(download_dir)
    download_dir.mkdir(parents=True, exist_ok=True)
    local = Path(
        mlflow.artifacts.download_artifacts(
            run_id=run_id,
            artifact_path=TRAJECTORIES,
            dst_path=str(download_dir),
            tracking_uri=tracking_uri,
        )
    )
    # `MlflowClient.log_artifact(<dir>, "trajectories")` nests the directory under its own
    # name, so a training run's step files sit at trajectories/trajectories/.
    for candidate in (local, local / TRAJECTORIES):
        if list_steps(candidate):
            return ViewSource(
                trajectories_dir=candidate,
                run_name=run.info.run_name or run_id,
                run_id=run_id,
                experiment_id=run.info.experiment_id,
            )
    raise ViewerError(f"MLflow run {run_id}'s {TRAJECTORIES}/ artifacts hold no step files")


def _require_sqlite_store(tracking_uri: str) -> None:
    """A sqlite URI must name an existing file: MLflow would create an empty store instead."""
    if not tracking_uri.startswith(SQLITE_PREFIX):
        return
    database = Path(tracking_uri[len(SQLITE_PREFIX) :])
    if not database.is_file():
        raise ViewerError(
            f"no MLflow store at {database} (tracking URI {tracking_uri}); give a run "
            "directory, or --tracking-uri for the store that holds the run"
        )
