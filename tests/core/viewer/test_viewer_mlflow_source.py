"""An MLflow run id resolves to its downloaded `trajectories` artifacts (logged flat, or nested
as the training run's `log_artifact(<dir>, "trajectories")` leaves them) and renders with trace
links into its experiment; an unknown run or one without trajectories is a clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

from uni_agent_core.cli.main import main
from uni_agent_core.viewer.source import resolve_source
from uni_agent_core.viewer.steps import ViewerError, read_step

mlflow = pytest.importorskip("mlflow")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, object, str]:
    """A sqlite store with one experiment whose artifacts live under the temporary directory."""
    root = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{root}/mlruns.db"
    client = mlflow.MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment("viewer", artifact_location=(root / "art").as_uri())
    return uri, client, experiment


@pytest.fixture
def logged_run(store, run_dir: Path) -> str:
    """A run that logged `<run dir>/trajectories` flat under `trajectories/` (log_artifacts)."""
    uri, client, experiment = store
    run = client.create_run(experiment, run_name="logged-run")
    client.log_artifacts(run.info.run_id, str(run_dir / "trajectories"), "trajectories")
    return run.info.run_id


def test_a_run_id_resolves_to_its_downloaded_step_files(store, logged_run, tmp_path):
    uri, _, experiment = store
    source = resolve_source(logged_run, tracking_uri=uri, download_dir=tmp_path / "dl")
    assert (source.run_name, source.run_id, source.experiment_id) == (
        "logged-run",
        logged_run,
        experiment,
    )
    assert source.trajectories_dir.is_relative_to(tmp_path / "dl")
    assert [e.task_id for e in read_step(source.trajectories_dir / "step-000001.jsonl")] == [
        "task-a",
        "task-b",
        "task-c",
    ]


def test_the_training_runs_nested_layout_resolves(store, run_dir, tmp_path):
    uri, client, experiment = store
    run = client.create_run(experiment, run_name="trained")
    client.log_artifact(run.info.run_id, str(run_dir / "trajectories"), "trajectories")
    source = resolve_source(run.info.run_id, tracking_uri=uri, download_dir=tmp_path / "dl")
    assert source.trajectories_dir.parts[-2:] == ("trajectories", "trajectories")


def test_view_renders_a_run_id_with_trace_links(store, logged_run, tmp_path, capsys, parse_page):
    uri, _, experiment = store
    out = tmp_path / "page.html"
    argv = ["view", logged_run, "--tracking-uri", uri, "--step", "1", "--out", str(out)]
    assert main([*argv, "--mlflow-ui", "http://ui:5000/"]) == 0
    assert capsys.readouterr().out.strip() == f"step 1 of logged-run: {out}"
    page = parse_page(out.read_text(encoding="utf-8"))
    assert len(page.by_class("chain")) == 4
    [href] = {a.attrs["href"] for a in page.by_class("trace-link")}
    assert href == (
        f"http://ui:5000/#/experiments/{experiment}/traces?selectedEvaluationId=tr-abc%201"
    )


def test_an_unknown_run_id_is_an_error_line(store, capsys):
    uri, _, _ = store
    assert main(["view", "0" * 32, "--tracking-uri", uri]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line == (
        f"error: '{'0' * 32}' is neither a directory nor an MLflow run at {uri} "
        "(pass --tracking-uri for another store)"
    )


def test_a_run_without_trajectories_is_an_error(store, tmp_path):
    uri, client, experiment = store
    run = client.create_run(experiment, run_name="empty")
    with pytest.raises(ViewerError, match="logged no trajectories/ artifacts"):
        resolve_source(run.info.run_id, tracking_uri=uri, download_dir=tmp_path)
