"""Comparing MLflow runs: differing params, final metrics and a curves PNG."""

import pytest

from uni_agent_core.config.evaluation import TrackingConfig
from uni_agent_core.tracking.compare import compare_runs
from uni_agent_core.tracking.mlflow_tracker import MlflowTracker


def test_compare_two_runs(tmp_path) -> None:
    config = TrackingConfig(tracking_uri=f"sqlite:///{tmp_path}/mlruns.db", experiment="c")
    ids = []
    for name, lr, rewards in (("a", 0.1, [0.1, 0.3]), ("b", 0.2, [0.2, 0.5])):
        tracker = MlflowTracker(config, run_name=name)
        tracker.log_params({"recipe": "r", "trainer": {"lr": lr, "mode": "sync"}})
        for step, reward in enumerate(rewards, 1):
            tracker.log_step(step, {"train/reward_mean": reward, "eval/pass@1": reward / 2})
        tracker.finish()
        ids.append(tracker.run_id)
    comparison = compare_runs(ids, tracking_uri=config.tracking_uri, plot_path=tmp_path / "c.png")
    assert comparison.names == ["a", "b"]
    assert comparison.params == {"recipe": ["r", "r"], "trainer.lr": ["0.1", "0.2"]}
    assert comparison.final["train/reward_mean"] == [0.3, 0.5]
    assert comparison.final["eval/pass_at_1"] == [0.15, 0.25]
    assert comparison.plot.stat().st_size > 1000
    assert "| trainer.lr | 0.1 | 0.2 |" in comparison.markdown()
    with pytest.raises(ValueError, match="at least two"):
        compare_runs(ids[:1], tracking_uri=config.tracking_uri)
