"""The MLflow tracker: flattened params, one point per step even when writes are retried."""

import mlflow

from uni_agent_core.config.evaluation import TrackingConfig
from uni_agent_core.tracking.mlflow_tracker import MlflowTracker, flatten


def test_flatten() -> None:
    assert flatten({"a": {"b": 1, "c": "x"}, "d": [1, 2]}) == {
        "a.b": "1",
        "a.c": "x",
        "d": "[1, 2]",
    }


def test_retried_and_resumed_steps_are_not_duplicated(tmp_path) -> None:
    config = TrackingConfig(tracking_uri=f"sqlite:///{tmp_path}/mlruns.db", experiment="t")
    tracker = MlflowTracker(config, run_name="r")
    tracker.log_params({"trainer": {"lr": 0.1}})
    assert tracker.log_step(1, {"train/loss": 0.5, "train/pearson": float("nan")})
    assert not tracker.log_step(1, {"train/loss": 0.5})  # retried write
    tracker.log_step(2, {"train/loss": 0.25})
    tracker.finish("KILLED")

    resumed = MlflowTracker(config, run_name="r", run_id=tracker.run_id)
    assert resumed.logged_up_to == 2
    assert not resumed.log_step(2, {"train/loss": 9.0})
    resumed.log_step(3, {"train/loss": 0.125})
    resumed.log_params({"trainer": {"lr": 0.1}})  # already there: no error
    resumed.finish()
    client = mlflow.MlflowClient(tracking_uri=config.tracking_uri)
    history = client.get_metric_history(tracker.run_id, "train/loss")
    assert [(m.step, m.value) for m in history] == [(1, 0.5), (2, 0.25), (3, 0.125)]
    run = client.get_run(tracker.run_id)
    assert run.data.params["trainer.lr"] == "0.1" and run.info.status == "FINISHED"
    assert "train/pearson" not in run.data.metrics
